"""Faults a fresh-user trial found (session of 2026-11-30): each command, its one error line and no leftovers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import click
import pytest
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
    from tracekit.sets.traceset import TraceSet

    # one rank of a two-rank capture whose groups say "all ranks": only the metadata tells the world size
    trace = ExecutionTrace([Node(1, "aten::mm", duration_ns=5)], Metadata("0.0.4", (Attr("world_size", 2),)), rank=0)
    write_traceset(TraceSet({0: trace}), tmp_path / "solo" / "s")
    res = run("validate", tmp_path / "solo" / "s")
    assert res.exit_code == 0, res.stderr
    assert (
        f"warning: [world-size] {tmp_path}/solo/s.0.et: rank 0: the trace says world size 2, but the set holds "
        "traces for 1 rank(s) of a world of 1"
    ) in res.stdout


# A value click cannot parse is a wrong command line (2); a parsed value out of its range is bad input (1), whether
# click's range type or tracekit's own check refuses it (docs/cli.md "Exit codes").
MAX_WORKERS = 4 * (os.cpu_count() or 1)
VALUE_CASES = [
    (("validate", "{job}", "--workers", "abc"), 2, "Invalid value for '--workers': 'abc' is not a valid integer"),
    (
        ("validate", "{job}", "--workers", "0"),
        1,
        f"Invalid value for '--workers': 0 is not in the range 1<=x<={MAX_WORKERS}",
    ),
    (
        ("validate", "{job}", "--workers", "100000"),
        1,
        f"Invalid value for '--workers': 100000 is not in the range 1<=x<={MAX_WORKERS}",
    ),
    (
        ("replay", "{job}", "--hw", "dgx-a100", "--top", "-1"),
        1,
        "Invalid value for '--top': -1 is not in the range 1<=x<=1048576",
    ),
    (("replay", "{job}", "--hw", "dgx-a100", "--top", "x"), 2, "Invalid value for '--top': 'x' is not a valid integer"),
    (("transform", "{job}", "-o", "{out}", "--dp", "0"), 1, "Invalid value for '--dp': 0 is not in the range x>=1"),
    (("transform", "{job}", "-o", "{out}", "--dp", "1.5"), 2, "Invalid value for '--dp': '1.5' is not a valid integer"),
    (
        ("transform", "{job}", "-o", "{out}", "--scale-compute", "nan"),
        1,
        "Invalid value for '--scale-compute': 'nan' is not a finite number",
    ),
    (
        ("generate", "llm", "--model", "gpt3-1.3b", "--zero", "7", "-o", "{out}"),
        1,
        "Invalid value for '--zero': 7 is not in the range 0<=x<=3",
    ),
    (
        ("bench-coll", "--hw", "dgx-a100", "--ranks", "8,100000000"),
        1,
        "bench-coll --ranks 100000000 would have 100,000,000 ranks; tracekit handles 1 to 1,048,576",
    ),
]


@pytest.mark.parametrize("args, code, message", VALUE_CASES, ids=[" ".join(c[0][:1] + c[0][-2:]) for c in VALUE_CASES])
def test_an_unparsable_value_exits_2_and_an_out_of_range_value_exits_1(tmp_path, args, code, message):
    job = ring_job(tmp_path, 2)
    argv = [a.format(job=job, out=tmp_path / "o" / "x") for a in args]
    line = one_line_error(run(*argv), code)
    assert line.startswith(f"tracekit: error: {message}"), line
    assert not (tmp_path / "o").exists()


def test_every_range_option_is_tracekits_range_type():
    """click's own IntRange/FloatRange exit 2 when out of range; every command uses tracekit's IntRange (exit 1)."""
    from tracekit.cli import cli
    from tracekit.cli._options import FloatRange, IntRange

    def commands(group, path):
        for name, cmd in group.commands.items():
            if isinstance(cmd, click.Group):
                yield from commands(cmd, f"{path} {name}")
            else:
                yield f"{path} {name}", cmd

    plain = [
        f"{path} {p.opts[0]}"
        for path, cmd in commands(cli, "tracekit")
        for p in cmd.params
        if isinstance(p.type, (click.IntRange, click.FloatRange)) and not isinstance(p.type, (IntRange, FloatRange))
    ]
    ranged = [path for path, cmd in commands(cli, "tracekit") for p in cmd.params if isinstance(p.type, IntRange)]
    assert plain == [] and len(ranged) >= 8  # --workers in every executor command, --top, --zero, ...


def _big_job(folder: Path, nodes: int = 3000) -> Path:
    from tracekit.io import write_traceset
    from tracekit.model import ExecutionTrace, Node
    from tracekit.sets.traceset import TraceSet

    chain = [Node(i, f"op{i}", duration_ns=1000, data_deps=[i - 1] if i > 1 else []) for i in range(1, nodes + 1)]
    write_traceset(TraceSet({0: ExecutionTrace(chain, rank=0)}), folder / "big")
    return folder / "big"


@pytest.mark.parametrize(
    "args",
    [
        ("dump", "{job}.0.et", "-o", "/dev/stdout"),
        ("replay", "{job}", "--hw", "dgx-a100", "--timeline-out", "/dev/stdout"),
    ],
    ids=["dump", "replay-timeline"],
)
def test_a_reader_that_stops_early_gets_no_broken_pipe_line(tmp_path, args):
    """`tracekit ... -o /dev/stdout | head -c 100`: the reader closes the pipe; tracekit ends quietly, exit 1
    (click's convention), no `Broken pipe` error line."""
    job = _big_job(tmp_path)
    argv = [a.format(job=job) for a in args]
    proc = subprocess.Popen(
        [sys.executable, "-m", "tracekit.cli._main", *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert len(proc.stdout.read(100)) == 100
    proc.stdout.close()  # far more than a pipe buffer (64 KiB) is still to come: the next write fails with EPIPE
    with proc.stderr:
        err = proc.stderr.read().decode()
    assert (proc.wait(timeout=120), err) == (1, "")


def test_transform_warns_about_duplicate_node_ids_naming_file_rank_and_id(tmp_path):
    from _hardkit import raw_et

    src = raw_et(
        tmp_path / "d.0.et",
        dict(id=1, name="a", type=4, duration_micros=5),
        dict(id=2, name="b", type=4, duration_micros=5, data_deps=[1]),
        dict(id=1, name="c", type=4, duration_micros=7),
    )
    before = src.read_bytes()
    res = run("transform", tmp_path / "d", "-o", tmp_path / "o" / "x", "--scale-compute", "2")
    assert res.exit_code == 0, res.stderr
    assert res.stderr.splitlines() == [
        f"tracekit: warning: {src}: rank 0: duplicate node id(s) 1; a dependency on them is ambiguous, so the "
        "output may link the wrong node (`tracekit validate` lists every problem)",
        f"wrote 1 ranks to {tmp_path / 'o' / 'x'}.<rank>.et: 1 -> 1 ranks, 3 -> 3 nodes (ScaleCompute)",
    ]
    assert (tmp_path / "o" / "x.0.et").exists() and src.read_bytes() == before
    quiet = run("-q", "transform", tmp_path / "d", "-o", tmp_path / "o" / "y", "--scale-compute", "2")
    assert (quiet.exit_code, quiet.stderr) == (0, "")
    clean = run("transform", ring_job(tmp_path, 2), "-o", tmp_path / "o" / "z", "--scale-compute", "2")
    assert (clean.exit_code, clean.stderr.startswith("wrote 2 ranks"), "warning" in clean.stderr) == (0, True, False)


def test_an_existing_file_or_prefix_with_glob_characters_in_its_name_is_taken_literally(tmp_path):
    prefix = ring_job(tmp_path, 2)
    for rank in (0, 1):
        (tmp_path / f"run[1].{rank}.et").write_bytes(Path(f"{prefix}.{rank}.et").read_bytes())
    one = run("validate", tmp_path / "run[1].0.et")  # a file: was read as a glob ("[1]" = "1") and not found
    assert (one.exit_code, one.stdout.splitlines()[-1]) == (0, "OK: 1 ranks, 3 nodes, 1 warnings"), one.stderr
    both = run("validate", tmp_path / "run[1]")  # a prefix
    assert (both.exit_code, both.stdout) == (0, "OK: 2 ranks, 6 nodes, 0 warnings\n"), both.stderr
    globbed = run("validate", str(tmp_path / "job.*.et"))  # a real glob still works
    assert (globbed.exit_code, globbed.stdout) == (0, "OK: 2 ranks, 6 nodes, 0 warnings\n"), globbed.stderr


def test_a_path_option_the_file_system_refuses_is_bad_input_exit_1(tmp_path):
    prefix = ring_job(tmp_path, 2)
    line = one_line_error(run("dump", f"{prefix}.0.et", "-o", tmp_path))
    assert line.split(" (see ")[0] == (
        f"tracekit: error: Invalid value for '-o' / '--output': File '{tmp_path}' is a directory"
    )
    line = one_line_error(run("bench-coll", "--hw", "dgx-a100", "--nccl-tests", tmp_path / "none.txt"))
    assert line.split(" (see ")[0] == (
        f"tracekit: error: Invalid value for '--nccl-tests': File '{tmp_path}/none.txt' does not exist"
    )


@pytest.fixture(scope="module")
def class_set(tmp_path_factory):
    """A 4-rank LLM job (tp 2, pp 2) stored as its rank classes; returns the manifest."""
    from dataclasses import replace

    from tracekit.converters.generators import LLMConfig, ParallelSpec, Roofline, llm_preset
    from tracekit.converters.generators.llm import write_llm

    model, _ = llm_preset("gpt3-1.3b")
    config = LLMConfig(replace(model, num_layers=2), ParallelSpec(dp=1, tp=2, pp=2), global_batch_size=2)
    base = tmp_path_factory.mktemp("cs")
    return write_llm(config, base / "job", Roofline(989e12 * 0.7, 3.35e12 * 0.8), classes=True)[0]


def _tampered(class_set, tmp_path, edit):
    import orjson

    for f in class_set.parent.iterdir():
        (tmp_path / f.name).write_bytes(f.read_bytes())
    doc = orjson.loads(class_set.read_bytes())
    edit(doc)
    manifest = tmp_path / class_set.name
    manifest.write_bytes(orjson.dumps(doc))
    return manifest


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda d: d.update(world_size=10**12), "world_size 1,000,000,000,000 is out of range (1 to 1,048,576)"),
        (
            lambda d: d["classes"][0].update(file="../../../etc/hostname"),
            "class 0: trace file '../../../etc/hostname' is not a file name beside the manifest",
        ),
        (
            lambda d: d["classes"][0].update(file="/etc/passwd"),
            "class 0: trace file '/etc/passwd' is not a file name beside the manifest",
        ),
        (lambda d: d["classes"][0].pop("slots"), "class 0: no 'slots' entry"),
    ],
    ids=["huge-world", "relative-escape", "absolute", "missing-key"],
)
def test_a_tampered_class_manifest_is_one_line_naming_it(class_set, tmp_path, edit, message):
    """world_size 10**12 was killed by the OOM killer (a set of every rank); a class file outside the manifest's
    folder was read (/etc/passwd, reported as a bad trace)."""
    manifest = _tampered(class_set, tmp_path, edit)
    for args in (
        ("info", manifest),
        ("replay", manifest, "--hw", "dgx-a100"),
        ("expand", manifest, "-o", tmp_path / "o" / "x"),
    ):
        line = one_line_error(run(*args))
        assert line == f"tracekit: error: {manifest}: bad rank-class manifest: {message}"
    assert not (tmp_path / "o").exists()


