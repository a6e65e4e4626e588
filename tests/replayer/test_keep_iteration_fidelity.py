"""--keep-iteration on the converted torch-cpu-gloo/dist_ws4 ET + Kineto set keeps one step and replays it within 5 %."""

from __future__ import annotations

import glob
import re

import pytest

from tracekit.converters.pytorch import convert_pytorch
from tracekit.replayer.results.measured import check_replay
from tracekit.transforms.select import KeepIteration

pytestmark = pytest.mark.realdata


def test_keep_iteration_ws4_et_kineto_one_step_within_5_percent(real_dir):
    d = real_dir / "pytorch/torch-cpu-gloo/dist_ws4"
    ts = convert_pytorch(
        sorted(glob.glob(f"{d}/et_rank*.json")), sorted(glob.glob(f"{d}/kineto_rank*.json")), executor="serial"
    )
    kept = KeepIteration(2).apply(ts)
    for rank in kept.ranks:
        steps = {n.name for n in kept[rank].nodes if re.fullmatch(r"ProfilerStep#\d+", n.name)}
        assert steps == {"ProfilerStep#2"}
    comparison = check_replay(kept)
    rows = {(r.rank, r.step): r for r in comparison.rows}
    # every rank's gloo collectives include waiting for the others: said per rank, counted once
    waits = [n for n in comparison.notes if "waiting for slower ranks (beyond the replayed transfer)" in n]
    assert [w.split(":")[0] for w in waits] == ["rank 0", "rank 1", "rank 2", "rank 3"]
    job = rows[(-1, 2)]
    # measured: rank 3's ProfilerStep#2 start (the last to enter) to the last end, Kineto dur in us -> ns
    assert job.measured_ns == 1_125_680_891
    assert abs(job.error) <= 0.05
    for rank in range(4):  # every rank's own ProfilerStep#2 (ranks start at their measured offsets)
        assert abs(rows[(rank, 2)].error) <= 0.05
