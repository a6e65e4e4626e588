"""Replay fidelity on real captures: every real trace with a ProfilerStep (and the named step-less ones).

Each row converts a real capture (``../shared/real``), replays it with its own measured durations
(:func:`tracekit.replayer.results.measured.check_replay`: compute measured; each member of a collective ends the
time it measured after the last member's measured arrival, see replayer/simulation/measured_comm.py) and compares
the replayed step time per rank with the measured one.

Row: (set, conversion, rank, step, measured ns, source of the measured value, expected error or None, reason).
``expected error`` None means the row must be within 5 %; otherwise the row states the error (in %,
asserted to +-0.5 points) and the reason 5 % is not reached.

Measured values: ``KINETO_STEP`` = the ``dur`` of Kineto's ``ProfilerStep#N`` event on that rank (us in the
file, exact ns here); ``SPAN`` = no ProfilerStep in the file: first measured start to last measured end
of the converted nodes.

Rows that miss 5 % (closing note):
- param-linear ET + Kineto was -14.6 % before issue 27 (uncovered host time outside ranges was idle); with the
  latency rule of host_timing.latency_leads (uncovered time after the latest dependency ended is the next node's)
  it is -2.2 %, within 5 %.
- param-linear Kineto-only, -31.7 % (40 iterations): the main thread waits for the autograd thread 40 times
  (607.1 ms in gaps over 1 ms, each from aten::ones_like to Optimizer.step), but no range (``## backward ##``) or
  fwdbwd flow in the file ties the autograd thread's 510.4 ms of work to the main thread, so the backward replays
  alongside it.  A timing-only hand-over (the ET path's "consecutive ops on different threads" edge) would give
  -7.5 % here but +39.6 / +40.4 .. +74.3 % on hta-nccl_parser_config / hta-ns_resolution_trace (measured), so the
  Kineto path does not use one.
- kineto-docs (two synthetic H100 test traces from the Kineto docs, span 130 ns): no range; the host thread's four
  ops are 40 + 20 + 20 + 20 = 100 ns with 3 x 10 ns between them, idle by the host rule: -23.1 %.
- hta-call_stack, hta-cpu_only, hta-triton_example: HTA test excerpts whose step thread holds no timed operator
  inside ProfilerStep#N (7, 16 and 8 events in the files), so the step replays to 0 and check_replay says so in a
  note. The work inside the step's range on other threads/streams does not reach the step either: call_stack
  0.190 ms of 413.451 ms (backward thread + 1 kernel), triton_example 1.407 ms of 13,336.316 ms; cpu_only holds
  two gloo:all_reduce ranges on gloo worker threads (173.2 and 170.5 ms, the first ending 191.7 ms into the
  210.1 ms step): counting them as the step's work would give -8.8 %, still outside 5 %.
"""

from __future__ import annotations

import glob
import logging
from functools import lru_cache

import pytest
import real_kineto

from tracekit.converters.pytorch import convert_pytorch
from tracekit.replayer.results.measured import check_replay

pytestmark = pytest.mark.realdata

KINETO_STEP = "Kineto ProfilerStep#N dur"
SPAN = "span of measured node times (no ProfilerStep)"
NO_RANGE = "no ProfilerStep: uncovered host time outside any range is idle by the host rule"
NO_HANDOFF = "no range or fwdbwd flow ties the autograd thread to the main thread: backward replays beside it"
JOB = "ProfilerStep#N of every rank: last start to last end"
EXCERPT = "HTA test excerpt: no timed operator inside the step on its thread (the replay notes it)"
EMPTY_STEP_NOTES = {  # (set) -> the note check_replay must give, from the counts in the files
    "hta-call_stack": "rank 0 ProfilerStep#552 (413.451 ms on thread 3914): no timed host operator on its thread "
    "inside the step, so it replays to 0; 6 node(s) on other threads/streams start inside it, "
    "0.190 ms of measured work in all",
    "hta-cpu_only": "rank 34 ProfilerStep#551 (210.109 ms on thread 1074): no timed host operator on its thread "
    "inside the step, so it replays to 0; 2 node(s) on other threads/streams start inside it, "
    "343.681 ms of measured work in all",
    "hta-triton_example": "rank 0 ProfilerStep#1 (13,336.316 ms on thread 3100453): no timed host operator on its "
    "thread inside the step, so it replays to 0; 6 node(s) on other threads/streams start "
    "inside it, 1.407 ms of measured work in all",
}

