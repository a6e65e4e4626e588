"""Duplicate-code gate: report blocks of 6+ repeated lines in the package; fail only above the recorded baseline.

Uses pylint's ``symilar`` (comments, docstrings and imports ignored), through its ``Symilar`` class in this process.
The baseline lives in pyproject.toml under ``[tool.tracekit.duplicates]`` (``blocks``, ``lines``); lower it when a
copy is removed, never raise it to let a new copy in. Exit status: 0 within the baseline, 1 above it.

Speed: the ``symilar`` command parses every file with astroid, whose post-build inference imports numpy and the
rest (22.6 s CPU of its 23 s on this tree, measured 2026-12-01). With imports ignored, symilar reads only the line
spans of the import statements from that tree (``stripped_lines``: ``tree.nodes_of_class((Import, ImportFrom))``),
so :class:`_ImportSpans` hands it those spans from the standard ``ast`` instead: the same report (checked equal, byte
for byte, to the ``symilar`` command's on this tree and on tracekit+converters+replayer+tests+tools+benchmarks at
``-d 4``: 36 blocks, 211 lines), in about 1.5 s CPU.
"""

from __future__ import annotations

import ast
import contextlib
import io
import re
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

from pylint.checkers.symilar import Symilar

ROOT = Path(__file__).resolve().parents[1]
MIN_LINES = 6
TREES = ("tracekit", "converters", "replayer")


class _ImportSpans:
    """The part of an astroid module that symilar reads when only imports are ignored: the import statements."""

    def __init__(self, source: str) -> None:
        self._imports = [n for n in ast.walk(ast.parse(source)) if isinstance(n, (ast.Import, ast.ImportFrom))]

    def nodes_of_class(self, _klass: object) -> Iterator[ast.stmt]:
        """Every import statement, nested ones included (each has ``lineno`` and ``end_lineno``)."""
        return iter(self._imports)


def symilar_report(files: list[str]) -> str:
    """symilar's text report (``-d MIN_LINES --ignore-comments --ignore-docstrings --ignore-imports``) on ``files``."""
    sim = Symilar(min_lines=MIN_LINES, ignore_comments=True, ignore_docstrings=True, ignore_imports=True)
    for name in files:
        source = (ROOT / name).read_text(encoding="utf-8")
        sim.append_stream(name, io.StringIO(source), tree=_ImportSpans(source))  # type: ignore[arg-type]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        sim.run()
    return out.getvalue()


def main() -> int:
    baseline = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["tracekit"]["duplicates"]
    files = sorted(
        str(p.relative_to(ROOT)) for tree in TREES for p in (ROOT / tree).rglob("*.py") if "_proto" not in p.parts
    )
    text = symilar_report(files)
    total = re.search(r"TOTAL lines=(\d+) duplicates=(\d+)", text)
    if total is None:
        print(text, file=sys.stderr)
        print("duplicates: symilar gave no summary", file=sys.stderr)
        return 1
    blocks = len(re.findall(r"^\d+ similar lines in \d+ files", text, flags=re.M))
    lines = int(total.group(2))
    print(
        f"duplicates: {blocks} repeated blocks of >= {MIN_LINES} lines, {lines} duplicated lines "
        f"(baseline {baseline['blocks']} blocks, {baseline['lines']} lines)"
    )
    if blocks > baseline["blocks"] or lines > baseline["lines"]:
        print(text.rsplit("TOTAL", 1)[0], file=sys.stderr)
        print("duplicates: above the baseline: factor the new copy out (see the blocks above)", file=sys.stderr)
        return 1
    if blocks < baseline["blocks"] or lines < baseline["lines"]:
        print(f"duplicates: below the baseline: lower [tool.tracekit.duplicates] to blocks = {blocks}, lines = {lines}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
