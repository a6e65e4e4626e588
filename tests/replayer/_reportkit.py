"""Shared by the report/diff tests: the bundled 2-rank PyTorch job converted and replayed on two presets,
and small hand-built ReplayResults whose numbers are known in closed form."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tracekit.replayer.results.result import (
    CollectiveRow,
    CriticalPath,
    PathStep,
    Provenance,
    RankSchedule,
    RankStats,
    ReplayResult,
)

ROOT = Path(__file__).resolve().parents[2]
DIST_WS2 = ROOT / "sample_traces" / "pytorch" / "dist_ws2"


def replay_prefix(prefix: str, hw: str) -> ReplayResult:
    """Replay the trace set at ``prefix`` on preset ``hw`` with default options."""
    from tracekit.io import read_traceset
    from tracekit.replayer import replay

    return replay(read_traceset(prefix), hw)


@pytest.fixture(scope="session")
def ws2_prefix(tmp_path_factory) -> str:
    """The bundled dist_ws2 job converted to ``<tmp>/job.<rank>.et``."""
    from tracekit.converters.pytorch import convert_pytorch
    from tracekit.io import write_traceset

    ts = convert_pytorch(
        sorted(DIST_WS2.glob("et_rank*.json")), sorted(DIST_WS2.glob("kineto_rank*.json")), executor="serial"
    )
    prefix = str(tmp_path_factory.mktemp("ws2") / "job")
    write_traceset(ts, prefix)
    return prefix


@pytest.fixture(scope="session")
def ws2_results(ws2_prefix, tmp_path_factory) -> dict[str, Path]:
    """``{"dgx-a100": json path, "dgx-h100": json path}``: the job replayed and written with its schedule."""
    out = tmp_path_factory.mktemp("ws2_results")
    paths = {}
    for hw in ("dgx-a100", "dgx-h100"):
        paths[hw] = out / f"{hw}.json"
        replay_prefix(ws2_prefix, hw).write_json(str(paths[hw]), include_schedule=True)
    return paths


def toy_result(*, scale: float = 1.0, spec_name: str = "toy", with_schedule: bool = True) -> ReplayResult:
    """Two ranks, hand-made: rank 0 computes [0, 100) on stream 7, all-reduces 1,000 bytes over
    [100, 100 + 50*scale); rank 1 computes [0, 60), waits [60, 100), then the same all-reduce.
    Compute node ids 1 (rank 0) / 11 (rank 1), collective node ids 2 / 12."""
    t = 50.0 * scale
    end = 100.0 + t
    ranks = (RankStats(0, end, 100.0, t, t, 0.0, 0.0, 2), RankStats(1, end, 60.0, t, t, 40.0, 0.0, 2))
    algbw = 1000 / t
    coll = (CollectiveRow(0, "ALL_REDUCE", 1000, "0", (0, 1), (2, 12), "ring", 100.0, end, t, algbw, algbw),)
    path = CriticalPath(
        (PathStep(0, 1, "gemm", "compute", 0.0, 100.0), PathStep(0, 2, "allreduce", "comm", 100.0, end)), end, 100.0, t
    )
    prov = Provenance(("toy.0.et", "toy.1.et"), spec_name, None, "alpha_beta", "measured", 1.0, "trace", 2, "test")
    schedule = None
    if with_schedule:
        schedule = tuple(
            RankSchedule(
                r,
                np.array([cid, kid], dtype=np.uint64),
                np.array([0, 2], dtype=np.int8),
                np.array([0, 1], dtype=np.int32),
                ("compute stream 7", "comm stream 0"),
                np.array([0.0, cend]),
                np.array([cend, end]),
                np.array([np.nan, 100.0]),
                np.array([-1, 0], dtype=np.int64),
            )
            for r, cid, kid, cend in ((0, 1, 2, 100.0), (1, 11, 12, 60.0))
        )
    return ReplayResult(end, ranks, coll, path, prov, (("measured", 2),), 4, schedule)
