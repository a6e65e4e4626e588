"""The one way in (replayer/simulation/run.py): every input kind through replay(), fallbacks said out loud."""

from __future__ import annotations

import logging

import pytest
from _engine_kit import coll, comp, one_dim, p2p, traceset

from tracekit.io import write_traceset
from tracekit.model import CollectiveType
from tracekit.replayer import ReplayOptions, replay, replay_with_traces

MiB = 1 << 20


def _fan_in(n: int):
    """Ranks 0 and 1 run the same program (one send to rank 2); rank 2 receives from 0, then from 1."""
    return traceset(
        [[p2p(1, True, 2, 0, n)], [p2p(1, True, 2, 1, n)], [p2p(1, False, 0, 2, n), p2p(2, False, 1, 2, n, deps=[1])]]
    )


def test_unprovable_folding_falls_back_with_a_warning_and_the_reason(caplog):
    a, bw, n = 300.0, 40.0, MiB
    spec = one_dim(3, bw, a)
    with caplog.at_level(logging.INFO, logger="tracekit.replayer"):
        folded = replay(_fan_in(n), spec)
    # ranks 0 and 1 are one class, but their sends meet different recvs of rank 2: not provable
    reason = folded.folding.reason
    assert reason is not None and "does not map onto its representatives' communication" in reason
    assert (folded.folding.classes, folded.folding.ranks) == (3, 3)
    warned = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and reason in warned[0].getMessage()
    # the fallback is the unfolded replay: two transfers one after the other on rank 2's in-link
    unfolded = replay(_fan_in(n), spec, options=ReplayOptions(fold=False))
    assert unfolded.folding is None
    assert folded.iteration_time_ns == unfolded.iteration_time_ns == pytest.approx(2 * (a + n / bw), abs=1)


def test_nothing_to_fold_is_not_a_warning(caplog):
    ts = traceset([[comp(1, 1000)], [comp(1, 2000)]])
    with caplog.at_level(logging.INFO, logger="tracekit.replayer"):
        result = replay(ts, one_dim(2, 40.0, 300.0))
    assert result.folding.reason == "no two ranks have identical programs"
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert result.iteration_time_ns == 2000


def test_files_and_trace_sets_go_through_one_facade(tmp_path):
    a, bw, n, c = 300.0, 40.0, MiB, 10_000
    ts = traceset([[comp(1, c), coll(2, CollectiveType.ALL_REDUCE, n, deps=[1])] for _ in range(4)])
    write_traceset(ts, tmp_path / "job")
    spec = one_dim(4, bw, a)
    from dataclasses import replace

    from_memory = replay(ts, spec)
    from_files, kept = replay_with_traces(tmp_path / "job", spec)
    assert replace(from_files, provenance=from_memory.provenance) == from_memory  # equal but for the file names
    assert from_files.provenance.trace_paths == tuple(str(tmp_path / f"job.{r}.et") for r in range(4))
    assert from_files.folding.classes == 1 and list(kept.ranks) == [0]  # the representative only
    # ring all-reduce of 4 ranks after the compute (alpha-beta closed form, tests/replayer/test_engine.py)
    assert from_files.iteration_time_ns == pytest.approx(c + 2 * 3 * a + 2 * 3 / 4 * n / bw, abs=1)
    unfolded, every = replay_with_traces(tmp_path / "job", spec, options=ReplayOptions(fold=False))
    assert replace(unfolded, folding=from_files.folding) == from_files and list(every.ranks) == [0, 1, 2, 3]
