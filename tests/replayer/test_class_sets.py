"""Rank-class sets (tracekit.sets.classset): expand is byte-exact; replay, validate and info equal the per-rank ones."""

from __future__ import annotations

from dataclasses import fields, replace

import numpy as np
import orjson
import pytest
from click.testing import CliRunner

from tracekit.sets.classset import find_class_set, read_class_set
from tracekit.checks.classset import summarize_class_set, validate_class_set
from tracekit.cli import cli
from tracekit.converters.generators import LLMConfig, ParallelSpec, Roofline, llm_preset
from tracekit.converters.generators.llm import write_llm
from tracekit.errors import TraceFormatError
from tracekit.io import read_trace, read_traceset, trace_paths
from tracekit.replayer import ReplayOptions
from tracekit.replayer.simulation.class_replay import member_scan
from tracekit.replayer import replay_with_traces
from tracekit.replayer.simulation.folding import RankScan, scan_rank
from tracekit.replayer.simulation.scan_tables import p2p_table
from tracekit.checks.summary import summarize_files
from tracekit.checks.validate import validate_files

ROOF = Roofline(989e12 * 0.7, 3.35e12 * 0.8)


def _config(tp=2, pp=2, dp=2, layers=4):
    model, _ = llm_preset("gpt3-1.3b")
    model = replace(model, num_layers=layers)
    return LLMConfig(model, ParallelSpec(dp=dp, tp=tp, pp=pp), global_batch_size=2 * pp * dp, micro_batch_size=1)


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """The same 8-rank job written per rank and as rank classes."""
    base = tmp_path_factory.mktemp("classes")
    config = _config()
    per_rank = write_llm(config, base / "ranks" / "job", ROOF)
    manifest = write_llm(config, base / "classes" / "job", ROOF, classes=True)
    return base, per_rank, manifest[0]


def test_manifest_lists_one_class_per_stage(job):
    _, _, manifest = job
    cs = read_class_set(manifest)
    assert cs.world_size == 8
    assert [c.ranks for c in cs.classes] == [(0, 1, 2, 3), (4, 5, 6, 7)]  # tp 2 x dp 2 ranks per stage
    assert sorted(p.name for p in manifest.parent.iterdir()) == ["job.class0.et", "job.class1.et", "job.classes.json"]


def test_expand_is_byte_identical_to_per_rank_files(job, tmp_path):
    base, per_rank, manifest = job
    out = CliRunner().invoke(cli, ["-q", "expand", str(base / "classes" / "job"), "-o", str(tmp_path / "x")])
    assert out.exit_code == 0, out.output
    written = sorted(tmp_path.glob("x.*.et"))
    assert len(written) == 8
    for r, path in enumerate(per_rank):
        assert (tmp_path / f"x.{r}.et").read_bytes() == path.read_bytes()


def test_member_scan_equals_scan_of_the_member_trace(job):
    base, per_rank, manifest = job
    cs = read_class_set(manifest)
    for cls in cs.classes:
        rep = scan_rank(read_trace(per_rank[cls.representative]))
        for index, rank in enumerate(cls.ranks):
            want = scan_rank(read_trace(per_rank[rank]))
            got = member_scan(rep, rank, want.path, cls.value_map(index))
            # the send/recv arrays the fold proof reads come from the representative's, renamed (scan_tables)
            for recv in (False, True):
                assert all(np.array_equal(a, b) for a, b in zip(p2p_table(got, recv), p2p_table(want, recv)))
            assert {f.name: getattr(got, f.name) for f in fields(RankScan)} == {
                f.name: getattr(want, f.name) for f in fields(RankScan)
            }


