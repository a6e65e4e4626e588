"""Structural fuzzing of every reading command (issue 11, "Must show").

Hypothesis mutates valid JSON trees -- PyTorch ET, Kineto, tracekit JSON,
hardware specs (TOML), ASTRA-sim system JSON and network YAML, pipeline TOML --
by type swaps, huge numbers, deleted keys and deep nesting, writes the result
and runs the commands that read it in-process (click's CliRunner).  Each run
must end with exit 0, or exit 1 with exactly one ``tracekit: error:`` line (``validate``: exit 3 with
its report of findings; never 2, a usage error: the command lines are right);
never an uncaught exception (a traceback), never a temporary or partial output
file, within a time bound; the process's peak memory stays bounded.

Example counts are small by default so ``make test`` stays fast; set
``HYPOTHESIS_PROFILE=full`` for a long run (``HYPOTHESIS_PROFILE=full
.venv/bin/python -m pytest tests/hardening/test_structural_fuzz.py``).
"""

from __future__ import annotations

import copy
import json
import os
import resource
import tempfile
import time
import tomllib
from pathlib import Path
from typing import Any, Callable

import tomli_w
import yaml
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from _hardkit import leftovers, ring_job, run
from _pytorch_synth import mlp_et, mlp_kineto

PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "default")
EXAMPLES = {"default": 8, "medium": 60, "full": 400}.get(PROFILE, 8)
SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=PROFILE == "default",
    database=None,
    # the default profile reports the first failing example as found (no shrinking: bounded time)
    phases=[Phase.explicit, Phase.generate] + ([Phase.shrink] if PROFILE != "default" else []),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
TIME_BOUND_S = 60.0  # per command, generous for a loaded 2-core machine (a clean run takes well under 1 s)
MEMORY_BOUND_KB = 2 << 20  # 2 GiB peak RSS for the whole test process
DATA = Path(__file__).resolve().parents[1] / "data" / "astra"

# ----------------------------------------------------------------------------- mutations of JSON trees
HUGE = [2**63 - 1, 2**63, 2**64 - 1, 2**64, -(2**63) - 1, 10**30, 1e308, -1e308, -1, 0, 1.5, 5e-324]
SCALARS = st.one_of(st.sampled_from(HUGE), st.booleans(), st.none(), st.text(max_size=8), st.integers(-10, 10))
VALUES = st.one_of(SCALARS, st.lists(SCALARS, max_size=3), st.dictionaries(st.text(max_size=4), SCALARS, max_size=2))


def _paths(tree: Any, max_depth: int = 40) -> list[tuple]:
    """Every path (tuple of keys/indices) into ``tree`` down to ``max_depth``, the root excluded."""
    out: list[tuple] = []
    stack: list[tuple[tuple, Any]] = [((), tree)]
    while stack:
        prefix, node = stack.pop()
        if len(prefix) >= max_depth:
            continue
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
        for k, v in items:
            out.append(prefix + (k,))
            stack.append((prefix + (k,), v))
    return sorted(out, key=repr)


def _nest(value: Any, depth: int) -> Any:
    for _ in range(depth):
        value = [value]
    return value


@st.composite
def mutated(draw, seed: Any) -> Any:
    """``seed`` with 1-3 mutations: a value swapped for another type or a huge number, a key deleted, deep nesting."""
    tree = copy.deepcopy(seed)
    for _ in range(draw(st.integers(1, 3))):
        paths = _paths(tree)
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent = tree
        for k in path[:-1]:
            parent = parent[k]
        key = path[-1]
        op = draw(st.sampled_from(["swap", "swap", "delete", "nest"]))
        if op == "delete":
            del parent[key]
        elif op == "nest":
            parent[key] = _nest(parent[key], draw(st.sampled_from([3, 60, 400])))
        else:
            parent[key] = draw(VALUES)
    return tree


# ----------------------------------------------------------------------------- running the readers
SEEDS_PASS = {"on": False}  # set by test_every_seed_passes_every_command: each command must exit 0


def _check(args: list, workdir: Path, outputs: list[Path]) -> None:
    t0 = time.monotonic()
    res = run(*args)
    assert not SEEDS_PASS["on"] or res.exit_code == 0, (args, res.stderr)
    elapsed = time.monotonic() - t0
    assert res.exception is None or isinstance(res.exception, SystemExit), (
        f"uncaught {type(res.exception).__name__}: {res.exception!r} for {args}"
    )
    assert elapsed < TIME_BOUND_S, f"{elapsed:.1f} s for {args}"
    assert "Traceback" not in res.stderr
    if res.exit_code != 0:
        errors = [ln for ln in res.stderr.splitlines() if ln.startswith("tracekit: error: ")]
        if res.exit_code == 3:  # validate's findings: its report on stdout, no error line
            assert args[0] == "validate" and res.stdout.strip().splitlines()[-1].startswith("FAILED ("), res.stdout
        else:
            assert res.exit_code == 1 and len(errors) == 1, (res.exit_code, res.stderr, args)
        for out in outputs:  # a failed command writes nothing
            assert not out.exists() or out.is_dir() and not any(out.iterdir()), (out, args)
    assert leftovers(workdir) == [], args
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss < MEMORY_BOUND_KB


