"""The HTML report as headless Chromium renders it: numbers equal the JSON, every plot drawn, screenshot saved.

Needs /usr/bin/chromium (Debian package ``chromium``); skipped with the install command when absent.
"""

from __future__ import annotations

import json
import os
import struct

import pytest

from _reportkit import ws2_prefix, ws2_results  # noqa: F401  (fixtures)
from browser import rendered, require_chromium
from tracekit.fmt import fmt_ns
from tracekit.replayer.reporting.timeline_plot import timeline_figure
from tracekit.replayer.reporting.report import load_result, write_report


@pytest.fixture(scope="module")
def report_path(ws2_results, tmp_path_factory):
    out = tmp_path_factory.mktemp("browser") / "report.html"
    write_report(load_result(ws2_results["dgx-a100"]), out)
    return out


def test_rendered_report_numbers_and_plots(report_path, ws2_results):
    require_chromium()
    # the 2-rank demo job's report is small (the plotly.js basic bundle inlined) and loads nothing else
    html = report_path.read_text()
    assert report_path.stat().st_size <= 1_500_000 and "<script src" not in html and "<link" not in html
    page = rendered(report_path)
    d = json.loads(ws2_results["dgx-a100"].read_text())
    # every figure drawn (the page's own completion mark) and each plot has SVG with drawn paths
    assert page.body_attrs.get("data-plots-rendered") == "2"
    assert float(page.body_attrs["data-render-ms"]) > 0
    assert set(page.plots) == {"plot0", "plot1"}
    for plot in page.plots.values():
        assert plot.svgs >= 1 and plot.paths >= 1, plot
    # the rank bars: 2 ranks x 4 categories = 8 bars (plotly keeps a point element for zero-height ones too)
    assert page.plots["plot0"].points == 8
    # timeline: one (invisible) hover marker per span drawn, as many as the figure has
    fig = timeline_figure(load_result(ws2_results["dgx-a100"])).figure
    markers = sum(len(t.x) for t in fig.data if t.mode == "markers")
    assert page.plots["plot1"].points == markers > 300
    # summary numbers: the machine value equals the JSON, and the shown text is that value formatted
    v, text = page.values["iteration_time_ns"]
    assert float(v) == d["iteration_time_ns"] and text == fmt_ns(d["iteration_time_ns"]) == "327.141 ms"
    assert page.values["node_count"] == (str(d["node_count"]), "644")
    assert int(page.values["world_size"][0]) == len(d["ranks"])
    v, text = page.values["mean_exposed_comm_ns"]
    expected = sum(r["exposed_comm_ns"] for r in d["ranks"]) / len(d["ranks"])
    assert float(v) == pytest.approx(expected, rel=1e-15) and text.startswith(fmt_ns(expected))
    for r in d["ranks"]:
        for key in ("compute_ns", "exposed_comm_ns", "comm_wait_ns", "other_idle_ns"):
            v, text = page.values[f"rank.{r['rank']}.{key}"]
            assert float(v) == r[key] and text == fmt_ns(r[key])
    assert "critical path" in page.text and "dgx-a100" in page.text


def test_screenshot_png(report_path, tmp_path):
    require_chromium()
    from tracekit.replayer.reporting.browser import screenshot_html

    png = screenshot_html(report_path, tmp_path / "shot.png", width=1200, height=1600)
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert (width, height) == (1200, 1600)
    assert len(data) > 50_000  # a blank page compresses to a few KB
    umask = os.umask(0)
    os.umask(umask)
    assert png.stat().st_mode & 0o777 == 0o666 & ~umask  # created like any other file, not mkstemp's 0600