def test_expand_of_a_truncated_class_file_names_the_file_and_rank(class_set, tmp_path):
    manifest = _tampered(class_set, tmp_path, lambda d: None)
    cls0 = tmp_path / class_set.name.replace(".classes.json", ".class0.et")
    cls0.write_bytes(cls0.read_bytes()[:3000])
    line = one_line_error(run("expand", manifest, "-o", tmp_path / "o" / "x"))
    assert line.startswith(f"tracekit: error: {cls0}: rank 0: record of "), line
    assert not (tmp_path / "o").exists() and leftovers(tmp_path) == []


def test_the_replay_summary_says_how_compute_was_timed_not_the_specs_default(tmp_path):
    """A generated trace (FLOPs, no measured times) was summarised as 'compute measured x 1' and 'compute:
    measured times' while every node was timed by the roofline."""
    from tracekit.io import write_traceset
    from tracekit.model import Attr, ExecutionTrace, Node, NodeType
    from tracekit.sets.traceset import TraceSet

    gemm = Node(
        1, "gemm", type=NodeType.COMP_NODE, attrs=[Attr.infer("num_ops", 10**12), Attr.infer("tensor_size", 10**6)]
    )
    write_traceset(TraceSet({0: ExecutionTrace([gemm], rank=0)}), tmp_path / "gen")
    res = run("replay", tmp_path / "gen", "--hw", "dgx-h100")
    assert res.exit_code == 0, res.stderr
    lines = res.stdout.splitlines()
    assert "collective model nccl, compute roofline x 1 " in " ".join(res.stdout.split()), lines[0]
    assert lines[-2:] == [
        "compute nodes timed by: roofline 1",
        "compute: measured times (the trace records no capture device); 1 nodes without one timed by roofline on "
        "the spec",
    ]
    measured = run("replay", ring_job(tmp_path, 2), "--hw", "dgx-h100").stdout
    assert "compute measured x 1 " in " ".join(measured.split()) and measured.splitlines()[-1] == (
        "compute: measured times (the trace records no capture device)"
    )


def test_collective_rows_equal_as_printed_share_one_row():
    """Two groups of 392 8-MiB all-reduces at 19,841.18 and 19,841.20 ns printed as two identical rows."""
    from types import SimpleNamespace

    from tracekit.cli.replay import _comm_rows

    def row(pg, mean_ns, busbw):
        return dict(
            kind="ALL_REDUCE",
            comm_bytes=8 << 20,
            group_size=2,
            algorithm="ring",
            mean_time_ns=mean_ns,
            algbw_gbps=busbw,
            busbw_gbps=busbw,
            count=392,
            total_time_ns=392 * mean_ns,
            pg_name=pg,
        )

    rows = [
        row("1", 19841.183673469386, 422.78767946751486),
        row("2", 19841.20408163265, 422.78724461216456),
        row("3", 30000.0, 279.6),
    ]
    merged, distinct = _comm_rows(SimpleNamespace(collective_summary=lambda: rows), top=8)
    assert distinct == 2
    assert [(m["groups"], m["count"]) for m in merged] == [(["1", "2"], 784), (["3"], 392)]  # most total time first
    assert merged[0]["mean_time_ns"] == (392 * 19841.183673469386 + 392 * 19841.20408163265) / 784
