"""Folding's send/recv planning (simulation/fold_p2p.py): the numpy bulk path equals the pair-by-pair loop."""

from __future__ import annotations

import numpy as np
import pytest

import tracekit.replayer.simulation.fold_p2p as fold_p2p
from tracekit.converters.generators import LLMConfig, ParallelSpec, Roofline, generate_llm, llm_preset
from tracekit.replayer import ReplayOptions
from tracekit.replayer.simulation.folding import NotFoldable, plan_folding, scan_rank
from tracekit.replayer.simulation.specs import load_spec


def _plan(ts, monkeypatch, bulk: bool):
    calls = []
    real = fold_p2p._bulk
    monkeypatch.setattr(fold_p2p, "_bulk", lambda p: calls.append(1) or (real(p) if bulk else False))
    spec = load_spec("dgx-h100").fitted(len(ts))
    scans = {r: scan_rank(ts[r]) for r in ts.ranks}
    plan = plan_folding(scans, ts.process_groups, spec, ReplayOptions())
    assert calls == [1]
    return plan


def _pipeline(pp=4, dp=2, tp=2):
    model, _ = llm_preset("gpt3-1.3b")
    cfg = LLMConfig(model, ParallelSpec(dp=dp, tp=tp, pp=pp), global_batch_size=4 * pp * dp, micro_batch_size=1)
    return generate_llm(cfg, Roofline(1e15, 3e12))


def test_bulk_plan_equals_pair_by_pair(monkeypatch):
    ts = _pipeline()
    a, b = _plan(ts, monkeypatch, bulk=False), _plan(ts, monkeypatch, bulk=True)
    p2p = [u for u in a.unfolded if u[0] == "p2p"]
    assert len(p2p) == 2 * 2 * 3 * 2 * 16  # 2 directions x 3 stage boundaries x (tp 2 x dp 2) x 16 micro-batches
    assert a.unfolded == b.unfolded
    assert a.folded == b.folded
    assert a.reps == b.reps
    np.testing.assert_array_equal(a.rep_of, b.rep_of)


def _merged_tags(scans):
    """Tags t merged into t // 8 (two micro-batches of a 2-stage pipeline): keys with two sends and two receives."""
    for s in scans.values():
        for name in ("sends", "recvs"):
            merged: dict = {}
            for (peer, tag), v in getattr(s, name).items():
                merged.setdefault((peer, tag // 8), []).extend(v)
            setattr(s, name, {k: sorted(v) for k, v in merged.items()})
    return scans


def test_bulk_path_steps_aside_for_repeated_keys(monkeypatch):
    """Keys with two sends each: the bulk path declines (changing nothing) and the pair-by-pair loop plans them."""
    ts = _pipeline(pp=2, dp=2, tp=1)
    spec = load_spec("dgx-h100").fitted(len(ts))
    plans, seen = [], []
    real = fold_p2p._bulk
    for bulk in (True, False):
        monkeypatch.setattr(fold_p2p, "_bulk", lambda p, b=bulk: seen.append(real(p) if b else False) or seen[-1])
        scans = _merged_tags({r: scan_rank(ts[r]) for r in ts.ranks})
        plans.append(plan_folding(scans, ts.process_groups, spec, ReplayOptions()))
    assert seen == [False, False]
    assert plans[0].unfolded == plans[1].unfolded and plans[0].folded == plans[1].folded
    assert (
        sum(1 for u in plans[0].unfolded if u[0] == "p2p") == 2 * 2 * 8
    )  # 2 directions x dp 2 x 8 micro-batches (global batch 16)


@pytest.mark.parametrize("bulk", [False, True])
def test_unmatched_send_refuses_either_way(monkeypatch, bulk):
    ts = _pipeline(pp=2, dp=2, tp=1)
    spec = load_spec("dgx-h100").fitted(len(ts))
    scans = {r: scan_rank(ts[r]) for r in ts.ranks}
    key = next(iter(scans[0].sends))
    scans[0].sends = {**scans[0].sends, (key[0], 999_999): scans[0].sends[key]}  # a send nobody receives
    real = fold_p2p._bulk
    monkeypatch.setattr(fold_p2p, "_bulk", lambda p: real(p) if bulk else False)
    with pytest.raises(NotFoldable, match="unmatched sends/recvs from rank 0"):
        plan_folding(scans, ts.process_groups, spec, ReplayOptions())
