"""Faults a fresh-user trial found (session of 2026-11-30): each command, its one error line and no leftovers."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from _hardkit import leftovers, one_line_error, ring_job, run

REPO = Path(__file__).resolve().parents[2]


def test_generate_micro_refuses_absurd_ranks_and_iterations_at_once(tmp_path):
    line = one_line_error(
        run(
            "generate",
            "micro",
            "--collective",
            "all_reduce",
            "--size",
            "64MiB",
            "--ranks",
            "100000000",
            "-o",
            tmp_path / "o" / "ar",
        )
    )
    assert (
        line == "tracekit: error: generate micro --ranks would have 100,000,000 ranks; tracekit handles 1 to 1,048,576"
    )
    line = one_line_error(
        run(
            "generate",
            "micro",
            "--collective",
            "all_reduce",
            "--size",
            "64MiB",
            "--ranks",
            "8",
            "--iterations",
            "99999999999",
            "-o",
            tmp_path / "o" / "ar",
        )
    )
    assert line == "tracekit: error: --iterations 99,999,999,999 is out of range (1 to 1,000,000)"
    assert not (tmp_path / "o").exists()


def test_an_unwritable_output_is_named_not_its_temporary_file(tmp_path):
    prefix = ring_job(tmp_path, 2)
    line = one_line_error(run("replay", prefix, "--hw", "dgx-a100", "-o", "/proc/r.json"))
    assert line == "tracekit: error: /proc/r.json: No such file or directory"
    line = one_line_error(run("transform", prefix, "-o", "/proc/x", "--scale-compute", "2"))
    assert line == "tracekit: error: /proc/x: No such file or directory"
    assert leftovers(tmp_path) == []


def test_a_failed_conversion_prints_one_line_in_a_real_process(tmp_path):
    et = (REPO / "sample_traces/pytorch/dist_ws2/et_rank0.json").read_bytes()[:3000]
    (tmp_path / "et_rank0.json").write_bytes(et)
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "tracekit.cli._main",
            "convert",
            "pytorch",
            "--et",
            str(tmp_path / "et_rank*.json"),
            "--kineto",
            str(REPO / "sample_traces/pytorch/dist_ws2/kineto_rank0.json"),
            "-o",
            str(tmp_path / "o" / "c"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 1
    assert res.stderr.splitlines() == [
        f"tracekit: error: {tmp_path}/et_rank0.json: invalid JSON at line 24 column 4: "
        "unexpected end of file (truncated JSON?)"
    ]
    assert not (tmp_path / "o").exists()


def test_validate_warns_when_the_declared_world_size_disagrees_with_the_files(tmp_path):
    from tracekit.io import write_traceset
    from tracekit.model import Attr, ExecutionTrace, Metadata, Node
    from tracekit.traceset import TraceSet

    # one rank of a two-rank capture whose groups say "all ranks": only the metadata tells the world size
    trace = ExecutionTrace([Node(1, "aten::mm", duration_ns=5)], Metadata("0.0.4", (Attr("world_size", 2),)), rank=0)
    write_traceset(TraceSet({0: trace}), tmp_path / "solo" / "s")
    res = run("validate", tmp_path / "solo" / "s")
    assert res.exit_code == 0, res.stderr
    assert (
        f"warning: [world-size] {tmp_path}/solo/s.0.et: rank 0: the trace says world size 2, but the set holds "
        "traces for 1 rank(s) of a world of 1"
    ) in res.stdout
