"""The NCCL-like model on the azure-nd-a100-v4 preset against every nccl-tests all_reduce row of that cluster.

Data: ``../shared/real/nccl-tests/echo-azure-nd-a100-v4/nccl_<GPUs>.log`` (Echo, NetX-lab, MIT; README there):
1, 2, 4, 8 GPUs of one server (one process drives the GPUs, ``-g N``) and 16, 32 GPUs on 2 and 4 servers (one
MPI process per GPU), out-of-place time column.  Issue 30 "Must show": within 10 % at >= 1 MiB, within 25 % below.

Met here: every row >= 1 MiB of all six logs within 10 % (worst 9.9 %: the 2-8 MiB protocol hand-over of the
one-server logs and of 2 servers), and the 512 KiB rows within 25 %.  Not met, so not asserted (listed by
``test_rows_below_512_kib_are_the_known_gap``): below 512 KiB the one-server logs are bound by one host thread
launching N kernels one after the other (flat 8.6 / 16.4 / 31 us for 2 / 4 / 8 GPUs up to 8 KiB, x N of the
1-GPU 4.5 us) and the 2-server rows at 16-128 KiB by LL-protocol steps the model's bandwidths do not
reproduce.  The fitted constants and their reasons are in replayer/presets/azure-nd-a100-v4.toml.
"""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from tracekit.replayer.orchestration.bench_coll import model_point, read_nccl_tests
from tracekit.replayer.simulation.hardware import load_spec

pytestmark = pytest.mark.realdata

GPUS = (1, 2, 4, 8, 16, 32)
KiB, MiB = 1 << 10, 1 << 20


def _rows(real_dir, gpus: int):
    path = real_dir / "nccl-tests" / "echo-azure-nd-a100-v4" / f"nccl_{gpus}.log"
    run = read_nccl_tests(path)
    assert run.ranks == gpus
    # the header says how many GPUs each process drove (nccl-tests -g): "# nThread 1 nGpus 8 ..."
    per_process = int(re.search(r"nGpus (\d+)", path.read_text()).group(1))
    assert per_process == (gpus if gpus <= 8 else 1)
    spec = replace(load_spec("azure-nd-a100-v4").fitted(gpus), collective_model="nccl")
    spec = replace(spec, nccl=replace(spec.nccl, gpus_per_process=per_process))
    return [(row, model_point(spec, "all_reduce", gpus, row.size_bytes)) for row in run.rows]


@pytest.mark.parametrize("gpus", GPUS)
def test_every_all_reduce_row_from_512_kib_is_within_the_issue_tolerance(real_dir, gpus):
    rows = _rows(real_dir, gpus)
    checked = 0
    for measured, model in rows:
        if measured.size_bytes < 512 * KiB:
            continue
        tolerance = 0.10 if measured.size_bytes >= MiB else 0.25
        error = model.time_us / measured.time_us - 1.0
        assert abs(error) <= tolerance, (
            f"{gpus} GPUs, {measured.size_bytes:,} B: model {model.time_us:.1f} us ({model.algorithm}) vs "
            f"measured {measured.time_us:.1f} us: {error:+.1%}"
        )
        checked += 1
    # every size from 512 KiB to the log's largest (1 GiB on one server, 16 GiB / 4 GiB on 2 / 4 servers)
    assert checked == {1: 12, 2: 12, 4: 12, 8: 12, 16: 16, 32: 14}[gpus]


def test_the_table_covers_the_issue():
    """1, 2, 4, 8, 16 and 32 GPUs; the multi-server ceiling is the measured ~125 GB/s, not NCCL's 188."""
    spec = load_spec("azure-nd-a100-v4")
    for gpus in (16, 32, 64, 128):
        row = model_point(replace(spec.fitted(gpus), collective_model="nccl"), "all_reduce", gpus, 8 << 30)
        assert 115.0 <= row.busbw_gbps <= 130.0  # measured: 127.3 (16), 123.7 (32, 4 GiB)


def test_rows_below_512_kib_are_the_known_gap(real_dir):
    """What the model does not reach yet (module doc): the launch-bound one-server rows below 512 KiB."""
    worst = {}
    for gpus in GPUS:
        errors = [
            abs(model.time_us / measured.time_us - 1.0)
            for measured, model in _rows(real_dir, gpus)
            if measured.size_bytes < 512 * KiB
        ]
        worst[gpus] = max(errors)
    assert worst[1] <= 0.25  # one GPU: a launch and a copy, reproduced
    assert worst[8] > 0.25  # eight GPUs from one thread: 31 us of serial launches, the model 18 us
