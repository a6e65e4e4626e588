"""Output faults a fresh-user trial found (session of 2026-12-01): labels, table widths, "wrote" lines."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from _hardkit import run

from tracekit.io import write_traceset

REPO = Path(__file__).resolve().parents[2]
DIST_WS2 = REPO / "sample_traces" / "pytorch" / "dist_ws2"


@pytest.fixture(scope="module")
def gloo_job(tmp_path_factory) -> Path:
    """The bundled 2-rank gloo capture (ET + Kineto), converted; returns its prefix."""
    from tracekit.converters.pytorch import convert_pytorch

    ts = convert_pytorch(
        sorted(DIST_WS2.glob("et_rank*.json")), sorted(DIST_WS2.glob("kineto_rank*.json")), executor="serial"
    )
    prefix = tmp_path_factory.mktemp("gloo") / "job"
    write_traceset(ts, prefix)
    return prefix


def test_check_replay_labels_the_job_row_all_ranks_not_rank_minus_one(gloo_job, tmp_path):
    res = run("check-replay", gloo_job, "-o", tmp_path / "c.json", "--html-out", tmp_path / "c.html")
    assert res.exit_code == 0, res.stderr
    first_cells = [line.split("│")[1].strip() for line in res.stdout.splitlines() if line.startswith("│")]
    assert first_cells == ["0", "1", "all ranks"]  # two ranks' ProfilerStep#2, then the job's
    assert "-1" not in first_cells
    assert "<tr><td>all ranks</td><td>2</td>" in (tmp_path / "c.html").read_text()
    # the JSON keeps the documented rank -1 for the job row
    assert [r["rank"] for r in json.loads((tmp_path / "c.json").read_text())["rows"]] == [0, 1, -1]
    # and both files are announced on stderr, as replay announces its outputs
    assert res.stderr.splitlines() == [f"wrote {tmp_path / 'c.json'}", f"wrote {tmp_path / 'c.html'}"]


def test_dump_and_load_say_what_they_wrote_on_stderr_and_keep_stdout_for_data(tmp_path):
    et = REPO / "sample_traces" / "chakra" / "all_reduce.0.et"
    res = run("dump", et, "-o", tmp_path / "a.json")
    assert res.exit_code == 0, res.stderr
    size = (tmp_path / "a.json").stat().st_size
    assert res.stdout == ""
    assert res.stderr == f"wrote {tmp_path / 'a.json'} (rank 0, 1 nodes, {size:,} bytes of JSON)\n"
    res = run("load", tmp_path / "a.json", "-o", tmp_path / "b.0.et")
    assert (res.exit_code, res.stdout) == (0, "")
    assert res.stderr == f"wrote {tmp_path / 'b.0.et'} (rank 0, 1 nodes)\n"
    assert (tmp_path / "b.0.et").read_bytes() == et.read_bytes()
    # -q: nothing but errors; --json: the data on stdout only
    assert run("-q", "load", tmp_path / "a.json", "-o", tmp_path / "c.0.et").stderr == ""
    res = run("load", tmp_path / "a.json", "-o", tmp_path / "d.0.et", "--json")
    assert json.loads(res.stdout) == {"output": str(tmp_path / "d.0.et"), "rank": 0, "nodes": 1}
    assert res.stderr == ""
    # to stdout, dump writes only the document
    res = run("dump", et)
    assert json.loads(res.stdout)["nodes"] and res.stderr == ""


def _rendered_at_80_columns(analysis) -> str:
    from rich.console import Console

    from tracekit.cli.analyze import render_analysis

    with open(os.devnull, "w") as sink:
        console = Console(width=80, record=True, file=sink, color_system=None)
        render_analysis(console, analysis)
    return console.export_text()


def test_analyze_tables_fit_an_80_column_terminal_with_whole_headers():
    from tracekit.converters.pytorch.kineto_analysis import analyze_kineto_files

    analysis = analyze_kineto_files(sorted(str(p) for p in DIST_WS2.glob("kineto_rank*.json")), top=10)
    text = _rendered_at_80_columns(analysis)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80
    head = lines[: lines.index(next(ln for ln in lines if "idle per stream" in ln))]
    assert not any("…" in line for line in head), "\n".join(head)
    cells = [[c.strip() for c in ln.split("┃")[1:-1]] for ln in head if ln.startswith("┃")]
    assert cells[0][2:] == ["window", "compute", "exposed", "other", "comm", "overlap"]
    assert cells[1] == ["rank", "work", "ms", "ms", "comm ms", "idle ms", "ms", "% of comm"]
    assert cells[2] == ["rank", "gemm", "attention", "comm", "memory", "other"]
    # rank 0 of the bundled gloo capture: window = compute + exposed comm + other idle, in ms
    (r0,) = [r for r in analysis.ranks if r.rank == 0]
    assert r0.window_ns == r0.compute_ns + r0.exposed_comm_ns + r0.other_idle_ns
    row = next(ln for ln in head if ln.startswith("│    0 │  CPU"))
    assert [c.strip() for c in row.split("│")[3:6]] == [
        f"{v / 1e6:,.3f}" for v in (r0.window_ns, r0.compute_ns, r0.exposed_comm_ns)
    ]


def test_analyze_prints_a_long_run_in_seconds_so_values_keep_three_digits():
    from tracekit.converters.pytorch.kineto_analysis import MeasuredAnalysis, RankAnalysis

    classes = (("gemm", 9_000_000_000), ("attention", 0), ("comm", 3_000_000_000), ("memory", 0), ("other", 0))
    rank = RankAnalysis(
        rank=1023, path=None, device=True, window_ns=12_345_678_901, events=5, time_by_class_ns=classes,
        compute_ns=9_000_000_000, comm_ns=3_000_000_000, overlap_ns=750_000_000, exposed_comm_ns=2_250_000_000,
        other_idle_ns=1_095_678_901, streams=(), launch=None, top_kernels=(),
    )  # fmt: skip
    text = _rendered_at_80_columns(MeasuredAnalysis((rank,)))
    assert max(len(line) for line in text.splitlines()) <= 80 and "…" not in text
    row = next(ln for ln in text.splitlines() if ln.startswith("│ 1023"))
    # 12,345,678,901 ns = 12.346 s; overlap 750 ms of 3 s of comm = 25.0 %
    assert [c.strip() for c in row.split("│")[1:-1]] == [
        "1023",
        "GPU",
        "12.346",
        "9.000",
        "2.250",
        "1.096",
        "3.000",
        "25.0",
    ]
    assert "measured time by kernel class per rank, s" in text


@pytest.mark.parametrize("classes", [False, True])
def test_generate_llm_off_a_terminal_says_what_it_wrote_like_the_other_generators(tmp_path, classes):
    # CliRunner's streams are not terminals: no progress bar, but the one summary line on stderr
    args = ["generate", "llm", "--model", "gpt3-1.3b", "--pp", "2", "--dp", "2", "--layers", "4"]
    res = run(*args, *(["--classes"] if classes else []), "-o", tmp_path / "g")
    assert (res.exit_code, res.stdout) == (0, ""), res.stderr
    # gpt3-1.3b's preset global batch 512 over dp 2 at micro-batch 1: 256 micro-batches per pipeline; one line
    if classes:
        assert res.stderr == (
            f"wrote {tmp_path / 'g.classes.json'}: 4 ranks in 2 rank classes (256 micro-batches per pipeline)\n"
        )
    else:
        assert res.stderr == (
            f"wrote 4 trace(s): {tmp_path / 'g.0.et'} ... {tmp_path / 'g.3.et'} (256 micro-batches per pipeline)\n"
        )
    dlrm = run("generate", "dlrm", "--ranks", "2", "-o", tmp_path / "d")
    assert dlrm.stderr == f"wrote 2 trace(s): {tmp_path / 'd.0.et'} ... {tmp_path / 'd.1.et'}\n"
    assert run("-q", *args, "-o", tmp_path / "q").stderr == ""


def test_a_wrote_line_is_one_line_however_long_its_path(tmp_path):
    deep = tmp_path.joinpath(*(["a_rather_long_folder_name"] * 8))
    res = run("generate", "micro", "--collective", "all_reduce", "--size", "1MiB", "--ranks", "2", "-o", deep / "m")
    assert res.exit_code == 0, res.stderr
    assert len(str(deep)) > 200  # wider than the 120 columns of a piped console
    assert res.stderr == f"wrote 2 trace(s): {deep / 'm.0.et'} ... {deep / 'm.1.et'}\n"


def test_the_demo_compares_the_two_gpus_with_one_collective_model(tmp_path, monkeypatch):
    from tracekit.cli import demo

    steps: list[list[str]] = []
    monkeypatch.setattr(demo, "_step", lambda title, args: steps.append(args))
    demo.main(["--out", str(tmp_path / "demo")])
    replays = [a for a in steps if a[0] == "replay" and a[a.index("--hw") + 1].startswith("dgx-")]
    # the bundled job on both GPUs, then (with ../shared/real) the ResNet-50 capture on both
    assert [a[a.index("--hw") + 1] for a in replays] in (["dgx-a100", "dgx-h100"], ["dgx-a100", "dgx-h100"] * 2)
    # the demo names the model on every side (both presets default to nccl since issue 28; a user spec may not)
    assert {a[a.index("--collective-model") + 1] for a in replays if "--collective-model" in a} == {"nccl"}
    assert all("--collective-model" in a for a in replays)


def test_a_cpu_capture_projected_to_a_gpu_takes_the_gpus_roofline_not_the_cpus_measured_time():
    from tracekit.costs.devices import device_model
    from tracekit.costs.projection import projected_duration

    cpu, a100, h100 = device_model("host-cpu"), device_model("a100-80gb"), device_model("h100-sxm")
    # an op without a class: max(F / peak(default dtype), B / bandwidth).  A100: bf16 312 TFLOP/s, 2,039 GB/s:
    # 1 GFLOP -> 3,205.128 ns; 1 MB -> 490.4 ns; so 3,205.128 ns whatever the CPU measured
    for measured_ns in (1_000.0, 59_494_141.0):
        ns, method, fell = projected_duration(measured_ns, 1e9, 1e6, None, None, cpu, a100)
        assert (method, fell) == ("projected", False)
        assert ns == pytest.approx(1e9 / 312e12 * 1e9, rel=1e-12)  # 3,205.128 ns
    # GPU -> GPU keeps the ratio: A100 1,000 ns -> H100 (bf16 989.4 TFLOP/s) 1,000 x 312 / 989.4 = 315.343 ns
    ns, method, _ = projected_duration(1_000.0, 1e9, 1e6, None, None, a100, h100)
    assert ns == pytest.approx(1_000 * 312 / 989.4, rel=1e-12)
    # CPU -> CPU too: the measured efficiency of a host carries over to another host
    ns, _, _ = projected_duration(1_000.0, 1e9, 1e6, None, None, cpu, cpu)
    assert ns == pytest.approx(1_000.0)


def test_the_bundled_cpu_capture_projected_to_an_a100_is_faster_than_measured(gloo_job):
    from tracekit.io import read_traceset
    from tracekit.replayer.orchestration.projected import replay_with_compute

    ts = read_traceset(gloo_job)  # encoded records: the columnar retarget path would scale by a ratio
    measured, _, _, _ = replay_with_compute(ts, "dgx-a100", compute="measured")
    projected, _, plan, report = replay_with_compute(ts, "dgx-a100", compute="projected")
    assert (plan.source, plan.target, report.rough) == ("host-cpu", "a100-80gb", True)
    # 140 host ops with a cost: 580.850 ms measured on the CPU (97.8 % of the compute); on the A100 each takes
    # its roofline time.  (Before: 112 ops, 458.461 ms; the CPU aten::addmm left its GEMM to the aten::copy_
    # of its bias, and 129 ms stayed at CPU time as "kept_no_cost".)
    assert report.nodes["projected"] == 140
    assert round(report.measured_ns["projected"] / 1e6, 3) == 580.850
    assert report.measured_ns["kept_no_cost"] < 7e6  # 6.699 ms
    assert report.projected_ns["projected"] < 1e6  # under a millisecond in all (0.189 ms)
    assert projected.iteration_time_ns < measured.iteration_time_ns
    assert "each op with a cost takes the GPU's roofline time" in report.lines()[0]


def test_a_folder_of_pytorch_json_given_as_traces_says_to_convert_it_first():
    res = run("replay", DIST_WS2, "--hw", "dgx-a100")
    assert res.exit_code == 1 and res.stderr.count("\n") == 1
    assert res.stderr == (
        f"tracekit: error: {DIST_WS2}: no trace files match '{DIST_WS2}' (expected <prefix>.<rank>.et files); "
        f"the folder holds 4 JSON file(s) (et_rank0.json ...): convert a PyTorch capture first, e.g. tracekit "
        f"convert pytorch --et '{DIST_WS2}/et_rank*.json' --kineto '{DIST_WS2}/kineto_rank*.json' -o out/job\n"
    )


def test_info_prints_a_cpu_captures_few_flops_in_a_unit_that_shows_them(gloo_job):
    from tracekit.cli._render import fmt_flops
    from tracekit.io import read_traceset

    assert [fmt_flops(x) for x in (0, 999, 1_436_672, 2_338_600_000_000)] == ["0", "999", "1.4 MFLOP", "2.3 TFLOP"]
    res = run("info", gloo_job)
    flops = sum(n.num_ops or 0 for n in read_traceset(gloo_job)[0].nodes)
    assert 1e6 < flops < 1e9  # the bundled gloo job: a few MFLOP per rank, once printed as "0.0" GFLOP
    row = next(ln for ln in res.stdout.splitlines() if ln.startswith("│    0 │ cpu"))
    assert row.split("│")[-2].strip() == fmt_flops(flops)


@pytest.mark.parametrize(
    "args, message",
    [
        (["diff", "a.json"], "Missing argument 'B.json' (see 'tracekit diff --help')"),
        (["report", "a.json"], "Missing option '-o' / '--output' (see 'tracekit report --help')"),
        (["dump"], "Missing argument 'TRACE' (see 'tracekit dump --help')"),
    ],
)
def test_a_missing_path_argument_or_option_is_a_usage_error_exit_2(args, message):
    # click's MissingParameter is a BadParameter: a path parameter not given was taken for one the file
    # system refused (exit 1)
    from click.testing import CliRunner

    from tracekit.cli import cli

    res = CliRunner().invoke(cli, args, prog_name="tracekit")
    assert (res.exit_code, res.stderr) == (2, f"tracekit: error: {message}\n")


def test_check_replay_says_what_was_measured_when_there_is_no_profiler_step(tmp_path):
    from tracekit.model import ExecutionTrace, Node, NodeType
    from tracekit.sets.traceset import TraceSet

    # two ops measured at 1-2 ms and 4-5 ms: the span is 4 ms, the replay runs them back to back (2 ms)
    nodes = [
        Node(id=1, name="a", type=NodeType.COMP_NODE, duration_ns=1_000_000, start_time_ns=1_000_000),
        Node(id=2, name="b", type=NodeType.COMP_NODE, duration_ns=1_000_000, start_time_ns=4_000_000, data_deps=[1]),
    ]
    write_traceset(TraceSet([ExecutionTrace(nodes)]), tmp_path / "job")
    res = run("check-replay", tmp_path / "job")
    assert res.exit_code == 0, res.stderr
    lines = res.stdout.splitlines()
    row = next(ln for ln in lines if ln.startswith("│    0 │"))
    assert [c.strip() for c in row.split("│")[1:6]] == ["0", "-", "4.000", "2.000", "-50.0%"]
    assert lines[-1] == "rank 0: measured = span of the measured node times (no ProfilerStep marker)"


def test_a_parsers_multi_line_report_is_printed_as_one_error_line(tmp_path):
    system = REPO / "tests" / "data" / "astra" / "system_ring_splits1.json"
    (tmp_path / "net.yml").write_text("topology: [ Ring ]\nnpus_count: [ 4 ]\nthis line: has: two colons\n")
    res = run("hw", "import-astra", "--system", system, "--network", tmp_path / "net.yml", "-o", tmp_path / "s.toml")
    assert res.exit_code == 1 and res.stderr.count("\n") == 1, res.stderr
    # PyYAML's report (problem, then the context line and a caret on lines of their own) as its problem mark
    assert res.stderr == (
        f"tracekit: error: {tmp_path / 'net.yml'}: not valid YAML at line 3, column 15: mapping values are not "
        "allowed here\n"
    )  # at the second colon
    assert not (tmp_path / "s.toml").exists()
