"""The compiled chain-run kernels of the engine (simulation/_chains.py), on hand-built runs with hand-computed times.

Run 0 -> 1 -> 2 -> 3 on one resource (chain deltas 1), durations 10, 20, 30, 40 ns, node 0 started at 5 ns:
starts 5, 15, 35, 65 and ends 15, 35, 65, 105 (each member starts when the previous ends).
"""

from __future__ import annotations

import math

import numpy as np

from tracekit.replayer.simulation._chains import cut_run, extend_run
from tracekit.replayer.simulation._flows import EV_LATENCY, EV_NODE

NAN = math.nan


def _state(n, delta, duration, remaining):
    start = np.full(n, NAN)
    end = np.full(n, NAN)
    reason = np.full(n, -1, dtype=np.int64)
    return (
        start,
        end,
        reason,
        np.array(remaining, dtype=np.int32),
        np.array(duration, dtype=np.float64),
        np.array(delta, dtype=np.int32),
    )


def _run4(limit=4, remaining=(0, 1, 1, 1)):
    s = _state(4, [1, 1, 1, 0], [10.0, 20.0, 30.0, 40.0], list(remaining))
    s[0][0], s[1][0] = 5.0, 15.0  # node 0 started at 5 ns by the engine
    out = extend_run(*s, 0, 15.0, limit)
    return s, out


def test_a_whole_run_starts_back_to_back():
    (start, end, reason, remaining, _, _), out = _run4()
    assert out == (3, 3, 105.0)
    assert start.tolist() == [5.0, 15.0, 35.0, 65.0]
    assert end.tolist() == [15.0, 35.0, 65.0, 105.0]
    assert reason.tolist() == [-1, 0, 1, 2]
    assert remaining.tolist() == [0, 0, 0, 0]


def test_the_run_stops_before_the_first_queued_node():
    (start, end, _, remaining, _, _), out = _run4(limit=2)  # node 2 is queued: nodes from 2 on wait their turn
    assert out == (1, 1, 35.0)
    assert end[:2].tolist() == [15.0, 35.0] and np.isnan(end[2:]).all() and np.isnan(start[2:]).all()
    assert remaining.tolist() == [0, 0, 1, 1]


def test_the_run_stops_at_a_node_waiting_for_something_else():
    (_, end, _, remaining, _, _), out = _run4(remaining=(0, 1, 2, 1))
    assert out == (1, 1, 35.0)
    assert remaining.tolist() == [0, 0, 2, 1] and np.isnan(end[2:]).all()


def test_nothing_behind_the_member():
    s = _state(3, [0, 0, 0], [7.0, 1.0, 1.0], [1, 1, 1])
    assert extend_run(*s, 1, 3.5, 3) == (1, -1, 3.5)
    assert np.isnan(s[0]).all() and s[2].tolist() == [-1, -1, -1] and s[3].tolist() == [1, 1, 1]


def test_strided_chain_and_float_order():
    # 0 -> 2 -> 5 (deltas 2 and 3): times added in the Python engine's order, so equal to the bit
    s = _state(6, [2, 0, 3, 0, 0, 0], [0.1, 9.0, 0.2, 9.0, 9.0, 0.3], [0, 0, 1, 0, 0, 1])
    m, top, e = extend_run(*s, 0, 1.0 + 0.1, 6)
    assert (m, top) == (5, 5)
    assert e == ((1.0 + 0.1) + 0.2) + 0.3
    assert s[2].tolist() == [-1, -1, 0, -1, -1, 2]


def test_cut_where_the_queued_node_gets_in():
    (start, end, reason, remaining, _, delta), _ = _run4()
    # node 2 queued (its file position is before member 3) while the event (15 ns, node, 0) is processed
    head, cut = cut_run(start, end, reason, remaining, delta, 0, 3, 2, 15.0, EV_NODE, 0, EV_NODE)
    assert (head, cut) == (0, 2)  # member 2 still ends after now, so the run ends there; member 3 waits again
    assert np.isnan(start[3]) and np.isnan(end[3]) and reason[3] == -1 and remaining[3] == 1
    assert end[:3].tolist() == [15.0, 35.0, 65.0]


def test_cut_skips_members_already_in_the_past():
    (start, end, reason, remaining, _, delta), _ = _run4()
    head, cut = cut_run(start, end, reason, remaining, delta, 0, 3, 2, 40.0, EV_NODE, 0, EV_NODE)
    assert (head, cut) == (2, 2)  # members 0 and 1 ended before 40 ns: never to be cut again


def test_no_cut_when_the_member_ends_at_the_current_event_or_before():
    (start, end, reason, remaining, _, delta), _ = _run4()
    # member 2's end event (65, node, 2) is the one being processed: too late to cut there
    assert cut_run(start, end, reason, remaining, delta, 0, 3, 2, 65.0, EV_NODE, 2, EV_NODE) == (2, -1)
    assert end.tolist() == [15.0, 35.0, 65.0, 105.0] and remaining.tolist() == [0, 0, 0, 0]
    # a later event kind at the same time is processed after it as well
    assert cut_run(start, end, reason, remaining, delta, 0, 3, 2, 65.0, EV_LATENCY, 0, EV_NODE) == (2, -1)


def test_cut_at_a_same_time_event_processed_before():
    (start, end, reason, remaining, _, delta), _ = _run4()
    # (65, node, 1) comes before (65, node, 2): member 2's end is still to come
    assert cut_run(start, end, reason, remaining, delta, 0, 3, 2, 65.0, EV_NODE, 1, EV_NODE) == (2, 2)
    assert np.isnan(end[3])
