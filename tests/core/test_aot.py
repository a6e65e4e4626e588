"""Ahead-of-time compiled kernels (tracekit._aot, tools/build_aot.py): same results as numba's JIT, no numba import
on the CLI's hot paths, and the JIT wherever an export is stale or missing.

The tests that need the exports ``make install`` built skip, with the reason, when there are none (no C compiler)
or when they are stale (a kernel's source changed since: ``make test`` builds them again first, ``make aot`` too).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from tracekit import _aot

ROOT = Path(__file__).resolve().parents[2]
CHAKRA = ROOT / "sample_traces" / "chakra"
sys.path.insert(0, str(ROOT / "tools"))


def _not_built() -> str | None:
    """Why the exports cannot be used here, None when every kernel of the manifest has its exports."""
    if os.environ.get(_aot.ENV) == "0":
        return f"{_aot.ENV}=0 is set"
    try:
        manifest = json.loads(_aot.MANIFEST.read_text(encoding="utf-8"))
    except OSError:
        return "no ahead-of-time kernels were built (make install builds them; it needs setuptools and a C compiler)"
    stale = [kernel for kernel in manifest["kernels"] if not _aot.exports_of(kernel)]
    return f"ahead-of-time kernels stale or unusable here ({', '.join(stale)}): run `make aot`" if stale else None


NOT_BUILT = _not_built()
needs_exports = pytest.mark.skipif(NOT_BUILT is not None, reason=str(NOT_BUILT))

# Reads the bundled sets (columns, names, two integer attributes), transforms two of them with the CLI and replays
# one; prints what it found and whether numba was imported. argv: sample directory, output directory, then
# ``module=hash`` pairs written over tracekit._aot's source hashes (a stale source).
PROBE = """
import contextlib, hashlib, io, json, sys
from pathlib import Path
import numpy as np
from tracekit import _aot
from tracekit.cli import cli
from tracekit.io import read_traceset

chakra, out = Path(sys.argv[1]), Path(sys.argv[2])
_aot._module_hashes.update(arg.split("=") for arg in sys.argv[3:])
digest = hashlib.sha256()
for name in ("all_reduce", "custom_allreduce", "feeder.0.et"):
    for rank, trace in read_traceset(str(chakra / name)).items():
        cols = trace.columns()
        for field in ("ids", "types", "duration_ns", "start_time_ns", "ctrl_ptr", "ctrl_ids", "data_ptr", "data_ids"):
            digest.update(np.ascontiguousarray(getattr(cols, field)).tobytes())
        digest.update("|".join(cols.names).encode())
        for attr in ("comm_size", "comm_type"):
            present, values = cols.attr_int(attr)
            digest.update(present.tobytes() + values.tobytes())

def tracekit(*args):
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        cli.main(args=[str(a) for a in args], prog_name="tracekit", standalone_mode=False)
    return text.getvalue()

if out.name:
    tracekit("transform", chakra / "all_reduce", "--scale-compute", "2", "--compact", "-o", out / "t1")
    feeder = chakra / "feeder.0.et"
    tracekit("transform", feeder, "--scale-compute", "2", "--compact", "--drop-cpu-ops", "-o", out / "t2")
    replay = json.loads(tracekit("replay", chakra / "all_reduce", "--hw", "dgx-a100", "--json"))["iteration_time_ns"]
else:
    replay = None
