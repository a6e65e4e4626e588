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


# (tp, pp, dp, cp, schedule, virtual stages, micro-batches per pipeline, overlapped DP reduction)
_SCHEDULES = {
    "1f1b": (2, 4, 2, 1, "1f1b", 1, 8, True),
    "interleaved": (1, 4, 2, 1, "interleaved", 2, 8, True),
    "flexible, m % pp != 0": (1, 4, 2, 1, "interleaved", 2, 6, True),
    "no DP overlap": (2, 2, 4, 1, "1f1b", 1, 4, False),
    "context parallel": (1, 2, 2, 2, "1f1b", 1, 4, True),
}


@pytest.mark.parametrize("name", list(_SCHEDULES))
def test_bulk_plan_of_a_class_set_equals_pair_by_pair(tmp_path, monkeypatch, name):
    """Members of a class set are their representative's scan renamed (scan_tables.MemberScan): the array path
    (one-key sort, counting uniques, attributes by position) plans what the pair-by-pair loop plans, and the folded
    replay of the class set equals the unfolded replay of its ranks to the ns."""
    from dataclasses import replace

    from tracekit.converters.generators.llm import write_llm
    from tracekit.model.groups import resolve_groups
    from tracekit.replayer import replay
    from tracekit.replayer.simulation.gather import gather_class_set
    from tracekit.sets.classset import find_class_set

    tp, pp, dp, cp, schedule, vp, m, overlap = _SCHEDULES[name]
    model, _ = llm_preset("gpt3-1.3b")
    parallel = ParallelSpec(dp=dp, tp=tp, pp=pp, cp=cp, schedule=schedule, virtual_stages=vp,
                            overlap_grad_reduce=overlap)  # fmt: skip
    cfg = LLMConfig(replace(model, num_layers=8), parallel, global_batch_size=m * dp, micro_batch_size=1)
    write_llm(cfg, tmp_path / "job", Roofline(1e15, 3e12), classes=True)
    classes = find_class_set(tmp_path / "job")
    spec = load_spec("dgx-h100").fitted(classes.world_size)
    plans, taken = [], []
    real = fold_p2p._bulk
    for bulk in (True, False):
        monkeypatch.setattr(fold_p2p, "_bulk", lambda p, b=bulk: taken.append(real(p) if b else False) or taken[-1])
        g = gather_class_set(classes, ReplayOptions(), lambda *a, **k: None)
        plans.append(plan_folding(g.scans, resolve_groups(g.declared, g.world), spec, ReplayOptions()))
    assert taken == [True, False]
    a, b = plans
    assert sum(1 for u in a.unfolded if u[0] == "p2p") == 2 * (pp * vp - 1) * m * tp * dp * cp  # fwd + bwd per hop
    assert a.unfolded == b.unfolded and a.folded == b.folded and a.reps == b.reps
    for (pa, ua), (pb, ub) in zip(a.member_u, b.member_u, strict=True):
        np.testing.assert_array_equal(pa, pb)
        np.testing.assert_array_equal(ua, ub)
    monkeypatch.setattr(fold_p2p, "_bulk", real)
    folded = replay(classes, spec)
    assert folded.folding is not None and folded.folding.reason is None
    whole = replay(classes.to_traceset(), spec, options=ReplayOptions(fold=False))
    assert folded.iteration_time_ns == whole.iteration_time_ns
    assert folded.ranks == whole.ranks