def test_replay_of_class_set_equals_per_rank_replay_to_the_ns(job):
    base, _, manifest = job
    a, _ = replay_with_traces(base / "ranks" / "job", "dgx-h100", options=ReplayOptions())
    b, ts = replay_with_traces(base / "classes" / "job", "dgx-h100", options=ReplayOptions())
    assert b.folding.reason is None and b.folding.classes == 2 and b.folding.ranks == 8
    assert sorted(ts.ranks) == [0, 4]  # only the representatives were read
    assert a.iteration_time_ns == b.iteration_time_ns
    assert a.ranks == b.ranks
    assert a.collectives == b.collectives
    assert a.critical_path == b.critical_path
    assert a.compute_methods == b.compute_methods and a.node_count == b.node_count
    for x, y in zip(a.schedule, b.schedule):
        np.testing.assert_array_equal(x.start_ns, y.start_ns)
        np.testing.assert_array_equal(x.end_ns, y.end_ns)
        np.testing.assert_array_equal(x.instance, y.instance)
    assert b.provenance.trace_paths[5] == f"{manifest}#rank5"
    # unfolded from the class set too: the per-rank traces are derived in memory
    c, ts_all = replay_with_traces(manifest, "dgx-h100", options=ReplayOptions(fold=False))
    assert len(ts_all) == 8 and c.ranks == a.ranks and c.collectives == a.collectives


def test_validate_and_info_equal_the_per_rank_ones(job):
    base, per_rank, manifest = job
    cs = find_class_set(base / "classes")  # a directory holding one manifest
    assert cs is not None and cs.manifest == manifest
    got, want = validate_class_set(cs), validate_files(trace_paths(base / "ranks" / "job"))
    assert got.ok and want.ok
    assert (got.checked_ranks, got.checked_nodes) == (want.checked_ranks, want.checked_nodes) == (8, 2264)
    s1, s2 = summarize_class_set(cs), summarize_files(trace_paths(base / "ranks" / "job"))
    assert s1.process_groups == s2.process_groups
    assert [replace(s, path=None) for s in s1.per_rank] == [replace(s, path=None) for s in s2.per_rank]
    ts = read_traceset(manifest)  # every command's TRACES resolution
    assert len(ts) == 8 and ts[6].columns().names == read_trace(per_rank[6]).columns().names


def test_cli_generate_classes_then_info(tmp_path):
    r = CliRunner().invoke(
        cli,
        [
            "-q",
            "generate",
            "llm",
            "--model",
            "gpt3-1.3b",
            "--layers",
            "2",
            "--tp",
            "2",
            "--pp",
            "2",
            "--dp",
            "2",
            "--global-batch",
            "4",
            "--classes",
            "-o",
            str(tmp_path / "g"),
        ],
    )
    assert r.exit_code == 0, r.output
    info = CliRunner().invoke(cli, ["info", str(tmp_path / "g"), "--json"])
    assert info.exit_code == 0, info.output
    doc = orjson.loads(info.stdout)
    assert doc["ranks"] == 8 and len(doc["per_rank"]) == 8
    one = CliRunner().invoke(cli, ["info", str(tmp_path / "g"), "--rank", "5", "--json"])
    assert [s["rank"] for s in orjson.loads(one.stdout)["per_rank"]] == [5]
    v = CliRunner().invoke(cli, ["validate", str(tmp_path / "g"), "--rank", "5"])
    assert v.exit_code == 0 and v.stdout.startswith("OK: 1 ranks")
    bad = CliRunner().invoke(cli, ["info", str(tmp_path / "g"), "--rank", "8"])
    assert bad.exit_code == 1 and "rank 8 is not in the job (8 ranks)" in bad.stderr


def test_bad_manifest_names_the_file_and_the_missing_rank(job, tmp_path):
    _, _, manifest = job
    doc = orjson.loads(manifest.read_bytes())
    doc["classes"][1]["ranks"] = doc["classes"][1]["ranks"][:-1]
    doc["classes"][1]["values"] = doc["classes"][1]["values"][:-1]
    for f in manifest.parent.glob("*.et"):
        (tmp_path / f.name).write_bytes(f.read_bytes())
    bad = tmp_path / "job.classes.json"
    bad.write_bytes(orjson.dumps(doc))
    with pytest.raises(TraceFormatError, match=r"job\.classes\.json.*missing \[7\]"):
        read_class_set(bad)
    r = CliRunner().invoke(cli, ["validate", str(tmp_path / "job")])
    assert r.exit_code == 1 and "missing [7]" in r.stderr


