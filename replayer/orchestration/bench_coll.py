"""Bus-bandwidth curves of the collective models, nccl-tests style, and nccl-tests output files.

:func:`model_curves` costs one collective over a range of sizes with each
collective model (``nccl``, ``alpha_beta``, ``astra``) on a spec fitted to
each rank count, as ``all_reduce_perf`` would measure it alone on the machine;
:func:`parse_nccl_tests` reads the standard stdout of an nccl-tests binary
(``all_reduce_perf -b 8 -e 8G -f 2``) so it can be laid over the curves;
:func:`build_html` draws both (self-contained page, plotly inlined).

Sizes and bandwidths are those of nccl-tests (``doc/PERFORMANCE.md``): the
*size* column is the operation's buffer (all-gather: the gathered output,
``comm_size x p`` in Chakra terms; reduce-scatter: the input), ``algbw = size /
time`` and ``busbw = algbw x`` 2(p-1)/p (all-reduce), (p-1)/p (all-gather,
reduce-scatter, all-to-all) or 1 (broadcast, reduce); GB/s = 1e9 B/s.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Sequence

from tracekit.errors import ReplayError, SpecError, TracekitError
from tracekit.replayer.results.result import bus_factor, nccl_tests_size

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.replayer.simulation.hardware import HardwareSpec

#: Collectives bench-coll can cost (Chakra names in lower case, as nccl-tests' binaries are named).
BENCH_COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "all_to_all")
BENCH_MODELS = ("nccl", "alpha_beta", "astra")
_UNITS = {
    "": 1,
    "B": 1,
    "K": 1 << 10,
    "KB": 1 << 10,
    "KIB": 1 << 10,
    "M": 1 << 20,
    "MB": 1 << 20,
    "MIB": 1 << 20,
    "G": 1 << 30,
    "GB": 1 << 30,
    "GIB": 1 << 30,
    "T": 1 << 40,
    "TB": 1 << 40,
    "TIB": 1 << 40,
}
#: Largest size: a Chakra ``comm_size`` is an int64 (``generate micro --size`` has the same bound).
MAX_SIZE_BYTES = 2**63 - 1


@dataclass(frozen=True)
class BenchRow:
    """One point of a curve (a model's prediction or an nccl-tests measurement).

    Attributes:
        source: model name (``nccl`` ...) or ``nccl-tests:<file name>``.
        collective: ``all_reduce`` ...
        ranks: ranks in the collective.
        size_bytes: nccl-tests size column, bytes.
        time_us: time of one operation, microseconds.
        algbw_gbps, busbw_gbps: nccl-tests bandwidths, GB/s.
        algorithm: the model's choice (``nccl:ring/LL``), "" for measurements.
    """

    source: str
    collective: str
    ranks: int
    size_bytes: int
    time_us: float
    algbw_gbps: float
    busbw_gbps: float
    algorithm: str = ""


def parse_size(text: str) -> int:
    """Bytes in ``8``, ``8B``, ``64K``, ``1MiB``, ``8GiB`` or ``8G`` (binary multiples, as nccl-tests reads them).

    Raises:
        TracekitError: not a size, or more than :data:`MAX_SIZE_BYTES`.
    """
    m = re.fullmatch(r"\s*(\d+)\s*([A-Za-z]*)\s*", text)
    unit = m.group(2).upper() if m else None
    if m is None or unit not in _UNITS:
        raise TracekitError(f"bad size {text!r}: expected a number with B, K/KiB, M/MiB, G/GiB or T/TiB")
    size = int(m.group(1)) * _UNITS[unit]
    if size > MAX_SIZE_BYTES:
        raise TracekitError(f"size {text!r} is {size:,} bytes; a Chakra comm_size holds at most 2^63-1 bytes")
    return size


def size_range(text: str) -> list[int]:
    """Sizes in bytes from ``MIN:MAX`` (powers of two from MIN, as ``-f 2``), ``MIN:MAX:FACTOR`` or ``A,B,C``.

    Raises:
        TracekitError: a bad size, MIN > MAX or a factor < 2.
    """
    if ":" not in text:
        return [parse_size(part) for part in text.split(",") if part.strip()]
    parts = text.split(":")
    if len(parts) not in (2, 3):
        raise TracekitError(f"bad size range {text!r}: expected MIN:MAX or MIN:MAX:FACTOR")
    low, high = parse_size(parts[0]), parse_size(parts[1])
    factor = int(parts[2]) if len(parts) == 3 and parts[2].strip().isdigit() else (2 if len(parts) == 2 else 0)
    if low < 1 or low > high or factor < 2:
        raise TracekitError(f"bad size range {text!r}: need 1 <= MIN <= MAX and an integer FACTOR >= 2")
    sizes = [low]
    while sizes[-1] * factor <= high:
        sizes.append(sizes[-1] * factor)
    return sizes


def _kind(collective: str) -> str:
    return collective.upper()


def model_point(spec: "HardwareSpec", collective: str, ranks: int, size_bytes: int) -> BenchRow:
    """One collective of nccl-tests size ``size_bytes`` on ranks ``0..ranks-1`` of ``spec`` (already fitted).

    One rank with the nccl model: NCCL's out-of-place copy of the buffer (:meth:`NcclModel.one_rank_ns`).

    Raises:
        SpecError: the spec lacks what its model needs.
        ReplayError: the model cannot cost this collective (e.g. astra and broadcast).
    """
    from tracekit.model import CollectiveType
    from tracekit.replayer.simulation.collective_models import make_collective_model
    from tracekit.replayer.simulation.nccl_model import NcclModel

    kind = _kind(collective)
    comm_bytes = size_bytes // ranks if nccl_tests_size(kind, 1, ranks) != 1 else size_bytes
    model = make_collective_model(spec)
    if ranks == 1 and isinstance(model, NcclModel):  # NCCL copies the buffer (out of place)
        time_ns, algorithm = model.one_rank_ns(size_bytes), "nccl:copy"
    else:
        cost = model.collective_cost(CollectiveType[kind], comm_bytes, tuple(range(ranks)))
        time_ns, algorithm = cost.time_alone_ns(spec), cost.algorithm
    algbw = size_bytes / time_ns if time_ns > 0 else float("inf")
    return BenchRow(
        spec.collective_model,
        collective,
        ranks,
        size_bytes,
        time_ns / 1000.0,
        algbw,
        algbw * bus_factor(kind, ranks),
        algorithm,
    )


def model_curves(
    spec: "HardwareSpec", collective: str, ranks: Sequence[int], models: Sequence[str], sizes: Sequence[int]
) -> list[BenchRow]:
    """Every (model, rank count, size) point, models outermost.

    Args:
        spec: the spec to fit to each rank count.
        collective: one of :data:`BENCH_COLLECTIVES`.
        ranks: rank counts (each >= 2).
        models: collective-model names (``alpha_beta``, ``astra``, ``nccl``).
        sizes: nccl-tests sizes, bytes.

    Returns:
        ``len(models) * len(ranks) * len(sizes)`` rows (times in us, bandwidths in GB/s).

    Raises:
        TracekitError: an unknown ``collective``.
        SpecError: a rank count < 2 or one the spec cannot be fitted to, a model the spec cannot run
            (``nccl`` needs every dimension's ``nccl_link``).
        ReplayError: a collective the model cannot cost.
    """
    if collective not in BENCH_COLLECTIVES:
        raise TracekitError(f"unknown collective {collective!r}; expected one of {', '.join(BENCH_COLLECTIVES)}")
    rows = []
    for model in models:
        for p in ranks:
            if p < (1 if model == "nccl" else 2):
                raise SpecError(f"a collective needs at least 2 ranks (1 with the nccl model), got {p}")
            fitted = replace(spec.fitted(p), collective_model=model)
            if model == "nccl":
                for i, dim in enumerate(fitted.network):
                    if dim.nccl_link is None:
                        raise SpecError(f"key network[{i}].nccl_link: is required for the nccl model", path=spec.path)
            rows += [model_point(fitted, collective, p, n) for n in sizes]
    return rows


@dataclass(frozen=True)
class NcclTestsRun:
    """An nccl-tests output file: its collective (None if the file does not say), ranks and rows."""

    path: str
    collective: str | None
    ranks: int
    rows: tuple[BenchRow, ...]


_RANK_LINE = re.compile(r"^#\s*Rank\s+(\d+)\b")
#: a line's launcher tag: ``[3]`` (older nccl-tests with -t) or Open MPI's ``[1,0]<stdout>:`` (mpirun --tag-output)
_TAG = re.compile(r"^\s*\[[\d,]+\](?:<\w+>:)?\s*")
#: nccl-tests binary stems that differ from our collective names.
_BINARY_NAMES = {"alltoall": "all_to_all"}
_STARTING = re.compile(r"Collective test starting:\s*(\w+?)_perf")


def parse_nccl_tests(
    text: str, *, path: str = "<text>", ranks: int | None = None, collective: str = "all_reduce"
) -> NcclTestsRun:
    """Rows of an nccl-tests stdout (out-of-place columns: size, time, algbw, busbw).

    A data row is ``size count type [redop] [root] time algbw busbw #wrong time algbw busbw #wrong``
    (older versions have no root column, "error" instead of "#wrong"); the
    last eight fields are the out-of-place and in-place groups.  Ranks are
    counted from the ``#  Rank N ...`` device lines unless ``ranks`` is given.  The collective is
    the one the file names (``# Collective test starting: all_gather_perf``, newer nccl-tests);
    a file that names none is taken to be ``collective``.

    Raises:
        TracekitError: naming ``path`` and the line, when a data row does not parse, no row
            is found, the rank count is unknown, or the file names another collective.
    """
    rank_ids: set[int] = set()
    rows = []
    found: str | None = None
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = _TAG.sub("", raw).strip()
        if line.startswith("#"):
            m = _RANK_LINE.match(line)
            if m:
                rank_ids.add(int(m.group(1)))
            m = _STARTING.search(line)
            if m and found is None:
                found = _BINARY_NAMES.get(m.group(1), m.group(1))
            continue
        tokens = line.split()
        if len(tokens) < 11 or not tokens[0].isdigit() or not tokens[1].isdigit():
            continue
        try:
            size, time_us, algbw, busbw = int(tokens[0]), float(tokens[-8]), float(tokens[-7]), float(tokens[-6])
        except ValueError:
            raise TracekitError(f"line {lineno}: not an nccl-tests data row: {raw.strip()!r}", path=path) from None
        if size >= 1 << 63 or not all(math.isfinite(v) and v >= 0 for v in (time_us, algbw, busbw)):
            raise TracekitError(
                f"line {lineno}: size {size:,} B or a time or bandwidth is out of range (sizes below 2^63 B, "
                f"finite non-negative times): {raw.strip()[:120]!r}",
                path=path,
            )
        rows.append((size, time_us, algbw, busbw))
    p = ranks or len(rank_ids)
    if not rows:
        raise TracekitError("no nccl-tests data rows (size count type ... time algbw busbw) found", path=path)
    if p < 1:
        raise TracekitError("rank count unknown (no '#  Rank N' device lines); give it explicitly", path=path)
    if found is not None and found != collective:
        raise TracekitError(f"the file is an nccl-tests {found} run, not {collective}", path=path)
    name = f"nccl-tests:{os.path.basename(path)}"
    return NcclTestsRun(path, found, p, tuple(BenchRow(name, collective, p, s, t, a, b) for s, t, a, b in rows))


def read_nccl_tests(path: str | os.PathLike[str], **options) -> NcclTestsRun:
    """:func:`parse_nccl_tests` of a file.

    Raises:
        TracekitError: unreadable file or see :func:`parse_nccl_tests`.
    """
    from tracekit.io import read_input_bytes

    try:
        text = read_input_bytes(path).decode("utf-8", errors="replace")
    except OSError as exc:
        raise TracekitError(f"cannot read nccl-tests output: {exc.strerror}", path=path) from None
    return parse_nccl_tests(text, path=os.fspath(path), **options)


def format_table(rows: Iterable[BenchRow]) -> str:
    """Text table in nccl-tests' column layout, one block per (source, ranks)."""
    out: list[str] = []
    key = None
    for r in rows:
        if (r.source, r.ranks, r.collective) != key:
            key = (r.source, r.ranks, r.collective)
            out += [
                "",
                f"# {r.collective} on {r.ranks} ranks: {r.source}",
                f"# {'size (B)':>14} {'time (us)':>12} {'algbw (GB/s)':>13} {'busbw (GB/s)':>13}  algorithm",
            ]
        out.append(
            f"  {r.size_bytes:>14d} {r.time_us:>12.2f} {r.algbw_gbps:>13.2f} {r.busbw_gbps:>13.2f}  {r.algorithm}"
        )
    return "\n".join(out[1:]) + "\n"


def build_html(rows: Sequence[BenchRow], *, title: str) -> str:
    """Self-contained page: busbw and time vs size (log axes), one line per (source, ranks), and the table."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    from tracekit.replayer.reporting.html_page import Page, cell, table

    fig = make_subplots(rows=1, cols=2, subplot_titles=("bus bandwidth (GB/s)", "time (us)"))
    groups: dict[tuple[str, int], list[BenchRow]] = {}
    for r in rows:
        groups.setdefault((r.source, r.ranks), []).append(r)
    import plotly.colors

    palette = plotly.colors.qualitative.Plotly
    for i, ((source, p), pts) in enumerate(groups.items()):
        measured = source.startswith("nccl-tests")
        colour = palette[i % len(palette)]
        style = dict(
            mode="markers" if measured else "lines+markers",
            name=f"{source}, {p} ranks",
            legendgroup=f"{source}{p}",
            line=dict(color=colour),
            marker=dict(color=colour, size=10 if measured else 6, symbol="diamond" if measured else "circle"),
        )
        xs = [r.size_bytes for r in pts]
        text = [r.algorithm for r in pts]
        fig.add_trace(go.Scatter(x=xs, y=[r.busbw_gbps for r in pts], text=text, **style), row=1, col=1)
        fig.add_trace(go.Scatter(x=xs, y=[r.time_us for r in pts], text=text, showlegend=False, **style), row=1, col=2)
    fig.update_xaxes(type="log", title_text="size (bytes)")
    fig.update_yaxes(type="log", row=1, col=2)
    fig.update_layout(height=520)
    page = Page(
        title,
        "nccl-tests definitions: algbw = size / time; busbw = algbw x 2(p-1)/p for all-reduce, "
        "(p-1)/p for all-gather / reduce-scatter / all-to-all, 1 for broadcast / reduce",
    )
    body = [
        [
            cell(r.source, left=True),
            r.ranks,
            cell(r.size_bytes, f"row.{i}.size_bytes", r.size_bytes),
            cell(f"{r.time_us:.2f}", f"row.{i}.time_us", r.time_us),
            f"{r.algbw_gbps:.2f}",
            cell(f"{r.busbw_gbps:.2f}", f"row.{i}.busbw_gbps", r.busbw_gbps),
            cell(r.algorithm, left=True),
        ]
        for i, r in enumerate(rows)
    ]
    page.section("Curves", page.figure(fig))
    page.section(
        "Table",
        table(
            ["source", "ranks", "size (B)", "time (us)", "algbw (GB/s)", "busbw (GB/s)", "algorithm"],
            body,
            table_id="bench",
        ),
    )
    return page.render()


def check_plot_path(path: str | os.PathLike[str]) -> Path:
    """``path`` as a Path if it names an ``.html``/``.htm``/``.png`` file.

    Raises:
        ReplayError: another suffix.
    """
    target = Path(path)
    if target.suffix.lower() not in (".html", ".htm", ".png"):
        raise ReplayError(f"plot file must end in .html or .png, got {target.name!r}", path=target)
    return target


def write_plot(rows: Sequence[BenchRow], path: str | os.PathLike[str], *, title: str) -> Path:
    """Write the page (``.html``) or a screenshot of it (``.png``, needs Chromium); atomic.

    Raises:
        ReplayError: another suffix.
        BrowserError: PNG without a working Chromium.
    """
    import tempfile

    from tracekit.io import atomic_output

    target = check_plot_path(path)
    suffix = target.suffix.lower()
    text = build_html(rows, title=title)
    if suffix != ".png":
        with atomic_output(target, "w") as fh:
            fh.write(text)
        return target
    from tracekit.replayer.reporting.browser import screenshot_html

    with tempfile.TemporaryDirectory() as tmp:
        page = Path(tmp) / "bench.html"
        page.write_text(text, encoding="utf-8")
        return screenshot_html(page, target, height=1200)


__all__ = [
    "BENCH_COLLECTIVES",
    "BENCH_MODELS",
    "BenchRow",
    "NcclTestsRun",
    "build_html",
    "check_plot_path",
    "format_table",
    "model_curves",
    "model_point",
    "parse_nccl_tests",
    "parse_size",
    "read_nccl_tests",
    "size_range",
    "write_plot",
]
