"""Do an Execution Trace and a Kineto trace come from the same run?

The linker (:mod:`.linker`) joins whatever it can: ids first, then the
sequences of operator names.  Given files of two unrelated runs, a few record
function ids still match by chance, and those ops would take their times
from the other run.  :func:`run_mismatch` looks at the evidence the files
carry and :func:`check_same_run` stops the conversion when a poor link comes
with evidence that the files do not belong together:

- the ET's ``pid`` is not among the process ids of Kineto's host events;
- the ET's capture ``time`` is more than a day from the Kineto trace's time
  range (``baseTimeNanoseconds`` + ``ts``, or absolute ``ts``), a margin that
  covers any time zone;
- fewer than half of the ET's operator names (counted with multiplicity)
  occur among Kineto's host events.

Different runs of the *same program* link well by name sequence (the bundled
``param-resnet`` pair: 57.9 % of host ops) and are not stopped; the threshold
for a poor link is 25 % of the ET's host ops.
"""

from __future__ import annotations

import datetime as _dt
import logging
from collections import Counter

from tracekit.errors import ConversionError

from tracekit.converters.pytorch.et_reader import EtTrace
from tracekit.converters.pytorch.kineto_reader import KinetoTrace

log = logging.getLogger(__name__)

POOR_LINK_RATE = 0.25
MIN_NAME_OVERLAP = 0.5
_DAY_NS = 86_400 * 10**9
_HOST = frozenset({"cpu_op", "user_annotation"})


def _capture_ns(text: str | None) -> int | None:
    if not text:
        return None
    try:
        when = _dt.datetime.strptime(text, "%Y-%m-%d %H:%M:%S").replace(tzinfo=_dt.timezone.utc)
    except ValueError:
        return None
    return int(when.timestamp()) * 10**9


def run_mismatch(et: EtTrace, kineto: KinetoTrace) -> list[str]:
    """Evidence that ``et`` and ``kineto`` come from different runs (empty: none found).

    Returns:
        One sentence per finding, in this order: the ET ``pid`` missing from Kineto's host pids; the ET capture
        ``time`` (read as UTC) more than a day (86 400 s) outside Kineto's absolute host time range; fewer than
        ``MIN_NAME_OVERLAP`` (50 %) of the ET's operator names (with multiplicity) among Kineto's host events.
        Raises nothing: an unreadable capture time is no evidence.
    """
    from tracekit.converters.pytorch.linker import is_et_root

    host = [e for e in kineto.events if e.category in _HOST]
    out: list[str] = []
    pids = {e.pid for e in host if isinstance(e.pid, int)}
    if et.pid is not None and pids and et.pid not in pids:
        shown = ", ".join(map(str, sorted(pids)[:4])) + (" ..." if len(pids) > 4 else "")
        out.append(f"ET pid {et.pid} is not a Kineto host pid ({shown})")
    when = _capture_ns(et.capture_time)
    if when is not None and host:
        base = kineto.base_time_ns or 0
        first = base + min(e.start_ns for e in host)
        last = base + max(e.start_ns + e.duration_ns for e in host)
        if first > 10**17 and not first - _DAY_NS <= when <= last + _DAY_NS:  # absolute times only
            k_day = _dt.datetime.fromtimestamp(first / 1e9, _dt.timezone.utc).strftime("%Y-%m-%d")
            out.append(f"ET captured {et.capture_time}, Kineto events from {k_day}")
    et_names = Counter(op.name for op in et.ops if not is_et_root(op))
    if et_names:
        k_names = Counter(e.name for e in host)
        common = sum(min(n, k_names[name]) for name, n in et_names.items())
        share = common / sum(et_names.values())
        if share < MIN_NAME_OVERLAP:
            out.append(f"only {100 * share:.1f}% of the ET's operator names occur in Kineto")
    return out


def check_same_run(
    et: EtTrace, kineto: KinetoTrace, host_linked: int, host_ops: int, *, allow_unlinked: bool = False
) -> None:
    """Stop when the link is poor (< 25 % of host ops) and :func:`run_mismatch` finds evidence.

    With ``allow_unlinked`` the conversion goes on with a warning (logged).

    Args:
        et, kineto: the rank's two parsed files.
        host_linked, host_ops: ET host ops linked and linkable (:class:`.linker.LinkReport`), counts.
        allow_unlinked: log a warning instead of raising.

    Raises:
        ConversionError: naming both files, the link rate and the evidence.
    """
    rate = host_linked / host_ops if host_ops else 0.0
    if not host_ops or rate >= POOR_LINK_RATE:
        return
    evidence = run_mismatch(et, kineto)
    if not evidence:
        return
    text = (
        f"the ET and the Kineto trace {kineto.path} look like different runs: {'; '.join(evidence)}; only "
        f"{host_linked} of {host_ops} ET host ops ({100 * rate:.1f}%) linked, so their times would come from "
        f"another run"
    )
    if allow_unlinked:
        log.warning("%s: %s (converting anyway: --allow-unlinked)", et.path, text)
        return
    raise ConversionError(text + "; give the files of one run, or --allow-unlinked to convert anyway", path=et.path)


__all__ = ["POOR_LINK_RATE", "check_same_run", "run_mismatch"]
