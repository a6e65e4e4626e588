"""The vendored plotly.js basic bundle: the bytes recorded in replayer/reporting/vendor/README.md, the version plotly for
Python builds figures for, and every trace type the reports draw."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from tracekit.replayer.reporting import html_page

VENDOR = Path(html_page.__file__).with_name("vendor")


def test_bundle_is_the_recorded_file():
    data = (VENDOR / "plotly-basic.min.js").read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    assert digest in (VENDOR / "README.md").read_text()
    assert f"plotly.js (basic - minified) v{html_page.PLOTLY_JS_VERSION}" in data[:200].decode()
    assert (VENDOR / "LICENSE.plotly.js").read_text().startswith("MIT License")


def test_same_major_version_as_plotly_for_python():
    """Figure JSON follows the plotly.js schema of the plotly package; within a major version it draws the
    same (vendored with 4.1.1 when plotly for Python shipped 4.1.1: re-vendor when the major version moves)."""
    from plotly.offline import get_plotlyjs_version

    assert get_plotlyjs_version().split(".")[0] == html_page.PLOTLY_JS_VERSION.split(".")[0]


def test_a_figure_the_bundle_cannot_draw_is_refused():
    import plotly.graph_objects as go

    page = html_page.Page("t")
    page.figure(go.Figure(go.Bar(x=[1], y=[1])))
    with pytest.raises(ValueError, match="heatmap"):
        page.figure(go.Figure(go.Heatmap(z=[[1]])))
