"""Issue 34's features tried as a new user would: the what-if route (convert, transform --dp, replay, report) on
real captures and generated jobs, results by rank class, progress, the memory bound, bad class sets.

Each test is a fault found by trying the route; the module names the symptom, the test the fixed behaviour.
"""

from __future__ import annotations

import json
import re

import pytest
from _hardkit import one_line_error, ring_job, run

from tracekit.sets.classset import read_class_set
from tracekit.wire.io import read_trace


def _replay_json(prefix) -> dict:
    res = run("replay", prefix, "--hw", "dgx-h100", "--json")
    assert res.exit_code == 0, res.stderr
    return json.loads(res.stdout)


@pytest.mark.parametrize("per_rank", [False, True])
def test_a_one_rank_job_rescaled_keeps_its_collectives_on_every_rank(tmp_path, per_rank):
    """A 1-rank capture's group is all of its one rank, which the per-dimension mapping read as 'this rank
    only': `transform --dp 4` gave each new rank a 1-rank group of its own (all-reduces became free local
    no-ops, iteration 1,000 ns instead of the 4-rank job's 27,755 ns) and declared 4 singleton groups, so
    the rescaled set could not be rescaled again ('process groups other than all ranks')."""
    one = ring_job(tmp_path / "one", 1, pg="5")
    four = ring_job(tmp_path / "four", 4, pg="5")
    extra = ["--per-rank"] if per_rank else []
    assert run("transform", one, "--dp", "4", "-o", tmp_path / "dp4", *extra).exit_code == 0
    got, want = _replay_json(tmp_path / "dp4"), _replay_json(four)
    assert got["iteration_time_ns"] == want["iteration_time_ns"] == 27_755
    rows = got.get("collectives") or got["collective_table"]
    assert {(r["group_size"], r["count"]) for r in rows} == {(4, 1)}
    path = tmp_path / "dp4.0.et" if per_rank else read_class_set(tmp_path / "dp4.classes.json").classes[0].file
    trace = read_trace(path)
    assert {k: tuple(v) for k, v in trace.process_groups().items()} == {"0": ()}
    again = run("transform", tmp_path / "dp4", "--dp", "8", "-o", tmp_path / "dp8", *extra)
    assert again.exit_code == 0, again.stderr
    assert (
        _replay_json(tmp_path / "dp8")["iteration_time_ns"]
        == _replay_json(ring_job(tmp_path / "e", 8))["iteration_time_ns"]
    )


def _generated_classes(folder, dp: int):
    prefix = folder / f"dp{dp}" / "job"
    res = run(
        "-q", "generate", "llm", "--model", "gpt3-1.3b", "--layers", "2", "--tp", "2", "--pp", "2", "--dp", dp,
        "--classes", "-o", prefix,
    )  # fmt: skip
    assert res.exit_code == 0, res.stderr
    return prefix


def test_export_astra_of_a_class_set_decodes_no_rank_whole(tmp_path, monkeypatch):
    """export astra decoded every node of every rank into Python objects twice (broadcasts rewritten through
    the node list, METADATA nodes removed through it): param-resnet --dp 1024 took 2.9 CPU s a rank, a
    projected 50 CPU minutes. Now only the changed records are re-encoded; the files are byte-identical."""
    from tracekit.wire.nodeview import NodeView

    prefix = _generated_classes(tmp_path, 8)  # 8 x 2 x 2 = 32 ranks of 2,245 and 2,820 nodes, 1 METADATA each
    decoded = []
    real = NodeView._build
    monkeypatch.setattr(NodeView, "_build", lambda self, lo, hi: decoded.extend(range(lo, hi)) or real(self, lo, hi))
    res = run("-q", "export", "astra", prefix, "-o", tmp_path / "astra", "--hw", "dgx-h100")
    assert res.exit_code == 0, res.stderr
    assert len(list((tmp_path / "astra").glob("workload.*.et"))) == 32
    assert len(decoded) < 2_245  # fewer than one rank's nodes for all 32 ranks (was 3 x every node of every rank)


def test_export_astra_of_a_class_set_holds_one_rank_at_a_time(tmp_path):
    """export astra of a class set built every rank's trace up front and kept each one's decoded columns:
    peak RSS 87 MB at 16 ranks, 161 MB at 64, 1,635 MB at 1,024 (param-resnet --dp N). The peak of the Python
    heap is now the same for 4 and 32 data-parallel replicas (16 and 128 ranks)."""
    import tracemalloc

    from tracekit.cli import cli  # noqa: F401 - imports done before measuring

    peaks = []
    for dp in (4, 32):
        prefix = _generated_classes(tmp_path, dp)
        tracemalloc.start()
        res = run("-q", "export", "astra", prefix, "-o", tmp_path / f"astra{dp}", "--hw", "dgx-h100")
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
        assert res.exit_code == 0, res.stderr
    assert peaks[1] < 1.25 * peaks[0], peaks