G = "pytorch/torch-cpu-gloo/"
SETS = {
    ("torch-cpu-gloo/single", "et+kineto"): (G + "single/et_rank*.json", G + "single/kineto_rank*.json"),
    ("torch-cpu-gloo/single", "kineto"): (None, G + "single/kineto_rank*.json"),
    ("torch-cpu-gloo/dist_ws2", "et+kineto"): (G + "dist_ws2/et_rank*.json", G + "dist_ws2/kineto_rank*.json"),
    ("torch-cpu-gloo/dist_ws2", "kineto"): (None, G + "dist_ws2/kineto_rank*.json"),
    ("torch-cpu-gloo/dist_ws4", "et+kineto"): (G + "dist_ws4/et_rank*.json", G + "dist_ws4/kineto_rank*.json"),
    ("torch-cpu-gloo/dist_ws4", "kineto"): (None, G + "dist_ws4/kineto_rank*.json"),
    ("hta-simple-add", "et+kineto"): ("pytorch/hta-simple-add/*_et.json.gz", "pytorch/hta-simple-add/*_trace.json.gz"),
    ("hta-simple-add", "kineto"): (None, "pytorch/hta-simple-add/*_trace.json.gz"),
    ("param-linear", "et+kineto"): (
        "pytorch/param-linear/linear_et.json.gz",
        "pytorch/param-linear/linear_kineto.json.gz",
    ),
    ("param-linear", "kineto"): (None, "pytorch/param-linear/linear_kineto.json.gz"),
    **{
        (d, "kineto"): (None, f"kineto/{d}/*")
        for d in (
            "hta-call_stack",
            "hta-cpu_only",
            "hta-distributed_info_unavailable",
            "hta-nccl_parser_config",
            "hta-negative_queue_length_values_check",
            "hta-ns_resolution_trace",
            "hta-triton_example",
        )
    },
    ("kineto-docs/after_fix_trace.json", "kineto"): (None, "kineto/kineto-docs/after_fix_trace.json"),
    ("kineto-docs/before_fix_trace.json", "kineto"): (None, "kineto/kineto-docs/before_fix_trace.json"),
}

