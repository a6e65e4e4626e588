"""Folding under the ASTRA-sim model stops reading rank files once it cannot succeed (``gather_files(one_class=)``).

The ASTRA-sim model folds only a job whose ranks are all one class (the default group spans every rank and its
members may arrive apart, folding._astra_foldable).  ``tracekit replay`` tries folding first; with two classes and a
class of two among the ranks read, the rest of the job cannot change the outcome, so the reader stops there and the
replay goes unfolded at once, with the reason the proof would have given and the same result.
"""

from __future__ import annotations

import pytest

from tracekit.model import CollectiveType
from tracekit.replayer import ReplayOptions, replay_with_traces
from tracekit.replayer.simulation.folding import ASTRA_WORLD_SPANS_CLASSES, NotFoldable
from tracekit.replayer.simulation.gather import gather_files
from tracekit.sets.io import write_traceset
from tests.replayer._engine_kit import coll, comp, make_spec, traceset

MIB = 1 << 20


def _two_classes(tmp_path, b_ranks=(1, 3), ranks=4):
    """Rank files of two classes (``A B A B`` by default): compute 10 us (A) or 20 us (the ``b_ranks``, B), then a
    1 MiB world all-reduce."""
    per_rank = [
        [comp(0, 20_000 if r in b_ranks else 10_000), coll(1, CollectiveType.ALL_REDUCE, MIB, [0])]
        for r in range(ranks)
    ]
    write_traceset(traceset(per_rank), tmp_path / "job")
    return tmp_path / "job"


def _astra_ring4():
    astra = {"endpoint_delay_ns": 10, "preferred_dataset_splits": 1, "local_mem_bw_gbps": 1600.0}
    dims = [{"topology": "ring", "size": 4, "bandwidth_gbps": 50.0, "latency_ns": 500.0}]
    return make_spec(dims, model="astra", fit=False, astra=astra)


def test_one_class_stops_at_the_second_class_with_a_twin(tmp_path):
    """Ranks 0 (A), 1 (B), 2 (A): two classes and a twin after 3 of 4 files; without one_class all 4 are read."""
    prefix = _two_classes(tmp_path)
    seen: list[int] = []

    def say(stage, done=0, total=None):
        seen.append(done)

    with pytest.raises(NotFoldable, match="group '0' spans classes"):
        gather_files(prefix, ReplayOptions(), say, one_class=True)
    assert max(seen) == 2  # progress is reported before each file: ranks 0, 1, 2 were read
    seen.clear()
    gathered = gather_files(prefix, ReplayOptions(), say)
    assert max(seen) == 3 and sorted(gathered.scans) == [0, 1, 2, 3]
    assert len({s.digest for s in gathered.scans.values()}) == 2


def test_one_class_probes_the_last_rank_once_the_first_are_one_class(tmp_path):
    """Ranks ``A A A A A B`` (the stages of a TP x PP x DP job): after ranks 0 and 1 (one class of two) the last
    rank is digested out of turn and differs, so 2 files are read in turn, not 6; ``A A A A A A`` reads all 6 and
    gathers one class (the probe's trace is not kept: rank 5 is read again in turn)."""
    prefix = _two_classes(tmp_path / "ab", b_ranks=(5,), ranks=6)
    seen: list[int] = []

    def say(stage, done=0, total=None):
        seen.append(done)

    with pytest.raises(NotFoldable, match="group '0' spans classes"):
        gather_files(prefix, ReplayOptions(), say, one_class=True)
    assert max(seen) == 1
    seen.clear()
    gathered = gather_files(_two_classes(tmp_path / "aa", b_ranks=(), ranks=6), ReplayOptions(), say, one_class=True)
    assert max(seen) == 5 and sorted(gathered.scans) == list(range(6)) and sorted(gathered.kept) == [0]


def test_astra_replay_falls_back_with_the_proofs_reason_and_the_unfolded_result(tmp_path):
    """Folded replay (default) on the ASTRA model: the world spans 2 classes, so every rank is simulated; the
    reason is the one plan_folding gives, and the per-rank times equal the unfolded replay's."""
    prefix = _two_classes(tmp_path)
    spec = _astra_ring4()
    folded, _ = replay_with_traces(prefix, spec)
    unfolded, _ = replay_with_traces(prefix, spec, options=ReplayOptions(fold=False))
    assert folded.folding is not None and folded.folding.reason == ASTRA_WORLD_SPANS_CLASSES
    assert [r.iteration_time_ns for r in folded.ranks] == [r.iteration_time_ns for r in unfolded.ranks]
    assert folded.iteration_time_ns == unfolded.iteration_time_ns > 20_000
