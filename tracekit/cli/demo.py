"""`make demo`: the main job on the bundled real traces.

Steps, each printed as the command a user would type:

1. convert the bundled 2-rank gloo capture (PyTorch ET + Kineto of a DDP
   training step with explicit collectives and send/recv) into Chakra traces;
2. validate the converted set (including the cross-rank collective order);
3. replay it on the DGX A100 preset: summary on stdout, full result as JSON,
   a Perfetto timeline, and the HTML report (with a PNG screenshot when a
   headless Chromium is installed);
4. ask a what-if: the same job on DGX H100, and the diff of the two replays (both sides with the NCCL-like
   collective model, so the diff is the hardware's change, not a model's); compute is projected
   from the capture device (this CPU) to each GPU per op class and the method is printed (a CPU -> GPU
   projection is a rough roofline estimate);
5. when the wider real-trace collection is present (``../shared/real``): a real GPU capture (ResNet-50
   training on an RTX 2080 Ti, param-resnet) with its FLOPs coverage, projected to A100 and H100;
6. replay the bundled ASTRA-sim all-reduce traces with the ASTRA-sim
   compatible model on an imported ASTRA-sim config.

Outputs go to ``--out`` (default ``demo_out/``).
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from tracekit.cli import cli

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "sample_traces"
ASTRA_CONFIG = ROOT / "tests" / "data" / "astra"
# Both sides of a what-if use one collective model, so the diff shows the hardware's change only (both presets
# default to their calibrated nccl tables; a user's spec may default to another model).
LIKE_FOR_LIKE = ["--collective-model", "nccl"]


def _step(title: str, args: list[str]) -> None:
    print(f"\n## {title}\n$ tracekit {' '.join(args)}", flush=True)
    try:
        cli.main(args=args, prog_name="tracekit", standalone_mode=True)
    except SystemExit as exc:
        if exc.code not in (0, None):
            print(f"demo step failed: {title} (exit {exc.code})", file=sys.stderr)
            raise


def _say_what_compiles() -> None:
    """On a first run (no ahead-of-time kernels, nothing in numba's cache), say why the first steps take a while."""
    package = ROOT / "tracekit"
    if (package / "_aot_kernels.json").exists() or any(package.glob("**/__pycache__/*.nbi")):
        return
    print(
        "first run on this machine: numba compiles tracekit's kernels (the .et codec's loops, the replay's graph "
        "passes) as the steps below first reach them, about a minute of CPU once; they are cached for later runs",
        flush=True,
    )


def main(argv: list[str] | None = None) -> None:
    """Run the demo steps (``make demo``) into ``--out`` (default ``demo_out``), deleting it first.

    Args:
        argv: command-line arguments (default ``sys.argv[1:]``).

    Raises:
        SystemExit: a step's ``tracekit`` command exited non-zero (its code), after naming the step on stderr.
    """
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="demo_out", help="output folder (default: demo_out)")
    ns = parser.parse_args(argv)
    out = Path(ns.out)
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    _say_what_compiles()
    job = out / "ddp" / "job"
    pt = SAMPLES / "pytorch" / "dist_ws2"
    _step(
        "convert a real 2-rank PyTorch capture (ET + Kineto, gloo)",
        [
            "convert",
            "pytorch",
            "--et",
            str(pt / "et_rank*.json"),
            "--kineto",
            str(pt / "kineto_rank*.json"),
            "-o",
            str(job),
        ],
    )
    _step("validate it", ["validate", str(job)])
    _step(
        "replay it on a DGX A100",
        [
            "replay",
            str(job),
            "--hw",
            "dgx-a100",
            *LIKE_FOR_LIKE,
            "-o",
            str(out / "a100.json"),
            "--with-schedule",
            "--timeline-out",
            str(out / "a100.timeline.json"),
        ],
    )
    report_args = ["report", str(out / "a100.json"), "-o", str(out / "a100.report.html")]
    if shutil.which("chromium") or Path("/usr/bin/chromium").exists():
        report_args += ["--screenshot-out", str(out / "a100.report.png")]
    _step("HTML report", report_args)
    _step(
        "what if: the same job on a DGX H100",
        ["replay", str(job), "--hw", "dgx-h100", *LIKE_FOR_LIKE, "-o", str(out / "h100.json"), "--with-schedule"],
    )
    _step("what changed", ["diff", str(out / "a100.json"), str(out / "h100.json"), "--labels", "A100,H100"])
    _gpu_capture_steps(out)
    system, network = ASTRA_CONFIG / "system_ring_splits1.json", ASTRA_CONFIG / "network_ring_4.yml"
    if system.exists() and network.exists():
        spec = out / "astra_ring4.toml"
        _step(
            "import an ASTRA-sim config",
            ["hw", "import-astra", "--system", str(system), "--network", str(network), "-o", str(spec)],
        )
        _step(
            "replay ASTRA-sim's own all-reduce traces, ASTRA-sim compatible model",
            ["replay", str(SAMPLES / "chakra" / "all_reduce"), "--hw", str(spec)],
        )
    print(
        f"\nOutputs in {out}/: converted traces (ddp/), replay results (*.json), Perfetto timeline "
        f"(a100.timeline.json: open at ui.perfetto.dev), HTML report (a100.report.html)"
    )


def _gpu_capture_steps(out: Path) -> None:
    """A real GPU capture projected to other GPUs (needs ../shared/real; skipped with a note otherwise)."""
    import os

    real = Path(os.environ.get("TRACEKIT_REAL_DATA", ROOT.parent / "shared" / "real")) / "pytorch" / "param-resnet"
    if not (real / "resnet_et.json.gz").exists():
        print(f"\n(skipping the GPU-capture what-if: {real} is not present)")
        return
    job = out / "resnet" / "job"
    _step(
        "convert a real GPU capture (ResNet-50 training, RTX 2080 Ti; param-resnet)",
        [
            "convert",
            "pytorch",
            "--et",
            str(real / "resnet_et.json.gz"),
            "--kineto",
            str(real / "resnet_kineto.json.gz"),
            "-o",
            str(job),
        ],
    )
    _step("its FLOPs and how much measured kernel time has a cost", ["info", str(job)])
    for hw in ("dgx-a100", "dgx-h100"):
        _step(
            f"what if: this capture on a {hw} (compute projected per op class)",
            [
                "replay",
                str(job),
                "--hw",
                hw,
                *LIKE_FOR_LIKE,
                "--compute",
                "projected",
                "-o",
                str(out / f"resnet_{hw}.json"),
            ],
        )
    _step(
        "what changed",
        ["diff", str(out / "resnet_dgx-a100.json"), str(out / "resnet_dgx-h100.json"), "--labels", "A100,H100"],
    )


if __name__ == "__main__":
    main()
