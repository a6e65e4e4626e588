"""Human-readable numbers for people (HTML reports, terminal tables, error messages): the one number formatter.

Durations are nanoseconds in, the largest unit that keeps the value >= 1 out (s, ms, us: 1e9, 1e6, 1e3 ns);
byte counts use binary units (KiB = 2**10 B, MiB, GiB); bandwidths GB/s (1e9 B/s). Thousands are separated by
commas. Used by the CLI (``tracekit/cli/_render.py``), the replayer's reports and its deadlock messages.
"""

from __future__ import annotations

import math
import re


def fmt_ns(ns: float | None) -> str:
    """``ns`` as the largest unit that keeps it >= 1: ``"1.235 ms"``; ``"-"`` for None/NaN."""
    if ns is None or (isinstance(ns, float) and math.isnan(ns)):
        return "-"
    mag = abs(ns)
    for scale, unit in ((1e9, "s"), (1e6, "ms"), (1e3, "us")):
        if mag >= scale:
            return f"{ns / scale:,.3f} {unit}"
    return f"{ns:.1f} ns" if ns != int(ns) else f"{int(ns)} ns"


def fmt_ms(ns: float, *, signed: bool = False) -> str:
    """``ns`` in milliseconds whatever its size, for columns of one unit: ``"1,234.568 ms"`` (``"+0.120 ms"``)."""
    return f"{ns / 1e6:+,.3f} ms" if signed else f"{ns / 1e6:,.3f} ms"


def fmt_ns_exact(ns: float) -> str:
    """Whole nanoseconds with thousands separators: ``"1,234,567 ns"`` (for messages that quote a time exactly)."""
    return f"{ns:,.0f} ns"


def fmt_delta_ns(ns: float) -> str:
    """A signed duration: ``"+1.200 ms"`` / ``"-3 ns"`` / ``"0 ns"``."""
    if abs(ns) < 0.05:  # would print as 0.0 ns
        return "0 ns"
    return ("+" if ns > 0 else "-") + fmt_ns(abs(ns))


def fmt_bytes(n: float | None) -> str:
    """Binary units: ``"1.00 MiB"``; ``"-"`` for None."""
    if n is None:
        return "-"
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{int(n)} B"


def fmt_gbps(x: float | None) -> str:
    """GB/s (1e9 bytes/s) with 2 decimals; ``"-"`` for None."""
    return "-" if x is None else f"{x:.2f} GB/s"


def fmt_pct(part: float, whole: float) -> str:
    """``part`` as a percentage of ``whole`` (``"-"`` when ``whole`` is 0 or less)."""
    return "-" if not whole or whole < 0 else f"{100.0 * part / whole:.1f}%"


def fmt_ratio(a: float, b: float) -> str:
    """``b / a`` as ``"x1.234"`` (``"-"`` when ``a`` is 0)."""
    return "-" if not a else f"x{b / a:.3f}"


# C0 controls, DEL, C1 controls (CSI 0x9b starts an escape sequence on many terminals) and the Unicode
# bidirectional overrides and isolates, which reorder what a terminal shows ("Trojan Source", CVE-2021-42574).
_CONTROLS = "[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]"
_CONTROL_RE = re.compile(_CONTROLS)
_CONTROL_BUT_NEWLINE_RE = re.compile(_CONTROLS.replace("\x00-\x1f", "\x00-\x09\x0b-\x1f"))


def _escape(match) -> str:  # type: ignore[no-untyped-def]
    ch = match.group(0)
    return {"\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(ch) or (
        f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}"
    )


def literal(text: str, *, keep_newlines: bool = False) -> str:
    """``text`` safe to print on one terminal line: every control character (C0, DEL, C1, bidi overrides) shown
    as its escape (``"\\x1b"``, ``"\\n"``, ``"\\u202e"``), so a name read from a file cannot move the cursor, recolour
    or clear the screen, set the window title, or start a new line that looks like ours.

    The one sanitizer of printed text: the CLI's consoles, its error and warning lines and its log lines pass every
    string through it (:mod:`tracekit.cli._common`). ``keep_newlines``: a line break stays (the consoles' own layout
    of a table cell the CLI wrote in two lines).
    """
    pattern = _CONTROL_BUT_NEWLINE_RE if keep_newlines else _CONTROL_RE
    return pattern.sub(_escape, text) if pattern.search(text) else text