def test_transform_of_a_class_set_runs_per_class_and_equals_the_per_rank_transform(job, tmp_path):
    from tracekit.io import split_records

    base, per_rank, manifest = job
    args = ["--scale-compute", "2", "--compact"]
    r = CliRunner().invoke(cli, ["transform", str(manifest), "-o", str(tmp_path / "c" / "job"), *args])
    assert r.exit_code == 0, r.output
    assert "2 rank classes of 8 ranks" in r.stderr
    r = CliRunner().invoke(cli, ["transform", str(base / "ranks" / "job"), "-o", str(tmp_path / "r" / "job"), *args])
    assert r.exit_code == 0, r.output
    cs = read_class_set(tmp_path / "c" / "job.classes.json")
    assert [c.ranks for c in cs.classes] == [(0, 1, 2, 3), (4, 5, 6, 7)]
    for rank, data in cs.iter_rank_bytes():  # node records equal byte for byte (metadata names the input)
        want = (tmp_path / "r" / f"job.{rank}.et").read_bytes()
        _, me, _, _ = split_records(data)
        _, me2, _, _ = split_records(want)
        assert data[me:] == want[me2:]
    a, _ = replay_with_traces(tmp_path / "c" / "job", "dgx-h100", options=ReplayOptions())
    b, _ = replay_with_traces(tmp_path / "r" / "job", "dgx-h100", options=ReplayOptions())
    assert a.iteration_time_ns == b.iteration_time_ns and a.ranks == b.ranks


def test_stamped_per_rank_files_are_derived_not_decoded_and_replay_the_same(job, tmp_path, monkeypatch):
    import tracekit.checks.validate as validate_mod

    base, per_rank, manifest = job
    from tracekit.sets.stamps import read_rank_class

    s4, s5, s0 = (read_rank_class(per_rank[r].read_bytes()) for r in (4, 5, 0))
    assert s4[0] == s5[0] != s0[0] and s4[2] != s5[2]  # same class key (stage 1), own slot values
    calls = []
    real = validate_mod.check_rank
    monkeypatch.setattr(validate_mod, "check_rank", lambda t: calls.append(t.rank) or real(t))
    a, ts = replay_with_traces(base / "ranks" / "job", "dgx-h100", options=ReplayOptions())
    assert calls == [0, 4]  # one file per class decoded and checked; the 6 others derived byte-verified
    monkeypatch.undo()
    b, _ = replay_with_traces(manifest, "dgx-h100", options=ReplayOptions())
    c, _ = replay_with_traces(base / "ranks" / "job", "dgx-h100", options=ReplayOptions(fold=False))
    assert a.ranks == b.ranks == c.ranks and a.collectives == b.collectives == c.collectives
    assert a.critical_path == c.critical_path


def test_a_stamped_file_whose_nodes_changed_is_read_in_full(job, tmp_path):
    from tracekit.io import write_trace

    base, per_rank, _ = job
    for p in per_rank:
        (tmp_path / p.name).write_bytes(p.read_bytes())
    trace = read_trace(tmp_path / "job.6.et")
    nodes = list(trace.nodes)
    k = next(i for i, n in enumerate(nodes) if n.duration_ns > 0)
    # 1 ms longer on rank 6 only; the metadata stamp still names its class
    nodes[k] = nodes[k].replace(duration_ns=nodes[k].duration_ns + 1_000_000)
    write_trace(trace.with_nodes(nodes), tmp_path / "job.6.et")
    a, _ = replay_with_traces(tmp_path / "job", "dgx-h100", options=ReplayOptions())
    c, _ = replay_with_traces(tmp_path / "job", "dgx-h100", options=ReplayOptions(fold=False))
    assert a.ranks == c.ranks and a.iteration_time_ns == c.iteration_time_ns
    assert a.ranks[6].compute_ns == a.ranks[7].compute_ns + 1_000_000
