"""Ratchet baselines of the gates in tools/: lists in pyproject.toml ``[tool.tracekit.<gate>]`` that only shrink.

A gate finds offenders (strings such as ``tracekit/io.py`` or ``tracekit/io.py::read_trace``). It fails when an
offender is not in its baseline (new code must meet the rule) and when a baseline entry is no longer an offender
(the entry must go, so the list only shrinks). ``--shrink`` deletes such stale entries from pyproject.toml;
``--write-baseline`` records today's offenders (only for a mechanical change of the whole tree, such as the one
``ruff format .``). Entries sit one per line in pyproject.toml so removing one is a one-line change.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from pathlib import Path
from typing import Iterator

ROOT = Path(__file__).resolve().parents[1]
TREES = ("tracekit", "converters", "replayer")  # the package's three source trees (pyproject package-dir)
GENERATED = ("tracekit/_proto",)  # protoc output (make proto)
PYPROJECT = ROOT / "pyproject.toml"


def source_files() -> Iterator[Path]:
    """The package's hand-written Python files, relative to the repository root, in sorted order."""
    for tree in TREES:
        for path in sorted((ROOT / tree).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if not rel.startswith(GENERATED):
                yield path.relative_to(ROOT)


def functions(tree: ast.AST) -> Iterator[tuple[str, ast.AST, tuple[ast.AST, ...]]]:
    """``(qualified name, node, enclosing nodes)`` of every function and class, outermost first."""

    def walk(node: ast.AST, prefix: str, parents: tuple[ast.AST, ...]) -> Iterator[tuple[str, ast.AST, tuple]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                yield name, child, parents
                yield from walk(child, name + ".", parents + (child,))
            else:
                yield from walk(child, prefix, parents)

    yield from walk(tree, "", ())


def baseline(gate: str, key: str) -> set[str]:
    """The entries of ``[tool.tracekit.<gate>] <key>`` in pyproject.toml."""
    return set(tomllib.loads(PYPROJECT.read_text())["tool"]["tracekit"][gate][key])


def _rewrite(gate: str, key: str, entries: list[str]) -> None:
    text = PYPROJECT.read_text()
    pattern = re.compile(
        rf"(^\[tool\.tracekit\.{re.escape(gate)}\]\n(?:(?!^\[).)*?^{key} = \[\n)(.*?)(^\])", re.S | re.M
    )
    body = "".join(f'    "{e}",\n' for e in sorted(entries))
    new, count = pattern.subn(lambda m: m.group(1) + body + m.group(3), text, count=1)
    if count != 1:
        raise SystemExit(f"pyproject.toml: no [tool.tracekit.{gate}] {key} = [ ... ] list (one entry per line)")
    PYPROJECT.write_text(new)


def judge(gate: str, what: dict[str, str], found: dict[str, set[str]], argv: list[str]) -> int:
    """Compare ``found`` (baseline key -> offenders; ``what`` describes each key) with the baselines; print the
    verdict; return the exit status (0 or 1)."""
    status = 0
    for key, offenders in found.items():
        listed = baseline(gate, key)
        new, stale = sorted(offenders - listed), sorted(listed - offenders)
        if "--write-baseline" in argv:
            _rewrite(gate, key, sorted(offenders))
            print(f"{gate}: recorded {len(offenders)} {key} in pyproject.toml")
            continue
        if "--shrink" in argv and stale:
            listed -= set(stale)
            _rewrite(gate, key, sorted(listed))
            print(f"{gate}: removed {len(stale)} {key} that now pass from the baseline")
            stale = []
        print(f"{gate}: {len(offenders)} {what[key]} (baseline {len(listed)})")
        for entry in new:
            print(f"  new: {entry}", file=sys.stderr)
        for entry in stale:
            print(f"  passes now, remove it from [tool.tracekit.{gate}] {key}: {entry}", file=sys.stderr)
        if new or stale:
            status = 1
    if status:
        print(
            f"{gate}: fix the new ones; run `python {sys.argv[0]} --shrink` to drop the entries that pass now",
            file=sys.stderr,
        )
    return status
