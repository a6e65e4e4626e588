"""Duplicate-code gate: report blocks of 6+ repeated lines in the package; fail only above the recorded baseline.

Uses pylint's ``symilar`` (comments, docstrings and imports ignored). The baseline lives in pyproject.toml under
``[tool.tracekit.duplicates]`` (``blocks``, ``lines``); lower it when a copy is removed, never raise it to let a
new copy in. Exit status: 0 within the baseline, 1 above it.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MIN_LINES = 6
TREES = ("tracekit", "converters", "replayer")


def main() -> int:
    baseline = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["tracekit"]["duplicates"]
    files = sorted(
        str(p.relative_to(ROOT)) for tree in TREES for p in (ROOT / tree).rglob("*.py") if "_proto" not in p.parts
    )
    symilar = Path(sys.executable).with_name("symilar")
    run = subprocess.run(
        [str(symilar), "-d", str(MIN_LINES), "--ignore-comments", "--ignore-docstrings", "--ignore-imports", *files],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    text = run.stdout
    total = re.search(r"TOTAL lines=(\d+) duplicates=(\d+)", text)
    if total is None:
        print(text + run.stderr, file=sys.stderr)
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