TABLE = [
    # set, conversion, rank, step, measured ns, source, expected error % (None: within 5 %), reason
    ("torch-cpu-gloo/single", "et+kineto", 0, 2, 175_834_341, KINETO_STEP, None, ""),
    ("torch-cpu-gloo/single", "kineto", 0, 2, 175_834_341, KINETO_STEP, None, ""),
    ("torch-cpu-gloo/dist_ws2", "et+kineto", 0, 2, 400_344_462, KINETO_STEP, None, ""),
    ("torch-cpu-gloo/dist_ws2", "et+kineto", 1, 2, 388_306_474, KINETO_STEP, None, ""),
    ("torch-cpu-gloo/dist_ws2", "kineto", 0, 2, 400_344_462, KINETO_STEP, None, ""),
    ("torch-cpu-gloo/dist_ws2", "kineto", 1, 2, 388_306_474, KINETO_STEP, None, ""),
    ("torch-cpu-gloo/dist_ws4", "et+kineto", 0, 2, 1_133_691_054, KINETO_STEP, None, ""),
    ("torch-cpu-gloo/dist_ws4", "et+kineto", 1, 2, 1_145_606_929, KINETO_STEP, None, ""),
    ("torch-cpu-gloo/dist_ws4", "et+kineto", 2, 2, 1_124_601_975, KINETO_STEP, None, ""),
    ("torch-cpu-gloo/dist_ws4", "et+kineto", 3, 2, 1_125_680_891, KINETO_STEP, None, ""),
    ("torch-cpu-gloo/dist_ws4", "kineto", 0, 2, 1_133_691_054, KINETO_STEP, None, ""),
    ("torch-cpu-gloo/dist_ws4", "kineto", 1, 2, 1_145_606_929, KINETO_STEP, None, ""),
    ("torch-cpu-gloo/dist_ws4", "kineto", 2, 2, 1_124_601_975, KINETO_STEP, None, ""),
    ("torch-cpu-gloo/dist_ws4", "kineto", 3, 2, 1_125_680_891, KINETO_STEP, None, ""),
    # job rows (rank -1): last rank's step start to last rank's step end, one host clock (127.0.0.1 gloo)
    ("torch-cpu-gloo/dist_ws2", "et+kineto", -1, 2, 392_283_674, JOB, None, ""),
    ("torch-cpu-gloo/dist_ws2", "kineto", -1, 2, 392_283_674, JOB, None, ""),
    ("torch-cpu-gloo/dist_ws4", "et+kineto", -1, 2, 1_125_680_891, JOB, None, ""),
    ("torch-cpu-gloo/dist_ws4", "kineto", -1, 2, 1_125_680_891, JOB, None, ""),
    ("hta-simple-add", "et+kineto", 0, None, 19_812_394_000, SPAN, None, ""),
    ("hta-simple-add", "kineto", 0, None, 19_926_047_000, SPAN, None, ""),
    ("param-linear", "et+kineto", 0, None, 17_187_000, SPAN, None, ""),
    ("param-linear", "kineto", 0, None, 2_003_861_000, SPAN, -31.7, NO_HANDOFF),
    ("hta-call_stack", "kineto", 0, 552, 413_451_000, KINETO_STEP, -100.0, EXCERPT),
    ("hta-cpu_only", "kineto", 34, 551, 210_109_162, KINETO_STEP, -100.0, EXCERPT),
    ("hta-distributed_info_unavailable", "kineto", 0, 1009, 75_473_000, KINETO_STEP, None, ""),
    ("hta-nccl_parser_config", "kineto", 0, 4, 222_442_191, KINETO_STEP, None, ""),
    ("hta-nccl_parser_config", "kineto", 0, 5, 219_726_905, KINETO_STEP, None, ""),
    ("hta-nccl_parser_config", "kineto", 0, 6, 224_936_243, KINETO_STEP, None, ""),
    ("hta-negative_queue_length_values_check", "kineto", 0, 550, 209_748_000, KINETO_STEP, None, ""),
    ("hta-negative_queue_length_values_check", "kineto", 0, 551, 216_483_000, KINETO_STEP, None, ""),
    ("hta-negative_queue_length_values_check", "kineto", 0, 552, 216_119_000, KINETO_STEP, None, ""),
    ("hta-negative_queue_length_values_check", "kineto", 0, 553, 215_467_000, KINETO_STEP, None, ""),
    ("hta-negative_queue_length_values_check", "kineto", 0, 554, 216_216_000, KINETO_STEP, None, ""),
    ("hta-ns_resolution_trace", "kineto", 0, 101, 35_115_869, KINETO_STEP, None, ""),
    ("hta-ns_resolution_trace", "kineto", 0, 102, 72_077_474, KINETO_STEP, None, ""),
    ("hta-ns_resolution_trace", "kineto", 0, 103, 95_697_341, KINETO_STEP, None, ""),
    ("hta-ns_resolution_trace", "kineto", 0, 104, 95_551_087, KINETO_STEP, None, ""),
    ("hta-ns_resolution_trace", "kineto", 0, 105, 95_699_037, KINETO_STEP, None, ""),
    ("hta-triton_example", "kineto", 0, 1, 13_336_315_805, KINETO_STEP, -100.0, EXCERPT),
    ("kineto-docs/after_fix_trace.json", "kineto", 0, None, 130, SPAN, -23.1, NO_RANGE),
    ("kineto-docs/before_fix_trace.json", "kineto", 0, None, 130, SPAN, -23.1, NO_RANGE),
]


