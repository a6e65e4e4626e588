"""Reports and diffs of replays of the real traces in ../shared/real (skipped with a notice when absent)."""

from __future__ import annotations

import re
import tarfile

import pytest

from tracekit.replayer.reporting.diff import diff_results
from tracekit.replayer.reporting.report import build_report_html

pytestmark = pytest.mark.realdata


def _values(page: str) -> dict[str, str]:
    return dict(re.findall(r'data-key="([^"]+)" data-value="([^"]*)"', page))


def test_dist_ws4_report_and_diff(real_dir, tmp_path):
    from tracekit.converters.pytorch import convert_pytorch
    from tracekit.io import read_traceset, write_traceset
    from tracekit.replayer import replay

    folder = real_dir / "pytorch" / "torch-cpu-gloo" / "dist_ws4"
    ts = convert_pytorch(
        sorted(folder.glob("et_rank*.json")), sorted(folder.glob("kineto_rank*.json")), executor="serial"
    )
    write_traceset(ts, str(tmp_path / "job"))
    ts = read_traceset(str(tmp_path / "job"))
    a, b = replay(ts, "dgx-a100"), replay(ts, "dgx-h100")
    page = build_report_html(a, traceset=ts)
    values = _values(page)
    assert float(values["iteration_time_ns"]) == a.iteration_time_ns
    assert int(values["world_size"]) == 4 and int(values["node_count"]) == a.node_count
    for s in a.ranks:
        assert float(values[f"rank.{s.rank}.compute_ns"]) == s.compute_ns
    assert page.count('class="plot"') == 2
    d = diff_results(a, b)
    # 4 ranks: ring collectives over NVLink; H100's links are faster, compute is measured (unchanged)
    changed = {c.name for c in d.changed_categories()}
    assert "comm (rank mean)" in changed and "compute (rank mean)" not in changed
    assert d.collectives_matched == len(a.collectives) and all(c.delta_ns < 0 for c in d.collectives)


def test_astra_sim_64_rank_report_is_reduced_and_says_so(real_dir, tmp_path):
    from tracekit.io import read_traceset
    from tracekit.replayer import replay

    with tarfile.open(real_dir / "chakra" / "astra-sim-onecomm-64" / "onecomm_allreduce.tar") as tar:
        tar.extractall(tmp_path, filter="data")
    ts = read_traceset(str(tmp_path / "one_comm_coll_node_allreduce"))
    assert ts.world_size == 64
    r = replay(ts, "dgx-h100")
    page = build_report_html(r)
    assert "16 of 64 ranks shown" in page
    assert _values(page)["collectives"] == "1" and len(r.collectives) == 1  # one all-reduce over 64 ranks
    # 64 ranks <= 64: one table row per rank
    assert 'data-key="rank.63.other_idle_ns"' in page
