"""Chrome-trace timelines of replays and of measured timing."""

from __future__ import annotations

import numpy as np
import orjson
import pytest
from click.testing import CliRunner

from tracekit.cli import cli
from tracekit.converters.generators.micro import collective_bench
from tracekit.errors import ReplayError
from tracekit.io import write_traceset
from tracekit.model import CollectiveType
from tracekit.replayer import replay
from tracekit.replayer.results.compact import collective_counts
from tracekit.replayer.results.result import ReplayResult
from tracekit.replayer.reporting.timeline import assign_lanes, measured_timeline, replay_timeline, write_chrome_trace

from tests.replayer._engine_kit import coll, comp, one_dim, p2p, traceset

AR = CollectiveType.ALL_REDUCE


def _events(trace, ph):
    return [e for e in trace["traceEvents"] if e["ph"] == ph]


def test_replay_timeline_processes_threads_slices_and_flows():
    ranks = [
        [comp(0, 1_000), coll(1, AR, 1000, deps=[0])],
        [comp(0, 4_000), coll(1, AR, 1000, deps=[0])],
        [comp(0, 2_000), coll(1, AR, 1000, deps=[0])],
    ]
    ts = traceset(ranks)
    result = replay(ts, one_dim(3, 1.0, 0.0))
    trace = replay_timeline(result, ts)
    procs = {e["pid"]: e["args"]["name"] for e in _events(trace, "M") if e["name"] == "process_name"}
    assert procs == {0: "rank 0", 1: "rank 1", 2: "rank 2"}
    threads = {(e["pid"], e["args"]["name"]) for e in _events(trace, "M") if e["name"] == "thread_name"}
    assert (0, "compute stream 0") in threads and (0, "comm stream 0") in threads
    slices = _events(trace, "X")
    # per rank: compute, transfer; ranks 0 and 2 also waited for rank 1
    assert sorted(e["cat"] for e in slices) == ["comm"] * 3 + ["compute"] * 3 + ["wait"] * 2
    wait0 = next(e for e in slices if e["cat"] == "wait" and e["pid"] == 0)
    assert (wait0["ts"], wait0["dur"]) == (1.0, 3.0)  # microseconds
    comm = [e for e in slices if e["cat"] == "comm"]
    assert {e["ts"] for e in comm} == {4.0}
    assert comm[0]["args"]["algorithm"] == "ring" and comm[0]["args"]["comm_bytes"] == 1000
    # arrows from the last to arrive (rank 1) to the others
    starts, ends = _events(trace, "s"), _events(trace, "f")
    assert sorted((s["pid"], f["pid"]) for s, f in zip(starts, ends)) == [(1, 0), (1, 2)]
    assert all(f["bp"] == "e" for f in ends)


def test_send_recv_arrow_and_lanes_for_overlapping_posts():
    # rank 0 posts a send (0-1000 ns) and a recv at 0 whose data comes at 500-1500 ns: partial overlap
    ranks = [
        [p2p(0, True, 1, 0, 1000), p2p(1, False, 1, 0, 1000)],
        [p2p(0, False, 0, 1, 1000), comp(1, 500), p2p(2, True, 0, 1, 1000, deps=[1])],
    ]
    ts = traceset(ranks)
    trace = replay_timeline(replay(ts, one_dim(2, 1.0, 0.0)), ts)
    names = {e["args"]["name"] for e in _events(trace, "M") if e["name"] == "thread_name" and e["pid"] == 0}
    assert names == {"p2p stream 0", "p2p stream 0 #2"}
    assert len(_events(trace, "s")) == 2


def test_assign_lanes_keeps_nesting_and_splits_partial_overlap():
    s = np.array([0.0, 1.0, 5.0, 2.0])
    e = np.array([10.0, 3.0, 12.0, 4.0])
    assert assign_lanes(s, e).tolist() == [0, 0, 1, 1]
    assert assign_lanes(s, e, nesting=False).tolist() == [0, 1, 1, 2]


