"""Issue 34's features tried as a new user would: the what-if route (convert, transform --dp, replay, report) on
real captures and generated jobs, results by rank class, progress, the memory bound, bad class sets.

Each test is a fault found by trying the route; the module names the symptom, the test the fixed behaviour.
"""

from __future__ import annotations

import json

import pytest
from _hardkit import ring_job, run

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
