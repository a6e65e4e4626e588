"""Self-contained HTML pages: one file with the plotting library inlined, tables, plot slots.

The page needs no network: plotly.js is inlined once and every figure is
drawn from its JSON by ``Plotly.newPlot``.  The inlined library is the
plotly.js *basic* bundle (scatter, bar, pie; 1.2 MB) vendored in
``replayer/reporting/vendor/`` (provenance and license there), not the 4.8 MB full
bundle plotly for Python ships, so a small job's report stays near 1.3 MB;
:data:`TRACE_TYPES` lists what it can draw.  When all figures have been drawn
the page sets ``data-plots-rendered`` (how many) and ``data-render-ms``
(``performance.now()`` at that moment) on ``<body>``; the browser tests and
the benchmark read them.

Tables carry machine-readable values: a cell made by :func:`cell` with a
``key`` has ``data-key`` and ``data-value`` attributes next to its
human-readable text, so a test can compare the rendered page with the JSON.
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Sequence

PLOTLY_JS_VERSION = "4.1.1"
#: Trace types of the vendored plotly.js basic bundle (a figure with another type would not draw).
TRACE_TYPES = frozenset({"scatter", "bar", "pie"})
_PLOTLY_JS = Path(__file__).with_name("vendor") / "plotly-basic.min.js"


@lru_cache(maxsize=1)
def plotly_js() -> str:
    """The vendored plotly.js basic bundle (minified JavaScript text)."""
    return _PLOTLY_JS.read_text(encoding="utf-8")


_STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px auto;max-width:1400px;
color:#222;padding:0 16px}
h1{font-size:1.6em;margin-bottom:4px} h2{margin-top:32px;border-bottom:1px solid #ddd;padding-bottom:4px}
table{border-collapse:collapse;margin:8px 0;font-size:0.92em}
th,td{border:1px solid #ddd;padding:3px 8px;text-align:right;vertical-align:top}
th{background:#f4f4f4} td.l,th.l{text-align:left}
.note{color:#555;font-style:italic;margin:4px 0} .sub{color:#666;margin-top:0}
.plot{width:100%} .changed{color:#b00;font-weight:600} pre{background:#f7f7f7;padding:8px;overflow:auto}
"""


@dataclass(frozen=True)
class Cell:
    """A table cell: ``text`` shown; ``key``/``value`` become ``data-key``/``data-value`` when given."""

    text: str
    key: str | None = None
    value: Any = None
    left: bool = False
    css: str = ""


def cell(text: Any, key: str | None = None, value: Any = None, *, left: bool = False, css: str = "") -> Cell:
    """A :class:`Cell` showing ``str(text)``; ``key``/``value`` become sortable ``data-key``/``data-value`` attributes."""
    return Cell(str(text), key, value, left, css)


def table(
    headers: Sequence[str], rows: Iterable[Sequence[Any]], *, table_id: str | None = None, left_columns: int = 1
) -> str:
    """An HTML table; plain values become cells, the first ``left_columns`` columns left-aligned."""
    out = [f"<table{_attr('id', table_id)}><thead><tr>"]
    out += [f"<th{' class=l' if i < left_columns else ''}>{html.escape(h)}</th>" for i, h in enumerate(headers)]
    out.append("</tr></thead><tbody>")
    for row in rows:
        out.append("<tr>")
        for i, c in enumerate(row):
            if not isinstance(c, Cell):
                c = Cell(str(c), left=i < left_columns)
            classes = " ".join(x for x in ("l" if (c.left or i < left_columns) else "", c.css) if x)
            attrs = _attr("class", classes or None)
            if c.key is not None:
                attrs += _attr("data-key", c.key) + _attr("data-value", _value_text(c.value))
            out.append(f"<td{attrs}>{html.escape(c.text)}</td>")
        out.append("</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def _value_text(value: Any) -> str:
    if isinstance(value, float):
        return repr(value)  # shortest round-trip form: float(text) == value
    return "" if value is None else str(value)


def _attr(name: str, value: str | None) -> str:
    return "" if value is None else f' {name}="{html.escape(value, quote=True)}"'


def note(text: str) -> str:
    """A paragraph in the page's note style ("" for empty text)."""
    return f'<p class="note">{html.escape(text)}</p>' if text else ""


def para(text: str, css: str = "") -> str:
    """A ``<p>`` of escaped ``text``, with CSS class ``css`` when given."""
    return f"<p{_attr('class', css or None)}>{html.escape(text)}</p>"


@dataclass
class Page:
    """An HTML page being assembled: sections of HTML and figures to draw."""

    title: str
    subtitle: str = ""
    parts: list[str] = field(default_factory=list)
    figures: list[tuple[str, str]] = field(default_factory=list)

    def section(self, heading: str, *html_parts: str, section_id: str | None = None) -> None:
        """Append a ``<section>`` titled ``heading`` holding ``html_parts`` (already-escaped HTML), id ``section_id``."""
        sid = _attr("id", section_id)
        self.parts.append(f"<section{sid}><h2>{html.escape(heading)}</h2>{''.join(html_parts)}</section>")

    def figure(self, fig: Any) -> str:
        """Register a plotly figure; returns the ``<div>`` to place in a section.

        Raises:
            ValueError: the figure has a trace type the inlined bundle cannot draw (:data:`TRACE_TYPES`).
        """
        bad = {t.type for t in fig.data} - TRACE_TYPES
        if bad:
            raise ValueError(f"trace type(s) {sorted(bad)} are not in the inlined plotly.js basic bundle")
        div_id = f"plot{len(self.figures)}"
        self.figures.append((div_id, fig.to_json()))
        return f'<div id="{div_id}" class="plot"></div>'

    def render(self) -> str:
        """The whole document (plotly.js inlined only when there are figures)."""
        head = [
            f"<!DOCTYPE html><html lang=en><head><meta charset=utf-8><title>{html.escape(self.title)}</title>",
            f"<style>{_STYLE}</style>",
        ]
        if self.figures:
            head.append(f"<script>{plotly_js()}</script>")
        head.append("</head><body>")
        body = [f"<h1>{html.escape(self.title)}</h1>"]
        if self.subtitle:
            body.append(f'<p class="sub">{html.escape(self.subtitle)}</p>')
        body += self.parts
        specs = ",".join(f'["{div}",{spec}]' for div, spec in self.figures)
        # "</" inside JSON strings (names) must not close the script element
        specs = specs.replace("</", "<\\/")
        body.append(
            "<script>(function(){var figs=[" + specs + "];var cfg={responsive:true,displaylogo:false};"
            "Promise.all(figs.map(function(f){return Plotly.newPlot(f[0],f[1].data,f[1].layout,cfg);}))"
            ".then(function(){document.body.setAttribute('data-plots-rendered',String(figs.length));"
            "document.body.setAttribute('data-render-ms',String(performance.now()));});})();</script>"
        )
        body.append("</body></html>")
        return "".join(head + body)


def json_pre(data: Any) -> str:
    """``data`` as indented JSON in a ``<pre>``."""
    return f"<pre>{html.escape(json.dumps(data, indent=2, sort_keys=False, default=str))}</pre>"


__all__ = ["Cell", "Page", "cell", "json_pre", "note", "para", "table"]
