"""The NCCL-like model on the azure-nd-a100-v4 preset against every nccl-tests all_reduce row of that cluster.

Data: ``../shared/real/nccl-tests/echo-azure-nd-a100-v4/nccl_<GPUs>.log`` (Echo, NetX-lab, MIT; README there):
1, 2, 4, 8 GPUs of one server (one process drives the GPUs, ``-g N``: ``gpus_per_process`` from the log header)
and 16, 32 GPUs on 2 and 4 servers (one MPI process per GPU), out-of-place time column.  Issue 30 "Must show":
within 10 % at >= 1 MiB, within 25 % below.

Met: every row of all six logs, 8 B to 16 GiB, except one: nccl_32.log's 2 KiB row (146.7 us between 53.0 us at
1 KiB and 59.0 us at 4 KiB: a glitch of that run, not a regime), which is left out and named here.  The fitted
constants and their reasons are in replayer/presets/azure-nd-a100-v4.toml.
"""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from tracekit.replayer.orchestration.bench_coll import model_point, read_nccl_tests
from tracekit.replayer.simulation.specs import load_spec

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


#: the one row left out (module doc): (GPUs, size)
GLITCH = (32, 2 * KiB)


@pytest.mark.parametrize("gpus", GPUS)
def test_every_all_reduce_row_is_within_the_issue_tolerance(real_dir, gpus):
    checked = 0
    for measured, model in _rows(real_dir, gpus):
        if (gpus, measured.size_bytes) == GLITCH:
            continue
        tolerance = 0.10 if measured.size_bytes >= MiB else 0.25
        error = model.time_us / measured.time_us - 1.0
        assert abs(error) <= tolerance, (
            f"{gpus} GPUs, {measured.size_bytes:,} B: model {model.time_us:.1f} us ({model.algorithm}) vs "
            f"measured {measured.time_us:.1f} us: {error:+.1%}"
        )
        checked += 1
    # every size of the log: 8 B - 1 GiB on one server, 1 KiB - 16 GiB / 4 GiB on 2 / 4 servers
    assert checked == {1: 28, 2: 28, 4: 28, 8: 28, 16: 25, 32: 22}[gpus]


def test_the_table_covers_the_issue():
    """The multi-server ceiling is the measured 124-128 GB/s (within 5 %), not NCCL's 188, for any server count."""
    spec = load_spec("azure-nd-a100-v4")
    for gpus in (16, 32, 64, 128):
        row = model_point(replace(spec.fitted(gpus), collective_model="nccl"), "all_reduce", gpus, 8 << 30)
        assert 121.0 <= row.busbw_gbps <= 134.0  # measured: 127.3 (16 GPUs, 8 GiB), 123.7 (32, 4 GiB)