print(json.dumps({"columns": digest.hexdigest(), "iteration_time_ns": replay, "numba": "numba" in sys.modules}))
"""


def _probe(out: Path | str, *stale: str, jit: bool = False) -> dict:
    """:data:`PROBE` in a fresh process (``TRACEKIT_AOT=0`` with ``jit``); ``out`` "" reads only."""
    env = {k: v for k, v in os.environ.items() if k != _aot.ENV}
    if jit:
        env[_aot.ENV] = "0"
    run = subprocess.run(
        [sys.executable, "-c", PROBE, str(CHAKRA), str(out), *stale], env=env, capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout.splitlines()[-1])


@needs_exports
def test_exports_and_jit_agree_on_the_bundled_traces(tmp_path):
    aot, jit = _probe(tmp_path / "aot"), _probe(tmp_path / "jit", jit=True)
    assert (aot["numba"], jit["numba"]) == (False, True)  # each ran the way it was asked to
    assert aot["columns"] == jit["columns"]
    assert aot["iteration_time_ns"] == jit["iteration_time_ns"] > 0
    written = sorted(p.relative_to(tmp_path / "aot") for p in (tmp_path / "aot").iterdir())
    assert [str(p) for p in written] == [
        "t1.0.et", "t1.1.et", "t1.2.et", "t1.3.et", "t1.comm_groups.json", "t2.0.et", "t2.comm_groups.json"
    ]  # fmt: skip
    for path in written:
        assert (tmp_path / "aot" / path).read_bytes() == (tmp_path / "jit" / path).read_bytes(), path


@needs_exports
def test_a_changed_kernel_source_runs_through_the_jit():
    fresh = _probe("")
    stale = _probe("", "tracekit.wire.kernels=" + "0" * 64)  # the hash of an edited _wirekernels.py
    assert (fresh["numba"], stale["numba"]) == (False, True)
    assert stale["columns"] == fresh["columns"]


@needs_exports
def test_exports_are_found_only_when_current(monkeypatch):
    walk = "tracekit.wire.kernels.walk_nodes"
    assert len(_aot.exports_of(walk)) == len(json.loads(_aot.MANIFEST.read_text())["kernels"][walk]["exports"]) > 0
    monkeypatch.setitem(_aot._module_hashes, "tracekit.wire.kernels", "0" * 64)
    assert _aot.exports_of(walk) == {}
    monkeypatch.undo()
    monkeypatch.setenv(_aot.ENV, "0")
    assert _aot.exports_of(walk) == {}


# put_varints on values with a stride (layout A: no export has that key) and on the same values contiguous.
STRIDED = """
import sys
import numpy as np
from tracekit.wire.encode import put_varints
values = np.array([300, 0, 1, 0], dtype=np.uint64)
if sys.argv[1] == "strided":
    values = values[::2]
else:
    values = values[::2].copy()
out = np.zeros(3, dtype=np.uint8)
put_varints(values, np.array([0, 2], dtype=np.int64), out)
print(out.tolist(), "numba" in sys.modules)
"""


@needs_exports
@pytest.mark.parametrize(("layout", "jit"), [("strided", True), ("contiguous", False)])
def test_arguments_without_an_export_run_through_the_jit(layout, jit):
    run = subprocess.run([sys.executable, "-c", STRIDED, layout], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["[172,", "2,", "1]", str(jit)]  # varint(300) = AC 02, varint(1) = 01


CLI = """
import sys
from tracekit.cli import main
sys.argv[0] = "tracekit"
try:
    main()
finally:
    print("numba imported:", "numba" in sys.modules, file=sys.stderr)
