"""Old and odd Kineto layouts (issue 27): a row outside 5 % says, per rank and step, what the file lacks.

Files from ``../shared/real/kineto`` (HTA test data, README there) whose replay cannot reach 5 % from what they
recorded; the figures are the files' own (measured = span of the node times: none has a ProfilerStep):

* ``hta-trace_file_list/inference_rank_1.json.gz``: 2021 layout (``Kernel``/``Runtime`` categories, no
  ``schemaVersion``), 4 kernels whose launch is not in the file;
* ``hta-critical_path/cuda_event_sync_multi_stream``: 18.660 ms of its 19.923 ms span hold no event at all (the
  program ran something the profiler did not record);
* ``hta-mtia_inference_trace``: MTIA accelerator, 1.882 ms of 349.537 ms unrecorded, no ProfilerStep.
"""

from __future__ import annotations

import logging

import pytest
import real_kineto

from tracekit.replayer.results.measured import check_replay
from tracekit.replayer.results.measured_lacks import _uncovered_ns

CASES = [
    (
        "kineto/hta-trace_file_list/inference_rank_1.json.gz",
        "rank 1 whole trace: -10.9 % against 1.641 ms measured; the file lacks what the replay needed: 0.165 ms of it "
        "covered by no recorded event (unrecorded time); no ProfilerStep range (host time between operators outside "
        "ranges is idle); 4 device op(s) without a launching host op (flows missing)",
    ),
    (
        "kineto/hta-critical_path/cuda_event_sync_multi_stream/event_sync_trace.json.gz",
        "rank 0 whole trace: -93.9 % against 19.923 ms measured; the file lacks what the replay needed: 18.660 ms "
        "of it covered by no recorded event (unrecorded time); no ProfilerStep range (host time between operators "
        "outside ranges is idle); 6 device op(s) without a launching host op (flows missing)",
    ),
    (
        "kineto/hta-mtia_inference_trace/mtia_inference_rank_0.json.gz",
        "rank 0 whole trace: -7.3 % against 349.537 ms measured; the file lacks what the replay needed: 1.882 ms "
        "of it covered by no recorded event (unrecorded time); no ProfilerStep range (host time between operators "
        "outside ranges is idle)",
    ),
]


@pytest.mark.realdata
@pytest.mark.parametrize("path,note", CASES, ids=[c[0].split("/")[1] for c in CASES])
def test_a_row_outside_5_percent_states_what_the_file_lacks(real_dir, path, note):
    logging.disable(logging.WARNING)
    try:
        notes = check_replay(real_kineto.traceset([str(real_dir / path)])).notes
    finally:
        logging.disable(logging.NOTSET)
    assert note in notes


def test_uncovered_time_is_the_window_minus_the_union_of_node_intervals():
    # window [0, 100): nodes cover [10, 30) and [20, 50) (overlapping) and [90, 120): 10 + 40 + 10 uncovered
    assert _uncovered_ns([(20, 50), (10, 30), (90, 120)], 0, 100) == 50
    assert _uncovered_ns([], 5, 9) == 4