def test_sweep_takes_the_class_set_transform_wrote(tmp_path):
    """`sweep` of the class set `transform --dp` writes (the documented what-if route) said 'no trace files
    match' (it looked for rank files only); each point now equals `replay` of the class set on that point."""
    one = ring_job(tmp_path / "one", 2)
    assert run("-q", "transform", one, "--dp", "64", "-o", tmp_path / "big").exit_code == 0
    assert (tmp_path / "big.classes.json").is_file()
    res = run(
        "sweep", tmp_path / "big", "--hw", "dgx-h100", "--vary", "compute.duration_scale=1,2",
        "-o", tmp_path / "sw", "--json", "--executor", "serial",
    )  # fmt: skip
    assert res.exit_code == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["world_size"] == 64
    swept = [row["iteration_time_ns"] for row in doc["rows"]]
    replayed = [
        _replay_json(tmp_path / "big")["iteration_time_ns"],
        json.loads(run("replay", tmp_path / "big", "--hw", "dgx-h100", "--compute-scale", "2", "--json").stdout)[
            "iteration_time_ns"
        ],
    ]
    assert swept == replayed and replayed[1] - replayed[0] == 1_000  # the 1,000-ns compute node, doubled


def _overlapped_job(folder):
    """8 ranks: a 10-ms compute node and, on the communication stream beside it, a 1-MiB all-reduce."""
    from tracekit.io import write_traceset
    from tracekit.model import Attr, ExecutionTrace, Node, NodeType
    from tracekit.model.groups import pg_init_node
    from tracekit.sets.traceset import TraceSet

    traces = []
    for _ in range(8):
        comp = Node(id=2, name="gemm", type=NodeType.COMP_NODE, duration_ns=10_000_000)
        attrs = [Attr.infer("comm_type", 0), Attr.infer("comm_size", 1 << 20), Attr.infer("pg_name", "0")]
        coll = Node(id=3, name="all_reduce", type=NodeType.COMM_COLL_NODE, attrs=attrs)
        traces.append(ExecutionTrace([pg_init_node(1, {"0": tuple(range(8))}), comp, coll]))
    write_traceset(TraceSet(traces), folder / "job")
    return folder / "job"


def test_a_swept_key_that_moves_hidden_communication_is_not_called_unused(tmp_path):
    """A bandwidth sweep of a job whose communication hides behind compute said the key 'is unused by the nccl
    model for this job' while the all-reduce went from 128.8 to 40.6 us (param-dlrm --dp 1024 likewise): the
    model uses the key, the iteration time does not depend on it. The note now says which."""
    res = run(
        "sweep", _overlapped_job(tmp_path), "--hw", "dgx-h100", "--vary", "network[0].bandwidth_gbps=25,400",
        "-o", tmp_path / "sw", "--json", "--executor", "serial",
    )  # fmt: skip
    assert res.exit_code == 0, res.stderr
    doc = json.loads(res.stdout)
    assert [(r["iteration_time_ns"], r["comm_ns"]) for r in doc["rows"]] == [
        (10_000_000, 128_783),
        (10_000_000, 40_614),
    ]
    assert not any("unused" in note for note in doc["notes"]), doc["notes"]
    assert (
        "network[0].bandwidth_gbps = 25, 400 did not move the iteration time: it moved the slowest rank's "
        "communication (40.614 us to 128.783 us), which overlaps compute off the critical path"
    ) in doc["notes"]


@pytest.mark.parametrize(("bound", "shown"), [("0.001", "1 MB"), ("0.0125", "12 MB"), ("0.05", "50 MB")])
def test_a_small_memory_bound_is_shown_as_given_not_as_zero(tmp_path, bound, shown):
    """`replay --memory-bound 0.001` refused with 'the memory bound is 0.0 GB' (and an estimate of '0.1 GB'):
    a bound the user set, printed as zero. Figures under 1 GB are now given in MB; nothing is written."""
    prefix = _generated_classes(tmp_path, 4)
    res = run("replay", prefix, "--hw", "dgx-h100", "--memory-bound", bound, "-o", tmp_path / "r.json")
    line = one_line_error(res)
    assert line.endswith(f"; the memory bound is {shown} (--memory-bound GB to raise it)"), line
    assert re.match(r"tracekit: error: the folded replay needs about [1-9][0-9]* MB \(", line), line
    assert not (tmp_path / "r.json").exists() and not list(tmp_path.glob(".tk-*"))