@lru_cache(maxsize=None)
def _rows(real: str, name: str, kind: str):
    et_glob, k_glob = SETS[(name, kind)]
    kin = sorted(glob.glob(f"{real}/{k_glob}"))
    assert kin, f"no files for {name}"
    logging.disable(logging.WARNING)  # partial-overlap warnings are expected on these captures
    try:
        ts = (
            convert_pytorch(sorted(glob.glob(f"{real}/{et_glob}")), kin, executor="serial")
            if et_glob
            else real_kineto.traceset(kin)  # convert_kineto(kin), each file converted once (tests/real_kineto.py)
        )
    finally:
        logging.disable(logging.NOTSET)
    return check_replay(ts)


def _row_map(real: str, name: str, kind: str):
    return {(r.rank, r.step): r for r in _rows(real, name, kind).rows}


@pytest.mark.parametrize("name", sorted(EMPTY_STEP_NOTES))
def test_empty_step_is_stated_not_silent(real_dir, name):
    notes = _rows(str(real_dir), name, "kineto").notes
    assert EMPTY_STEP_NOTES[name] in notes
    assert sum("no timed host operator" in n for n in notes) == 1


@pytest.mark.parametrize(
    "name,kind,rank,step,measured_ns,source,expected,reason",
    TABLE,
    ids=[f"{t[0]}-{t[1]}-r{t[2]}-s{t[3]}" for t in TABLE],
)
def test_replayed_step_matches_measured(real_dir, name, kind, rank, step, measured_ns, source, expected, reason):
    rows = _row_map(str(real_dir), name, kind)
    row = rows[(rank, step)]
    assert row.measured_ns == measured_ns
    assert row.source.startswith("Kineto ProfilerStep") == (source == KINETO_STEP)
    assert row.source.startswith("job:") == (source == JOB)
    if expected is None:
        assert abs(row.error) <= 0.05, f"{name} {kind} rank {rank} step {step}: {100 * row.error:+.1f} %"
    else:
        assert reason and abs(100 * row.error - expected) <= 0.5


def test_table_covers_every_row_of_every_set(real_dir):
    for name, kind in SETS:
        listed = {(t[2], t[3]) for t in TABLE if (t[0], t[1]) == (name, kind)}
        assert set(_row_map(str(real_dir), name, kind)) == listed, (name, kind)


def _top_level(events):
    """Top-level events of one thread (start order), dropping the events nested in them."""
    top, end = [], -1
    for e in sorted(events, key=lambda e: (e.start_ns, -e.duration_ns, e.index)):
        if e.start_ns >= end:
            top.append(e)
            end = e.end_ns
    return top


def test_kineto_docs_reason_host_ops_cover_100_of_130_ns(real_dir):
    from tracekit.converters.pytorch.kineto_reader import read_kineto

    for name in ("after_fix_trace.json", "before_fix_trace.json"):
        kt = read_kineto(real_dir / "kineto" / "kineto-docs" / name)
        host = _top_level(kt.of_category("cpu_op"))
        assert [e.duration_ns for e in host] == [40, 20, 20, 20]
        assert host[-1].end_ns - host[0].start_ns == 130
        assert not kt.of_category("user_annotation")


def test_param_linear_reason_main_thread_waits_for_autograd(real_dir):
    from tracekit.converters.pytorch.kineto_reader import read_kineto

    kt = read_kineto(real_dir / "pytorch" / "param-linear" / "linear_kineto.json.gz")
    assert not [f for f in kt.flows if f.category == "fwdbwd"]
    assert {e.name for e in kt.of_category("user_annotation")} == {
        "Optimizer.zero_grad#SGD.zero_grad",
        "Optimizer.step#SGD.step",
    }
    main = _top_level(e for e in kt.events if (e.pid, e.tid) == (24248, 24248))
    waits = [(a, b) for a, b in zip(main, main[1:]) if b.start_ns - a.end_ns > 1_000_000]
    assert len(waits) == 40 and {(a.name, b.name) for a, b in waits} == {("aten::ones_like", "Optimizer.step#SGD.step")}
    assert sum(b.start_ns - a.end_ns for a, b in waits) == pytest.approx(607.06e6, abs=0.01e6)
    autograd = _top_level(e for e in kt.events if (e.pid, e.tid) == (24248, 24270))
    assert sum(e.duration_ns for e in autograd) == pytest.approx(510.41e6, abs=0.01e6)
