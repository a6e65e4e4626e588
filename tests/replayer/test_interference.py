"""Compute/communication interference (issue 30.2): hand-computed overlaps, the switch, the device factors."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from tracekit.costs.devices import find_device
from tracekit.model import CollectiveType
from tracekit.replayer.simulation.interference import _union, overlap_ns
from tracekit.replayer.simulation.run import replay_with_traces

from ._engine_kit import coll, comp, make_spec, traceset

MiB = 1 << 20


def _spec(interference: bool):
    spec = make_spec([{"topology": "switch", "size": 2, "bandwidth_gbps": 100.0, "latency_ns": 1000.0}], fit=False)
    device = replace(spec.device, name="NVIDIA A100-SXM4-80GB")
    return replace(spec, device=device, compute=replace(spec.compute, interference=interference))


def _gemm_next_to_all_reduce(gemm_ns: int, nbytes: int):
    """Rank 0 and 1: a GEMM on stream 7 and an all-reduce on stream 9, both ready at 0 (no dependency)."""
    return traceset([[comp(1, gemm_ns, stream=7), coll(2, CollectiveType.ALL_REDUCE, nbytes, stream=9)]] * 2)


def test_a_gemm_overlapping_an_all_reduce_is_hand_computed():
    """Alone: GEMM G = 2 ms, all-reduce A = 2 x 1000 + 64 MiB / 100 GB/s = 673,108.864 ns (ring, p = 2: one
    latency each way, 2(p-1)/p n / B).  Overlapped for A: the GEMM takes G + A s_c, the all-reduce A (1 + s_m),
    with A100's s_c = 0.189, s_m = 0.05 (tracekit/costs/devices.toml)."""
    dev = find_device("NVIDIA A100-SXM4-80GB")
    s_c, s_m = dev.overlap_compute_slowdown, dev.overlap_comm_slowdown
    assert (s_c, s_m) == (0.189, 0.05)
    gemm, n = 2_000_000, 64 * MiB
    alone_ar = 2 * 1000.0 + n / 100.0
    ts = _gemm_next_to_all_reduce(gemm, n)
    off = replay_with_traces(ts, _spec(False))[0]
    on = replay_with_traces(ts, _spec(True))[0]
    assert off.collectives[0].time_ns == round(alone_ar) and off.iteration_time_ns == gemm
    assert on.collectives[0].time_ns == round(alone_ar * (1 + s_m))
    assert on.iteration_time_ns == round(gemm + alone_ar * s_c)
    assert on.ranks[0].compute_ns == round(gemm + alone_ar * s_c)


def test_interference_is_off_for_the_astra_model_and_by_default():
    from tracekit.replayer.simulation.specs import load_spec
    from tracekit.replayer.simulation.interference import device_slowdowns

    assert device_slowdowns(load_spec("dgx-a100")) == (0.0, 0.0)
    on = _spec(True)
    assert device_slowdowns(on) == (0.189, 0.05)
    assert device_slowdowns(replace(on, collective_model="astra")) == (0.0, 0.0)
    assert device_slowdowns(replace(on, device=replace(on.device, name="some CPU"))) == (0.0, 0.0)


def test_overlap_with_a_union_of_intervals():
    us, ue = _union(np.array([5.0, 0.0, 2.0, 20.0]), np.array([8.0, 3.0, 4.0, 30.0]))
    assert us.tolist() == [0.0, 5.0, 20.0] and ue.tolist() == [4.0, 8.0, 30.0]
    got = overlap_ns(np.array([0.0, 3.0, 9.0, 25.0, 40.0]), np.array([10.0, 6.0, 19.0, 50.0, 41.0]), us, ue)
    assert got.tolist() == [7.0, 2.0, 0.0, 5.0, 0.0]


@pytest.mark.parametrize("interference", [False, True])
def test_the_switch_round_trips_through_toml(interference):
    from tracekit.replayer.simulation.spec_toml import spec_from_dict

    spec = _spec(interference)
    assert spec_from_dict(spec.to_dict()).compute.interference is interference


@pytest.mark.realdata
@pytest.mark.parametrize(
    "kineto",
    ["pytorch/torch-cpu-gloo/dist_ws4/kineto_rank*.json", "kineto/hta-nccl_parser_config/*"],
    ids=["gloo-dist_ws4", "a100-nccl"],
)
def test_check_replay_errors_are_not_worse_with_interference_on(real_dir, kineto):
    """check-replay replays measured times (the measured collective model): they hold the slowdown the capture
    saw, so the switch changes no per-rank error (the A100 capture overlaps NCCL kernels with compute)."""
    import glob
    import logging

    import real_kineto

    from tracekit.replayer.results.measured import check_replay
    from tracekit.replayer.simulation.specs import load_spec

    logging.disable(logging.WARNING)
    try:
        ts = real_kineto.traceset(sorted(glob.glob(f"{real_dir}/{kineto}")))
    finally:
        logging.disable(logging.NOTSET)
    spec = load_spec("dgx-a100")
    on = replace(spec, compute=replace(spec.compute, interference=True))
    off_rows = {(r.rank, r.step): r.error for r in check_replay(ts, spec).rows}
    on_rows = {(r.rank, r.step): r.error for r in check_replay(ts, on).rows}
    assert off_rows and on_rows == off_rows


def test_a_folded_replay_with_interference_equals_the_unfolded_one():
    """8 data-parallel ranks, each a GEMM overlapping a gradient all-reduce and a second GEMM after it."""
    from tracekit.replayer.simulation.program import ReplayOptions

    per_rank = [
        [comp(1, 900_000, stream=7), coll(2, CollectiveType.ALL_REDUCE, 16 * MiB, stream=9), comp(3, 300_000, [1, 2])]
        for _ in range(8)
    ]
    ts = traceset(per_rank)
    spec = make_spec([{"topology": "switch", "size": 8, "bandwidth_gbps": 100.0, "latency_ns": 1000.0}], fit=False)
    spec = replace(spec, device=replace(spec.device, name="NVIDIA H100 80GB HBM3"))
    spec = replace(spec, compute=replace(spec.compute, interference=True))
    folded = replay_with_traces(ts, spec)[0]
    unfolded = replay_with_traces(ts, spec, options=ReplayOptions(fold=False))[0]
    off = replay_with_traces(ts, replace(spec, compute=replace(spec.compute, interference=False)))[0]
    assert folded.folding is not None and folded.folding.classes == 1
    assert folded == unfolded
    assert folded.iteration_time_ns > off.iteration_time_ns