@pytest.mark.parametrize(("rank", "shown"), [("1", "'1'"), (1.9, "1.9"), (True, "True")])
def test_a_manifest_rank_that_is_not_an_integer_is_refused(tmp_path, rank, shown):
    """A class-set manifest listing rank "1", 1.9 or true was read as rank 1 (int() of each) and replayed."""
    prefix = _generated_classes(tmp_path, 2)
    manifest = tmp_path / "dp2" / "job.classes.json"
    doc = json.loads(manifest.read_text())
    assert doc["classes"][0]["ranks"][1] == 1
    doc["classes"][0]["ranks"][1] = rank
    manifest.write_text(json.dumps(doc))
    line = one_line_error(run("replay", prefix, "--hw", "dgx-h100"))
    assert line == (
        f"tracekit: error: {manifest}: bad rank-class manifest: class 0: rank {shown} is not an integer >= 0"
    )


def test_transform_dp_per_rank_of_a_class_set_writes_rank_files(tmp_path):
    """`transform CLASS_SET --dp N --per-rank` wrote a class set anyway (--per-rank silently ignored)."""
    prefix = _generated_classes(tmp_path, 2)
    res = run("transform", prefix, "--dp", "4", "--per-rank", "-o", tmp_path / "out" / "job")
    assert res.exit_code == 0, res.stderr
    assert not (tmp_path / "out" / "job.classes.json").exists()
    assert sorted(p.name for p in (tmp_path / "out").glob("job.*.et")) == sorted(f"job.{r}.et" for r in range(16))
    assert res.stderr.startswith(f"wrote 16 ranks to {tmp_path}/out/job.<rank>.et: 8 -> 16 ranks, ")
    classes = run("transform", prefix, "--dp", "4", "-o", tmp_path / "cls" / "job")
    assert classes.exit_code == 0, classes.stderr
    got, want = _replay_json(tmp_path / "out" / "job"), _replay_json(tmp_path / "cls" / "job")
    assert got.pop("provenance")["trace_paths"] != want.pop("provenance")["trace_paths"]
    assert got == want  # iteration, rank classes, collective table, critical path


def test_transform_dp_per_rank_holds_one_output_rank_at_a_time(tmp_path):
    """`transform --dp N --per-rank` built every output rank in memory: param-resnet --dp 64 took 84 CPU s and
    3.0 GB, --dp 512 was killed by the OOM killer at 23 GB within 6 s (now 3.7 CPU s, 116 MB at --dp 64). It
    rescales the classes and writes the rank files one at a time: the Python heap's peak is the same for 16
    and 64 output ranks."""
    import tracemalloc

    prefix = _generated_classes(tmp_path, 2)
    peaks = []
    for dp in (4, 16):
        tracemalloc.start()
        res = run("-q", "transform", prefix, "--dp", dp, "--per-rank", "-o", tmp_path / f"dp{dp}x" / "job")
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
        assert res.exit_code == 0, res.stderr
        assert len(list((tmp_path / f"dp{dp}x").glob("job.*.et"))) == 4 * dp
    assert peaks[1] < 1.25 * peaks[0], peaks


def test_the_memory_bound_counts_the_expanded_result_of_per_rank(tmp_path):
    """`replay --per-rank --memory-bound 2` of Llama 3 405B on 8,192 ranks was let through on the folded estimate
    (1.4 GB) and peaked at 3.7 GB: the expansion to every collective instance was not counted. A bound between
    the two estimates now lets the summary replay through and refuses --per-rank, naming the larger basis."""
    prefix = tmp_path / "job"  # gpt3-1.3b, 24 layers, 256 ranks: 109,056 communication nodes
    res = run(
        "-q",
        "generate",
        "llm",
        "--model",
        "gpt3-1.3b",
        "--tp",
        "2",
        "--pp",
        "2",
        "--dp",
        "64",
        "--classes",
        "-o",
        prefix,
    )
    assert res.exit_code == 0, res.stderr
    refused = run("replay", prefix, "--hw", "dgx-h100", "--per-rank", "--memory-bound", "0.115")
    line = one_line_error(refused)
    nodes = int(re.search(r"\(([\d,]+) communication nodes x 290 B", line).group(1).replace(",", ""))
    assert "to prove the folding and list every collective instance" in line
    summary_estimate = 90_000_000 + 130 * nodes  # + 3 x the representatives' bytes, well under the bound
    assert nodes == 109_056 and summary_estimate < 0.115e9 < 90_000_000 + 290 * nodes
    assert run("replay", prefix, "--hw", "dgx-h100", "--memory-bound", "0.115").exit_code == 0


def test_rescaling_a_class_set_says_how_many_classes_of_how_many_ranks(tmp_path):
    """`transform CLASS_SET --dp N` printed '(1 rank classes): ...' -- neither the new world size nor the
    singular; the message now names both, as the rank-file route's message does."""
    one = ring_job(tmp_path / "one", 1, pg="5")
    assert run("transform", one, "--dp", "4", "-o", tmp_path / "dp4").exit_code == 0
    res = run("transform", tmp_path / "dp4", "--dp", "8", "-o", tmp_path / "dp8")
    assert res.exit_code == 0, res.stderr
    assert res.stderr.startswith(f"wrote {tmp_path}/dp8.classes.json (1 rank class of 8 ranks): "), res.stderr
