"""Rewrites keep what later timing needs (issue 27): ``replay --compute auto`` after a rewrite.

For each transform and each real capture (a CPU gloo capture, the GPU captures param-linear and param-resnet):

* where the rewrite leaves the work as it is (``--compact``; ``--keep-ranks`` of every rank; ``--dp`` of the
  capture's own degree; ``--keep-iteration`` of the only iteration a capture holds), the ``--compute auto``
  replay (projected from the capture device to dgx-h100's H100) equals the untransformed one exactly;
* where it changes the work (``--keep-iteration`` of one of param-resnet's three steps), projecting after the
  rewrite equals projecting before it (the rewrite carried every node's FLOPs, bytes and op class).

Before issue 27, ``--compact`` merged priced nodes with unpriced ones: the gloo ``single`` capture replayed in
2.988 ms before and 0.542 ms after compaction (a CPU -> GPU projection replaces a priced node's measured time by
its model time, so the unpriced members' measured time was lost).
"""

from __future__ import annotations

import logging
from functools import lru_cache

import pytest

from tracekit.converters.pytorch import convert_pytorch
from tracekit.replayer.orchestration.projected import replay_with_compute
from tracekit.transforms import Compact, KeepIteration, KeepRanks, Rescale, Retarget

pytestmark = pytest.mark.realdata

SETS = {
    "torch-cpu-gloo/single": ("torch-cpu-gloo/single/et_rank0.json", "torch-cpu-gloo/single/kineto_rank0.json"),
    "param-linear": ("param-linear/linear_et.json.gz", "param-linear/linear_kineto.json.gz"),
    "param-resnet": ("param-resnet/resnet_et.json.gz", "param-resnet/resnet_kineto.json.gz"),
}
#: --compute auto replay of the untransformed set on dgx-h100 (ns), as this suite computes it.
AUTO_NS = {
    "torch-cpu-gloo/single": 2_987_827,
    "param-linear": 16_400_314,
    "param-resnet": 136_123_905,
}  # resnet: TF32 convs
SPEC = "dgx-h100"
#: gloo ``single`` after --compact: 165 nodes -> this many (unpriced host ops merged, priced ones kept).
NODES_AFTER_SINGLE = 57  # 6 before issue 27, when priced and unpriced ops merged
#: param-resnet, ProfilerStep#7 kept, --compute auto on dgx-h100 (ns).
KEPT_AUTO_NS = 30_808_000


@lru_cache(maxsize=None)
def _set(real: str, name: str):
    et, kineto = SETS[name]
    logging.disable(logging.WARNING)
    try:  # param-resnet's two files are from two runs (README): converted anyway, as the compaction tests do
        return convert_pytorch([f"{real}/pytorch/{et}"], [f"{real}/pytorch/{kineto}"], allow_unlinked=True)
    finally:
        logging.disable(logging.NOTSET)


def _auto_ns(ts) -> int:
    result, _, plan, _ = replay_with_compute(ts, SPEC, compute="auto")
    assert plan.method == "projected"
    return result.iteration_time_ns


def _transforms(name: str, ts):
    out = {"compact": Compact(), "keep-ranks": KeepRanks(tuple(ts.ranks)), "dp": Rescale(dp=len(ts.ranks))}
    if name == "torch-cpu-gloo/single":
        out["keep-iteration"] = KeepIteration(2)  # the capture's only ProfilerStep
    return out


@pytest.mark.parametrize("name", sorted(SETS))
def test_rewrites_that_keep_the_work_keep_the_projected_replay_exactly(real_dir, name):
    ts = _set(str(real_dir), name)
    assert _auto_ns(ts) == AUTO_NS[name]
    for label, transform in _transforms(name, ts).items():
        assert _auto_ns(transform.apply(ts)) == AUTO_NS[name], label


def test_compaction_of_the_gloo_capture_still_merges_unpriced_host_ops(real_dir):
    ts = _set(str(real_dir), "torch-cpu-gloo/single")
    out, stats = Compact().apply_with_stats(ts)
    assert (stats[0].nodes_before, stats[0].nodes_after) == (165, NODES_AFTER_SINGLE)
    assert _auto_ns(out) == AUTO_NS["torch-cpu-gloo/single"]


def test_keeping_one_of_three_iterations_projects_as_the_projected_iteration(real_dir):
    ts = _set(str(real_dir), "param-resnet")
    kept = KeepIteration(7).apply(ts)
    result, _, plan, _ = replay_with_compute(kept, SPEC, compute="auto")
    assert (plan.method, plan.source, plan.target) == ("projected", "rtx-2080-ti", "h100-sxm")
    projected_first = KeepIteration(7).apply(Retarget(plan.source, plan.target).apply(ts))
    again, _, _, _ = replay_with_compute(projected_first, SPEC, compute="measured")
    assert result.iteration_time_ns == again.iteration_time_ns == KEPT_AUTO_NS
