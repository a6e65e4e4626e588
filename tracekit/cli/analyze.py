"""``tracekit analyze``: the measured run's own breakdown, from its Kineto (PyTorch profiler) traces."""

from __future__ import annotations

import click

from tracekit.cli._common import CONTEXT_SETTINGS, err_console, out_console, state
from tracekit.cli._options import IntRange, emit_json, json_option

KINETO_HINTS = ("kineto", "trace")


def kineto_files(specs: tuple[str, ...]) -> list[str]:
    """Kineto files from files, quoted globs and directories (in a directory: the ``*.json[.gz]`` files whose
    name contains "kineto" or "trace", else all of them), in order, without duplicates.

    Raises:
        TraceFormatError: a spec matches nothing.
    """
    import glob
    from pathlib import Path

    from tracekit.errors import TraceFormatError

    out: list[str] = []
    for spec in specs:
        p = Path(spec)
        if p.is_dir():
            found = sorted(str(f) for f in p.iterdir() if f.name.endswith((".json", ".json.gz")))
            hinted = [f for f in found if any(h in Path(f).name.lower() for h in KINETO_HINTS)]
            found = hinted or found
        elif any(ch in spec for ch in "*?["):
            found = sorted(glob.glob(spec))
        else:
            found = [spec] if p.exists() else []
        if not found:
            raise TraceFormatError("no Kineto trace file matches", path=spec)
        out.extend(f for f in found if f not in out)
    return out


def _traceset_spec(specs: tuple[str, ...]):
    """``specs`` as a trace-set spec when they name Chakra ``.et`` files, else None (Kineto files)."""
    from tracekit.errors import TraceFormatError
    from tracekit.io import trace_paths

    spec = specs[0] if len(specs) == 1 else specs
    try:
        pairs = trace_paths(spec)
    except TraceFormatError:
        return None
    return spec if all(p.name.endswith((".et", ".et.gz")) for _, p in pairs) else None


@click.command("analyze", context_settings=CONTEXT_SETTINGS)
@click.argument("traces", metavar="TRACES...", nargs=-1, required=True)
@click.option(
    "--top",
    type=IntRange(0, 1000),
    default=10,
    show_default=True,
    help="Kernels listed per rank (largest total time first).",
)
@click.option(
    "--html-out",
    "html_out",
    type=click.Path(dir_okay=False),
    default=None,
    help="Also write the analysis as a self-contained HTML page.",
)
@json_option()
def analyze(traces: tuple[str, ...], top: int, html_out: str | None, as_json: bool) -> None:
    """Analyse a measured run from its Kineto traces (one per rank): where the time went.

    Per rank: time by kernel class (gemm, attention, comm, memory, other), the
    overlap of compute and communication, the breakdown into compute, exposed
    communication and other idle (the categories of `tracekit replay`), idle
    time per stream, CUDA launch overhead, and the top kernels.  A CPU-only run
    (gloo) is analysed on its leaf CPU ops and communication threads.

    TRACES is one or more Kineto JSON files (.json, .json.gz), quoted globs or
    directories of them; or a converted trace set (prefix, glob, directory or
    .et files), analysed on its measured start times and durations (no launch
    overhead: a Chakra trace has no CUDA runtime calls).

    \b
    Example:
      tracekit analyze 'run/kineto_rank*.json'
      tracekit analyze run/ --json
      tracekit analyze run/rank0.pt.trace.json.gz --top 20 --html-out measured.html
      tracekit analyze out/job
    """
    from tracekit.converters.pytorch.kineto_analysis import analyze_kineto_files, analyze_traceset

    spec = _traceset_spec(traces)
    if spec is not None:
        from tracekit.io import read_traceset

        from tracekit.errors import TracekitError

        try:
            analysis = analyze_traceset(read_traceset(spec), top=top)
        except TracekitError as exc:  # name the set as the user gave it
            raise exc.with_context(path=traces[0] if len(traces) == 1 else f"{traces[0]} ...") from None
    else:
        analysis = analyze_kineto_files(kineto_files(traces), top=top)
    if html_out is not None:
        from tracekit.replayer.reporting.report_measured import write_measured_report

        write_measured_report(analysis.to_dict(), html_out)
        if not state().quiet:
            err_console().print(f"wrote {html_out}", markup=False, highlight=False)
    if as_json:
        emit_json(analysis.to_dict())
        return
    render_analysis(out_console(), analysis)


def _time_unit(values_ns) -> tuple[float, str]:
    """The one unit (scale in ns, name) a column of times is printed in: the largest unit (s, ms, us, ns) that
    keeps the largest value >= 1, so a value has at most 3 digits before the point (``999.999``)."""
    top = max((abs(v) for v in values_ns), default=0)
    for scale, unit in ((1e9, "s"), (1e6, "ms"), (1e3, "us")):
        if top >= scale:
            return scale, unit
    return 1.0, "ns"


