"""Size gate: no source file over 500 lines, no function or method over 80 lines (tracekit/, converters/,
replayer/; generated code in tracekit/_proto excepted).

Today's offenders are listed in pyproject.toml ``[tool.tracekit.sizes]`` (``files``, ``functions``); the lists
only shrink (tools/_baseline.py). A function's length is from its ``def`` line to its last line, nested
functions included; a nested function is also judged on its own (``outer.inner``). Exit status 0 or 1.
"""

from __future__ import annotations

import ast
import sys

from _baseline import ROOT, functions, judge, source_files

MAX_FILE_LINES = 500
MAX_FUNCTION_LINES = 80


def offenders() -> dict[str, set[str]]:
    """``{"files": {...}, "functions": {"path::qualname", ...}}`` over the limits."""
    files: set[str] = set()
    funcs: set[str] = set()
    for rel in source_files():
        text = (ROOT / rel).read_text()
        if len(text.splitlines()) > MAX_FILE_LINES:
            files.add(rel.as_posix())
        for name, node, _ in functions(ast.parse(text, filename=str(rel))):
            if not isinstance(node, ast.ClassDef) and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES:
                funcs.add(f"{rel.as_posix()}::{name}")
    return {"files": files, "functions": funcs}


if __name__ == "__main__":
    what = {"files": f"files over {MAX_FILE_LINES} lines", "functions": f"functions over {MAX_FUNCTION_LINES} lines"}
    sys.exit(judge("sizes", what, offenders(), sys.argv[1:]))