def test_timeline_needs_a_schedule():
    ts = collective_bench(2, "all_reduce", 8)
    result = ReplayResult.from_json(replay(ts, one_dim(2, 1.0, 0.0)).to_json())
    with pytest.raises(ReplayError, match="no schedule"):
        replay_timeline(result, ts)


def test_measured_timeline_uses_start_and_duration(tmp_path):
    nodes = [comp(0, 500), comp(1, 300, deps=[0])]
    nodes = [nodes[0].replace(start_time_ns=1_000_000), nodes[1].replace(start_time_ns=1_000_700)]
    trace = measured_timeline(traceset([nodes]))
    xs = sorted((e["ts"], e["dur"]) for e in _events(trace, "X"))
    assert xs == [(0.0, 0.5), (0.7, 0.3)]
    assert trace["otherData"]["origin_ns"] == 1_000_000
    out = tmp_path / "m.json"
    write_chrome_trace(trace, out)
    assert orjson.loads(out.read_bytes())["traceEvents"]


def test_cli_replay_and_timeline(tmp_path):
    prefix = tmp_path / "job"
    write_traceset(collective_bench(8, "all_reduce", 1 << 20, compute_ns=2_000, iterations=2), prefix)
    tl, js = tmp_path / "tl.json", tmp_path / "r.json"
    runner = CliRunner()
    res = runner.invoke(cli, ["replay", str(prefix), "--hw", "dgx-h100", "--timeline-out", str(tl), "-o", str(js)])
    assert res.exit_code == 0, res.output
    assert "iteration time" in res.stdout and "ALL_REDUCE" in res.stdout
    assert "wrote" in res.stderr and "wrote" not in res.stdout
    result = ReplayResult.from_json(js.read_bytes())
    # a folded job's result is compact: its collective table counts the 2 all-reduces (no per-instance rows)
    assert result.provenance.spec_name == "dgx-h100" and collective_counts(result) == (2, 0)
    assert len(_events(orjson.loads(tl.read_bytes()), "X")) == 8 * 4
    measured = tmp_path / "m.json"
    res = runner.invoke(cli, ["timeline", str(prefix), "-o", str(measured)])
    assert res.exit_code == 0 and measured.exists()
    assert "slices on 8 rank(s)" in res.stderr


def _slices_sorted(trace) -> bool:
    xs = [(e["pid"], e["tid"], e["ts"]) for e in trace["traceEvents"] if e["ph"] == "X"]
    return xs == sorted(xs)


def test_slices_sorted_by_start_per_track_and_flow_cap_stated(monkeypatch, tmp_path):
    import tracekit.replayer.reporting.timeline as tl

    ts = collective_bench(4, "all_reduce", 1 << 20, iterations=3, compute_ns=500)
    result = replay(ts, one_dim(4, 100.0, 50.0))
    full = replay_timeline(result, ts)
    assert _slices_sorted(full) and _slices_sorted(measured_timeline(ts))
    kinds = [e["ph"] for e in full["traceEvents"]]
    assert kinds == sorted(kinds, key=lambda k: {"M": 0, "X": 1}.get(k, 2))  # metadata, slices, then flows
    # 3 all-reduces x 3 arrows (the last arrival to each other member)
    assert full["otherData"]["flow_arrows"] == 9 and full["otherData"]["flow_arrows_dropped"] == 0
    monkeypatch.setattr(tl, "MAX_FLOW_ARROWS", 4)
    capped = replay_timeline(result, ts)
    other = capped["otherData"]
    assert (other["flow_arrows"], other["flow_arrows_dropped"], other["flow_arrows_cap"]) == (4, 5, 4)
    assert sum(1 for e in capped["traceEvents"] if e["ph"] == "s") == 4
    prefix = tmp_path / "ar"
    write_traceset(ts, str(prefix))
    res = CliRunner().invoke(
        cli, ["replay", str(prefix), "--hw", "dgx-a100", "--timeline-out", str(tmp_path / "t.json")]
    )
    assert res.exit_code == 0 and "flow arrows not drawn (cap 4)" in " ".join(res.stderr.split())
