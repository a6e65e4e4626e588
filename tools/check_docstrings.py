"""Docstring gate: every public function, class and method in tracekit/, converters/ and replayer/ has a docstring.

Public: its module path has no part starting with ``_`` (``__init__.py`` counts as public), its name and every
enclosing class's name do not start with ``_``, and it is not nested in a function. ``@overload`` stubs and
property setters/deleters are exempt (the getter carries the text). Today's offenders are listed in pyproject.toml
``[tool.tracekit.docstrings] missing`` and only shrink (tools/_baseline.py). Exit status 0 or 1.
"""

from __future__ import annotations

import ast
import sys

from _baseline import ROOT, functions, judge, source_files


def _public_module(parts: tuple[str, ...]) -> bool:
    return not any(p.startswith("_") and p != "__init__.py" for p in parts)


def _exempt(node: ast.AST) -> bool:
    for dec in getattr(node, "decorator_list", []):
        name = dec.attr if isinstance(dec, ast.Attribute) else getattr(dec, "id", "")
        if name in ("overload", "setter", "deleter"):
            return True
    return False


def offenders() -> dict[str, set[str]]:
    """``{"missing": {"path::qualname", ...}}``: public definitions without a docstring."""
    missing: set[str] = set()
    for rel in source_files():
        if not _public_module(rel.parts):
            continue
        tree = ast.parse((ROOT / rel).read_text(), filename=str(rel))
        for name, node, parents in functions(tree):
            if any(not isinstance(p, ast.ClassDef) or p.name.startswith("_") for p in parents):
                continue
            if node.name.startswith("_") or _exempt(node):
                continue
            if ast.get_docstring(node) is None:
                missing.add(f"{rel.as_posix()}::{name}")
    return {"missing": missing}


if __name__ == "__main__":
    sys.exit(judge("docstrings", {"missing": "public definitions without a docstring"}, offenders(), sys.argv[1:]))
