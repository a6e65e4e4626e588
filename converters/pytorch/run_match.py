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

The threshold for a poor link is 25 % of the ET's host ops.  A good link by
name sequence is no proof of one run: ``param-resnet`` pairs a ResNet-50 ET with
a ResNet-18 Kineto trace and linked 57.9 % of host ops by sequence.  So
:func:`model_mismatch` compares what both files say about the *model*, per
iteration (``ProfilerStep#N`` markers, else ``Optimizer.step#`` ranges): the
number of convolutions, GEMMs and parameter-gradient accumulations
(``AccumulateGrad``: one per parameter tensor).  Any of them differing by more
than 10 % (and by at least 2 per iteration) stops the conversion whatever the
link rate (param-resnet: 53 vs 20 convolutions and 161 vs 62 AccumulateGrad per
iteration).  Files without an iteration count on either side are not compared.
"""

from __future__ import annotations

import datetime as _dt
import logging
import re
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


#: op families counted per iteration by :func:`model_mismatch` (name -> the ops counted, by exact name).
MODEL_OPS = {
    "convolutions": ("aten::convolution",),
    "GEMMs": ("aten::addmm", "aten::mm", "aten::bmm", "aten::baddbmm"),
    "parameter-gradient accumulations": ("autograd::engine::evaluate_function: torch::autograd::AccumulateGrad",),
}
MODEL_TOLERANCE = 0.10
_STEP = re.compile(r"ProfilerStep#\d+$")


def _iterations(names: Counter) -> int:
    """Iterations a file holds: distinct ``ProfilerStep#N`` names, else ``Optimizer.step#`` ranges, else 0."""
    steps = sum(1 for n in names if _STEP.match(n))
    return steps or sum(v for n, v in names.items() if n.startswith("Optimizer.step#"))


def model_mismatch(et: EtTrace, kineto: KinetoTrace) -> list[str]:
    """Evidence that the two files record different models (empty: none found, or nothing to compare).

    Returns:
        One sentence per op family of :data:`MODEL_OPS` whose count per iteration differs by more than
        :data:`MODEL_TOLERANCE` (10 %) and by at least 2, e.g. ``53.0 convolutions per iteration in the ET
        (159 in 3), 20.0 in Kineto (600 in 30)``.  Raises nothing.
    """
    from tracekit.converters.pytorch.linker import is_et_root

    et_names = Counter(op.name for op in et.ops if not is_et_root(op))
    k_names = Counter(e.name for e in kineto.events if e.category in _HOST)
    n_et, n_k = _iterations(et_names), _iterations(k_names)
    if not n_et or not n_k:
        return []
    out = []
    for family, names in MODEL_OPS.items():
        a, b = sum(et_names[n] for n in names), sum(k_names[n] for n in names)
        pa, pb = a / n_et, b / n_k
        if abs(pa - pb) >= 2 and abs(pa - pb) > MODEL_TOLERANCE * max(pa, pb):
            out.append(f"{pa:.1f} {family} per iteration in the ET ({a} in {n_et}), {pb:.1f} in Kineto ({b} in {n_k})")
    return out


def check_same_run(
    et: EtTrace, kineto: KinetoTrace, host_linked: int, host_ops: int, *, allow_unlinked: bool = False
) -> None:
    """Stop when :func:`model_mismatch` finds evidence, or the link is poor (< 25 % of host ops) and
    :func:`run_mismatch` finds evidence.

    With ``allow_unlinked`` the conversion goes on with a warning (logged).

    Args:
        et, kineto: the rank's two parsed files.
        host_linked, host_ops: ET host ops linked and linkable (:class:`.linker.LinkReport`), counts.
        allow_unlinked: log a warning instead of raising.

    Raises:
        ConversionError: naming both files, the link rate and the evidence.
    """
    rate = host_linked / host_ops if host_ops else 0.0
    model = model_mismatch(et, kineto)
    if model:
        text = (
            f"the ET and the Kineto trace {kineto.path} record different models: {'; '.join(model)}; "
            f"{host_linked} of {host_ops} ET host ops ({100 * rate:.1f}%) would take their times from the other "
            f"model's run"
        )
    else:
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


__all__ = ["MODEL_OPS", "POOR_LINK_RATE", "check_same_run", "model_mismatch", "run_mismatch"]