"""


@needs_exports
@pytest.mark.parametrize(
    "args",
    [
        ["info", CHAKRA / "all_reduce"],
        ["validate", CHAKRA / "feeder.0.et"],
        ["transform", CHAKRA / "all_reduce", "--scale-compute", "2", "--compact", "-o", "OUT"],
        ["transform", CHAKRA / "feeder.0.et", "--scale-compute", "2", "--compact", "-o", "OUT"],  # one rank
        ["replay", CHAKRA / "all_reduce", "--hw", "dgx-a100"],
    ],
    ids=["info", "validate", "transform", "transform-one-rank", "replay"],
)
def test_cli_hot_paths_do_not_import_numba(args, tmp_path):
    argv = [str(tmp_path / "out") if a == "OUT" else str(a) for a in args]
    run = subprocess.run([sys.executable, "-c", CLI, *argv], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert run.stderr.splitlines()[-1] == "numba imported: False"


def test_the_build_key_of_a_type_is_the_key_of_its_values():
    numba = pytest.importorskip("numba")
    data = np.arange(12, dtype=np.int32).reshape(3, 4)
    values = [
        np.zeros(3, dtype=np.uint8),
        np.frombuffer(b"abc", dtype=np.uint8),  # read-only
        data,
        np.asfortranarray(data),
        data[:, ::2],  # neither C nor F: layout A
        np.zeros(0, dtype=np.float64),
        np.ones(2, dtype=bool),
        np.zeros((), dtype=np.float32),
        0,
        -(2**63),
        2**63 - 1,
        2**63,  # uint64
        True,
        1.5,
        None,
        np.int32(3),
        np.uint64(7),
        np.float32(0.5),
        np.bool_(False),
        (1, 2),
        (1, 2.5, None),
        ((1, 2), np.zeros(2, dtype=np.int64)),
    ]
    for value in values:
        key = _aot.value_key(value)
        assert key is not None, value
        assert _aot.type_key(numba.typeof(value)) == key, value
    assert _aot.value_key(np.zeros(2, dtype=np.int64))[1:] == ("int64", 1, "C", False)
    assert _aot.value_key("text") is None and _aot.type_key(numba.typeof("text")) is None


def test_a_signature_numba_specialised_for_a_constant_gets_no_export():
    # find_attrs calls walk_nodes with a constant mode: numba compiles walk_nodes for Literal[int](mode) too, which
    # shares the plain signature's key; exported, it ran every mode as that one (a fresh clone's info segfaulted)
    numba = pytest.importorskip("numba")
    from numba.core import types

    @numba.njit
    def inner(x, mode):
        return x + mode

    @numba.njit
    def outer(x):
        return inner(x, 2)

    assert outer(1) == 3 and inner(1, 3) == 4
    keys = [tuple(_aot.type_key(t) for t in sig) for sig in inner.signatures]
    assert set(keys) == {("int64", None), ("int64", "int64")}
    assert _aot.type_key(types.Tuple((types.int64, types.IntegerLiteral(2)))) is None


def test_a_kernel_with_two_signatures_of_one_key_keeps_the_jit(monkeypatch, capsys):
    pytest.importorskip("numba")
    import build_aot
    from numba.core import types

    class Twice:  # a dispatcher whose two signatures map to one key (float32 and float64 arrays would not)
        targetoptions = {"nogil": True}
        py_func = staticmethod(lambda x: x)
        signatures = [(types.int64,), (types.int64,)]
        overloads = {(types.int64,): SimpleNamespace(signature=SimpleNamespace(return_type=types.int64))}

    monkeypatch.setattr(build_aot.warm_numba, "kernel_objects", lambda: [("tracekit._aot.twice", Twice())])
    monkeypatch.setattr(build_aot, "_compiled_code", lambda fn, seen: ({"tracekit._aot"}, 1))
    assert build_aot.collect() == ([], {})
    assert "tracekit._aot.twice keeps numba's JIT (two signatures share the key ('int64',))" in capsys.readouterr().err


def test_a_writable_array_may_use_a_read_only_export_not_the_reverse():
    def read_only(*args):
        return "read-only export"

    writable, read = ("array", "uint8", 1, "C", False), ("array", "uint8", 1, "C", True)
    other_dtype = ("array", "int8", 1, "C", False)
    exports = {(read, "int64"): read_only}
    assert _aot.find(exports, (writable, "int64")) is read_only
    assert _aot.find(exports, (other_dtype, "int64")) is None
    assert _aot.find(exports, (writable, "float64")) is None
    assert set(exports) == {(read, "int64"), (writable, "int64"), (other_dtype, "int64"), (writable, "float64")}
    assert _aot.find({(writable, "int64"): read_only}, (read, "int64")) is None  # it may write into it
    assert _aot.find({(("tuple", read),): read_only}, (("tuple", writable),)) is read_only


def test_a_kernel_fingerprints_the_modules_its_code_comes_from():
    pytest.importorskip("numba")
    import build_aot

    from tracekit.wire import recscan as _recscan, _names as _wirenames

    def source(kernel):
        fn = getattr(kernel, "fn", None) or kernel.py_func
        return build_aot._compiled_code(fn, set())[0]

    # helpers inlined from _encode (and its constant _ATTR_FIELD); field_at, imported from _wirekernels, is defined
    # in _wireprim: the module whose source holds the code counts, not the one it was imported through
    assert source(_recscan.string_attr_in) == {"tracekit.wire.recscan", "tracekit.wire.encode"}
    assert source(_wirenames.name_groups) == {"tracekit.wire._names", "tracekit.wire._prim"}


def test_a_build_without_a_compiler_leaves_nothing_and_says_why(tmp_path, monkeypatch):
    pytest.importorskip("numba")
    import build_aot

    build_aot._toolchain_problem()  # imports numba.pycc.platform (its deprecation warning silenced)
    monkeypatch.setattr(sys.modules["numba.pycc.platform"], "external_compiler_works", lambda: False)
    monkeypatch.setattr(build_aot, "PACKAGE", tmp_path)
    (tmp_path / "_aot_kernels.json").write_text("{}")  # an earlier build's manifest is not trusted after a failure
    assert build_aot.build() == "no working C and C++ compiler"
    assert list(tmp_path.iterdir()) == []


def test_the_install_built_the_exports_wherever_a_compiler_works():
    """A machine with setuptools and a C compiler gets the exports from ``make install``: a build that failed there (a
    kernel pycc cannot type, say) is a failure here, not a skip, though the install itself only warned."""
    if os.environ.get(_aot.ENV) == "0":
        pytest.skip(f"{_aot.ENV}=0 is set")
    pytest.importorskip("numba")
    import build_aot

    problem = build_aot._toolchain_problem()
    if problem:
        pytest.skip(f"no toolchain for the ahead-of-time build here: {problem}")
    assert _aot.MANIFEST.is_file(), (
        "make install built no ahead-of-time kernels on a machine that can build them: run "
        "`.venv/bin/python tools/build_aot.py` to see why"
    )


def test_a_constant_imported_through_a_re_export_counts_where_it_is_defined(monkeypatch):
    # a kernel module importing OK from a module that itself imports it from another: the hash that guards the export
    # must be the defining module's, or a changed OK there would leave a stale export in use
    pytest.importorskip("numba")
    import build_aot

    imports = {
        "k.py": {"OK": ("tracekit.fake_b", "OK"), "helper": ("tracekit.fake_b", "helper_b")},
        "b.py": {"OK": ("tracekit.fake_c", "OK")},  # helper_b is defined in b
        "c.py": {},
    }
    monkeypatch.setattr(build_aot, "_from_imports", lambda path: imports[path])
    for name, path in (("tracekit.fake_b", "b.py"), ("tracekit.fake_c", "c.py")):
        monkeypatch.setitem(sys.modules, name, SimpleNamespace(__file__=path))
    assert build_aot._imported_from(SimpleNamespace(__file__="k.py")) == {
        "OK": "tracekit.fake_c",
        "helper": "tracekit.fake_b",
    }


@pytest.mark.parametrize(
    "manifest",
    [
        "[1, 2]",
        '{"format": 1, "host": null}',
        "HOST_NO_KERNELS",
        "HOST_BAD_ENTRY",
        '{"format": 1, "kern',  # cut short
    ],
)
def test_a_damaged_manifest_means_no_exports(manifest, tmp_path, monkeypatch):
    host = json.dumps(_aot.host())
    manifest = manifest.replace("HOST_NO_KERNELS", f'{{"format": 1, "host": {host}}}')
    bad_entry = {"tracekit.wire.kernels.walk_nodes": {"sources": [1, 2], "exports": 7}}
    manifest = manifest.replace("HOST_BAD_ENTRY", json.dumps({"format": 1, "host": _aot.host(), "kernels": bad_entry}))
    path = tmp_path / "_aot_kernels.json"
    path.write_text(manifest)
    monkeypatch.setattr(_aot, "MANIFEST", path)
    monkeypatch.setattr(_aot, "_manifest", None)
    monkeypatch.setattr(_aot, "_manifest_read", False)
    assert _aot.exports_of("tracekit.wire.kernels.walk_nodes") == {}