def _time_tables(ranks) -> list:
    """The per-rank time tables of ``analyze``, narrow enough for an 80-column terminal: the breakdown of the
    window (times in one unit named in the headers, shares in %), then time by kernel class.

    Each value has at most 7 characters (``999.999``, ``100.0``) and each header two lines of at most 9, so the
    eight columns of the first table take at most 77 columns (tests/hardening/test_trial_findings_ux.py); the
    JSON (``--json``) has every time in ns.
    """
    from rich.table import Table
    from rich.text import Text

    from tracekit.fmt import fmt_pct as pct
    from tracekit.costs.kernels import CLASSES

    scale, unit = _time_unit(v for r in ranks for v in (r.window_ns, r.comm_ns, *dict(r.time_by_class_ns).values()))

    def t(ns: float) -> str:
        return f"{ns / scale:,.3f}" if scale > 1 else f"{ns:,.0f}"

    def table(title: str, headers: tuple[str, ...]) -> Table:
        out = Table(title=title)
        for h in headers:
            out.add_column(Text(h), justify="right", no_wrap=True)  # Text: the two-line headers keep their break
        return out

    window = table(
        "measured time per rank (compute + exposed comm + other idle = window)",
        (
            "rank",
            "work",
            f"window\n{unit}",
            f"compute\n{unit}",
            f"exposed\ncomm {unit}",
            f"other\nidle {unit}",
            f"comm\n{unit}",
            "overlap\n% of comm",
        ),
    )
    by_class = table(f"measured time by kernel class per rank, {unit}", ("rank", *CLASSES))
    for r in ranks:
        by = dict(r.time_by_class_ns)
        window.add_row(
            str(r.rank), "GPU" if r.device else "CPU", t(r.window_ns), t(r.compute_ns), t(r.exposed_comm_ns),
            t(r.other_idle_ns), t(r.comm_ns), pct(r.overlap_ns, r.comm_ns).rstrip("%"),
        )  # fmt: skip
        by_class.add_row(str(r.rank), *(t(by[c]) for c in CLASSES))
    return [window, by_class]


def render_analysis(console, analysis) -> None:
    """Rich tables of a :class:`~tracekit.converters.pytorch.kineto_analysis.MeasuredAnalysis`."""
    from rich.table import Table
    from rich.text import Text

    from tracekit.cli._render import _fmt_ns
    from tracekit.fmt import fmt_pct as pct  # ``part`` as a percentage of ``whole``, ``-`` when it is 0

    for table in _time_tables(analysis.ranks):
        console.print(table)
    s = Table(title="idle per stream (GPU) or thread (CPU-only run)")
    for col in ("rank", "stream", "events", "busy", "idle"):
        s.add_column(col, justify="left" if col == "stream" else "right")
    for r in analysis.ranks:
        for st in r.streams:
            s.add_row(
                str(r.rank),
                st.name,
                f"{st.events:,}",
                _fmt_ns(st.busy_ns),
                f"{_fmt_ns(st.idle_ns)} ({pct(st.idle_ns, r.window_ns)})",
            )
    console.print(s)
    for r in analysis.ranks:
        if r.launch is not None:
            lc = r.launch
            console.print(
                f"rank {r.rank}: {lc.launches:,} launches, CPU time {_fmt_ns(lc.cpu_ns)}, launch delay "
                f"mean {_fmt_ns(lc.delay_mean_ns)}, max {_fmt_ns(lc.delay_max_ns)}",
                markup=False,
                highlight=False,
            )
    k = Table(title="top kernels (by total time)")
    for col in ("rank", "kernel", "class", "count", "total", "mean"):
        k.add_column(col, justify="left" if col in ("kernel", "class") else "right")
    for r in analysis.ranks:
        for ks in r.top_kernels:
            k.add_row(
                str(r.rank),
                Text(ks.name[:80]),
                ks.kernel_class,
                f"{ks.count:,}",
                _fmt_ns(ks.total_ns),
                _fmt_ns(ks.mean_ns),
            )
    console.print(k)
    _print_memory(console, analysis)


def _print_memory(console, analysis) -> None:
    """The measured peak memory per rank and device and what held it (captures with ``[memory]`` events)."""
    from rich.table import Table

    from tracekit.cli._render import _fmt_bytes

    rows = [(r.rank, m) for r in analysis.ranks for m in r.memory]
    if not rows:
        return
    t = Table(title="peak allocated memory (measured: the profiler's allocation events)")
    for col in ("rank", "device", "peak", "before the capture", "during", "held by (largest)"):
        t.add_column(col, justify="right" if col in ("rank", "peak", "before the capture") else "left")
    for rank, m in rows:
        holders = ", ".join(f"{name} {_fmt_bytes(n)}" for name, n in m.held_by[:4] if name != "before the capture")
        t.add_row(
            str(rank), m.device, _fmt_bytes(m.peak_allocated_bytes), _fmt_bytes(m.baseline_bytes), m.during, holders
        )
    console.print(t)


COMMANDS = [analyze]