def _fuzz(doc: Any, write: Callable[[Any, Path], Path], commands: Callable[[Path, Path], list[tuple[list, list]]]):
    with tempfile.TemporaryDirectory() as d:
        workdir = Path(d)
        path = write(doc, workdir)
        for args, outputs in commands(path, workdir):
            _check(args, workdir, outputs)


def _json_writer(name: str) -> Callable[[Any, Path], Path]:
    def write(doc: Any, folder: Path) -> Path:
        p = folder / name
        try:
            p.write_text(json.dumps(doc))
        except (RecursionError, ValueError):  # too deep for the json module: write the nesting by hand
            p.write_text("[" * 3000 + "]" * 3000)
        return p

    return write


# ----------------------------------------------------------------------------- seeds and commands
def _tk_seed() -> dict:
    with tempfile.TemporaryDirectory() as d:
        prefix = ring_job(Path(d), 1)
        return json.loads(run("dump", f"{prefix}.0.et").stdout)


TK_SEED = _tk_seed()
SPEC_SEED = tomllib.loads(run("hw", "show", "dgx-a100", "--toml").stdout)
SYSTEM_SEED = json.loads((DATA / "system_ring_splits1.json").read_text())
NETWORK_SEED = yaml.safe_load((DATA / "network_ring_8.yml").read_text())
PIPELINE_SEED = {
    "transform": [
        {"kind": "scale_compute", "factor": 2},
        {"kind": "scale_comm", "factor": 0.5, "per_type": {"all_reduce": 3}},
    ]
}


def _job(folder: Path) -> Path:
    return ring_job(folder / "job", 2) if not (folder / "job").exists() else folder / "job" / "job"


@SETTINGS
@given(mutated(mlp_et()))
def test_fuzz_pytorch_et(doc):
    _fuzz(
        doc,
        _json_writer("et_rank0.json"),
        lambda p, w: [
            (["convert", "pytorch", "--et", p, "-o", w / "out" / "job", "--executor", "serial"], [w / "out"])
        ],
    )


@SETTINGS
@given(mutated(mlp_kineto()))
def test_fuzz_kineto(doc):
    def commands(p: Path, w: Path):
        et = _json_writer("et.json")(mlp_et(), w)
        return [
            (["convert", "pytorch", "--kineto", p, "-o", w / "k" / "job", "--executor", "serial"], [w / "k"]),
            (
                ["convert", "pytorch", "--et", et, "--kineto", p, "-o", w / "ek" / "job", "--executor", "serial"],
                [w / "ek"],
            ),
            (["analyze", p, "--json"], []),
        ]

    _fuzz(doc, _json_writer("kineto_rank0.json"), commands)


@SETTINGS
@given(mutated(TK_SEED))
def test_fuzz_tracekit_json(doc):
    _fuzz(
        doc,
        _json_writer("t.0.json"),
        lambda p, w: [
            (["info", p], []),
            (["validate", p], []),
            (["dump", p, "-o", w / "d.json"], [w / "d.json"]),
            (["load", p, "-o", w / "l.0.et"], [w / "l.0.et"]),
            (["replay", p, "--hw", "dgx-a100", "-o", w / "r.json"], [w / "r.json"]),
            (["check-replay", p, "-o", w / "c.json"], [w / "c.json"]),
            (["transform", p, "-o", w / "tr" / "x", "--scale-compute", "2"], [w / "tr"]),
            (["timeline", p, "-o", w / "tl.json"], [w / "tl.json"]),
        ],
    )


def _toml_writer(name: str) -> Callable[[Any, Path], Path]:
    def write(doc: Any, folder: Path) -> Path:
        p = folder / name
        try:
            p.write_text(tomli_w.dumps(doc))
        except (TypeError, ValueError, RecursionError):  # not representable in TOML (None, a non-table root...)
            p.write_text("a = " + "[" * 3000 + "]" * 3000 + "\n")
        return p

    return write


