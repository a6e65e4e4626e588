"""mypy over ``tracekit.converters`` and ``tracekit.replayer``.

They live in ``converters/`` and ``replayer/`` and install under ``tracekit.`` through pyproject's ``package-dir``,
which mypy cannot follow. This lays out ``.mypy_tree/tracekit/`` (symlinks to every entry of ``tracekit/`` plus
``converters`` and ``replayer``) and runs mypy there with the project's ``[tool.mypy]`` config. Exit status: mypy's.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TREE = ROOT / ".mypy_tree"


def main() -> int:
    pkg = TREE / "tracekit"
    pkg.mkdir(parents=True, exist_ok=True)
    links = {entry.name: entry for entry in (ROOT / "tracekit").iterdir()}
    links.update(converters=ROOT / "converters", replayer=ROOT / "replayer")
    for stale in pkg.iterdir():
        if stale.is_symlink() and stale.name not in links:
            stale.unlink()
    for name, target in links.items():
        link = pkg / name
        if not link.is_symlink():
            link.symlink_to(target)
    mypy = Path(sys.executable).with_name("mypy")
    return subprocess.call(
        [
            str(mypy),
            "--config-file",
            str(ROOT / "pyproject.toml"),
            "-p",
            "tracekit.converters",
            "-p",
            "tracekit.replayer",
        ],
        cwd=TREE,
    )


if __name__ == "__main__":
    sys.exit(main())
