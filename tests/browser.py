"""Test helper: what a page looks like after headless Chromium ran its scripts.

``rendered(html_path)`` loads the page with :func:`tracekit.replayer.reporting.browser.render_dom`
and parses the DOM (stdlib ``html.parser``) into a :class:`RenderedPage`.
Tests that use it call :func:`require_chromium` first, which skips with the install
command when ``/usr/bin/chromium`` is absent.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from html.parser import HTMLParser

import pytest

CHROMIUM = "/usr/bin/chromium"
INSTALL = "apt-get update && apt-get install -y chromium"


def require_chromium() -> None:
    if not os.path.isfile(CHROMIUM):
        pytest.skip(f"headless-browser test needs {CHROMIUM} (Debian package chromium: {INSTALL})")


@dataclass
class Plot:
    """One ``<div class="plot">`` after rendering: its SVG elements, drawn SVG paths (non-empty ``d``) and
    data points (plotly's ``class="point"`` elements: one per bar or marker)."""

    div_id: str
    svgs: int = 0
    paths: int = 0
    points: int = 0


@dataclass
class RenderedPage:
    body_attrs: dict[str, str]
    values: dict[str, tuple[str, str]]  # data-key -> (data-value, shown text)
    plots: dict[str, Plot] = field(default_factory=dict)
    text: str = ""


class _Parser(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.page = RenderedPage({}, {})
        self._plot_stack: list[tuple[str, int]] = []  # (div id, depth at which it opened)
        self._depth = 0
        self._cell: tuple[str, str] | None = None
        self._cell_text: list[str] = []
        self._in_script = False
        self._texts: list[str] = []

    _VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "body":
            self.page.body_attrs = {k: v or "" for k, v in attrs}
        if tag == "script":
            self._in_script = True
        if tag not in self._VOID:
            self._depth += 1
        if tag == "div" and "plot" in (a.get("class") or "").split() and a.get("id"):
            self.page.plots[a["id"]] = Plot(a["id"])
            self._plot_stack.append((a["id"], self._depth))
        if self._plot_stack:
            plot = self.page.plots[self._plot_stack[-1][0]]
            if tag == "svg":
                plot.svgs += 1
            elif tag == "path" and (a.get("d") or "").strip() not in ("", "M0,0Z"):
                plot.paths += 1
            if "point" in (a.get("class") or "").split():  # bars: <g class="point">, markers: <path class="point">
                plot.points += 1
        if "data-key" in a:
            self._cell = (a["data-key"], a.get("data-value") or "")
            self._cell_text = []

    def handle_startendtag(self, tag, attrs):
        depth = self._depth
        self.handle_starttag(tag, attrs)
        if tag not in self._VOID:
            self._depth = depth  # self-closing: nothing opened

    def handle_endtag(self, tag):
        if tag == "script":
            self._in_script = False
        if self._cell is not None and tag in ("td", "th", "span"):
            key, value = self._cell
            self.page.values[key] = (value, "".join(self._cell_text).strip())
            self._cell = None
        if self._plot_stack and self._plot_stack[-1][1] == self._depth and tag == "div":
            self._plot_stack.pop()
        if tag not in self._VOID:
            self._depth -= 1

    def handle_data(self, data):
        if self._cell is not None:
            self._cell_text.append(data)
        if not self._in_script:
            self._texts.append(data)


def rendered(html_path) -> RenderedPage:
    """Render ``html_path`` in headless Chromium and parse the result."""
    from tracekit.replayer.reporting.browser import render_dom

    dom = render_dom(html_path).dom
    parser = _Parser()
    parser.feed(dom)
    parser.page.text = " ".join(" ".join(parser._texts).split())
    return parser.page