@SETTINGS
@given(mutated(SPEC_SEED))
def test_fuzz_hardware_spec(doc):
    _fuzz(
        doc,
        _toml_writer("spec.toml"),
        lambda p, w: [
            (["hw", "show", p], []),
            (["replay", _job(w), "--hw", p, "-o", w / "r.json"], [w / "r.json"]),
            (["bench-coll", "--hw", p, "--ranks", "2,4", "--sizes", "8B:1KiB", "--json"], []),
        ],
    )


@SETTINGS
@given(mutated(SYSTEM_SEED), mutated(NETWORK_SEED))
def test_fuzz_astra_configs(system, network):
    def write(doc: Any, folder: Path) -> Path:
        sys_path = _json_writer("system.json")(doc[0], folder)
        net = folder / "network.yml"
        try:
            net.write_text(yaml.safe_dump(doc[1]))
        except RecursionError:
            net.write_text("a: " + "[" * 3000 + "]" * 3000 + "\n")
        return sys_path

    _fuzz(
        (system, network),
        write,
        lambda p, w: [
            (["hw", "import-astra", "--system", p, "--network", w / "network.yml", "-o", w / "a.toml"], [w / "a.toml"]),
            (
                [
                    "hw",
                    "import-astra",
                    "--system",
                    DATA / "system_ring_splits1.json",
                    "--network",
                    w / "network.yml",
                    "-o",
                    w / "b.toml",
                ],
                [w / "b.toml"],
            ),
            # the imported spec (when the import passed) drives an export of an 8-rank job (network_ring_8's NPUs)
            (["export", "astra", ring_job(w / "j8", 8), "--hw", w / "a.toml", "-o", w / "ex"], [w / "ex"]),
        ],
    )


def _class_set_seed() -> tuple[dict, dict[str, bytes]]:
    """A generated rank-class set: its manifest (the fuzzed document) and its class files."""
    with tempfile.TemporaryDirectory() as d:
        res = run(
            "-q",
            "generate",
            "llm",
            "--model",
            "gpt3-1.3b",
            "--layers",
            "2",
            "--tp",
            "2",
            "--pp",
            "2",
            "--dp",
            "1",
            "--classes",
            "-o",
            Path(d) / "j",
        )
        assert res.exit_code == 0, res.stderr
        files = {p.name: p.read_bytes() for p in Path(d).glob("j.class*.et")}
        return json.loads((Path(d) / "j.classes.json").read_text()), files


CLASS_SEED, CLASS_FILES = _class_set_seed()


@SETTINGS
@given(mutated(CLASS_SEED))
def test_fuzz_rank_class_manifest(doc):
    def write(doc: Any, folder: Path) -> Path:
        for name, data in CLASS_FILES.items():
            (folder / name).write_bytes(data)
        return _json_writer("j.classes.json")(doc, folder)

    _fuzz(
        doc,
        write,
        lambda p, w: [
            (["expand", p, "-o", w / "x" / "j"], [w / "x"]),
            (["info", p], []),
            (["validate", p], []),
            (["replay", p, "--hw", "dgx-a100", "-o", w / "r.json"], [w / "r.json"]),
        ],
    )


@SETTINGS
@given(mutated(PIPELINE_SEED))
def test_fuzz_pipeline(doc):
    _fuzz(
        doc,
        _toml_writer("p.toml"),
        lambda p, w: [(["transform", _job(w), "-o", w / "out" / "x", "--pipeline", p], [w / "out"])],
    )


def test_the_mutator_changes_its_seed():
    """The fuzzer is not vacuous: every example differs from the seed."""
    seen = []

    @settings(max_examples=20, derandomize=True, database=None)
    @given(mutated(PIPELINE_SEED))
    def collect(doc):
        seen.append(doc)

    collect()
    assert len(seen) == 20 and sum(doc != PIPELINE_SEED for doc in seen) >= 15  # a swap may draw the same value


def test_every_seed_passes_every_command(monkeypatch):
    """The fuzzer is not vacuous: unmutated, every seed passes every command it drives (exit 0)."""
    monkeypatch.setitem(SEEDS_PASS, "on", True)
    test_fuzz_tracekit_json.hypothesis.inner_test(TK_SEED)
    test_fuzz_kineto.hypothesis.inner_test(mlp_kineto())
    test_fuzz_pytorch_et.hypothesis.inner_test(mlp_et())
    test_fuzz_hardware_spec.hypothesis.inner_test(SPEC_SEED)
    test_fuzz_astra_configs.hypothesis.inner_test(SYSTEM_SEED, NETWORK_SEED)
    test_fuzz_rank_class_manifest.hypothesis.inner_test(CLASS_SEED)
    test_fuzz_pipeline.hypothesis.inner_test(PIPELINE_SEED)
