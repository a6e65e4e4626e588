"""The size and docstring gates (tools/check_sizes.py, tools/check_docstrings.py) on a small tree of known offenders."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

TOOLS = Path(__file__).resolve().parents[2] / "tools"


@pytest.fixture
def gates(tmp_path, monkeypatch):
    """The two gate modules looking at ``tmp_path`` (a repository with tracekit/, converters/, replayer/)."""
    monkeypatch.syspath_prepend(str(TOOLS))
    for name in ("_baseline", "check_sizes", "check_docstrings"):
        sys.modules.pop(name, None)
    baseline = importlib.import_module("_baseline")
    monkeypatch.setattr(baseline, "ROOT", tmp_path)
    monkeypatch.setattr(baseline, "PYPROJECT", tmp_path / "pyproject.toml")
    sizes, docs = importlib.import_module("check_sizes"), importlib.import_module("check_docstrings")
    monkeypatch.setattr(sizes, "ROOT", tmp_path)
    monkeypatch.setattr(docs, "ROOT", tmp_path)
    for tree in ("tracekit/_proto", "converters", "replayer"):
        (tmp_path / tree).mkdir(parents=True)
    yield baseline, sizes, docs
    for name in ("_baseline", "check_sizes", "check_docstrings"):
        sys.modules.pop(name, None)


def _body(n: int) -> str:
    return "".join(f"    x{i} = {i}\n" for i in range(n))


def test_sizes_counts_def_to_last_line_and_names_nested_functions(gates, tmp_path):
    _, sizes, _ = gates
    # outer: def + docstring + 77 + inner (def + 80) = 160 lines; inner: 81 lines; ok: 80 lines exactly
    inner = "    def inner():\n" + "".join(f"        y{i} = {i}\n" for i in range(80))
    (tmp_path / "tracekit" / "a.py").write_text(
        'def outer():\n    """d."""\n' + _body(77) + inner + "\n\ndef ok():\n" + _body(79)
    )
    (tmp_path / "replayer" / "big.py").write_text("x = 1\n" * 501)
    (tmp_path / "tracekit" / "_proto" / "gen_pb2.py").write_text("y = 2\n" * 900)  # generated: exempt
    assert sizes.offenders() == {
        "files": {"replayer/big.py"},
        "functions": {"tracekit/a.py::outer", "tracekit/a.py::outer.inner"},
    }


def test_docstrings_of_public_definitions_only(gates, tmp_path):
    _, _, docs = gates
    (tmp_path / "tracekit" / "m.py").write_text(
        "def f():\n    pass\n\n\ndef _g():\n    pass\n\n\nclass C:\n    '''doc'''\n\n    def m(self):\n        pass\n\n"
        "    def _p(self):\n        pass\n\n    @property\n    def v(self):\n        '''doc'''\n\n    @v.setter\n"
        "    def v(self, x):\n        pass\n\n\nclass _H:\n    def m(self):\n        pass\n\n\n"
        "def outer():\n    '''doc'''\n\n    def inner():\n        pass\n"
    )
    (tmp_path / "converters" / "_private.py").write_text("def f():\n    pass\n")
    assert docs.offenders() == {"missing": {"tracekit/m.py::f", "tracekit/m.py::C.m"}}


def test_baseline_only_shrinks(gates, tmp_path, capsys):
    baseline, _, _ = gates
    (tmp_path / "pyproject.toml").write_text(
        '[tool.tracekit.docstrings]\nmissing = [\n    "a::f",\n    "a::gone",\n]\n'
    )
    assert baseline.judge("docstrings", {"missing": "undocumented"}, {"missing": {"a::f"}}, []) == 1  # stale entry
    assert "passes now, remove it from [tool.tracekit.docstrings] missing: a::gone" in capsys.readouterr().err
    assert baseline.judge("docstrings", {"missing": "undocumented"}, {"missing": {"a::f", "a::new"}}, []) == 1
    assert "new: a::new" in capsys.readouterr().err
    assert baseline.judge("docstrings", {"missing": "undocumented"}, {"missing": {"a::f"}}, ["--shrink"]) == 0
    assert (tmp_path / "pyproject.toml").read_text() == '[tool.tracekit.docstrings]\nmissing = [\n    "a::f",\n]\n'
