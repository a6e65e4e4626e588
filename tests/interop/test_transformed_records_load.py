"""Records written by the compiled encoders load in Chakra: a batch-encoded trace, transformed on columns.

The input is made by ``tracekit.io.encode_nodes`` (the generators' batch encoder); the transforms run
on encoded records (scale-compute, compact, retarget: re-spliced records, never Node objects) and the
result is written by ``write_traceset`` (one slice per rank).  Chakra's decoder (mlc-chakra from the package
index) must read every node, and read each as tracekit does.
"""

from __future__ import annotations

import numpy as np

from reference_tools import assert_chakra_reads_as_we_do
from tracekit.io import encode_metadata, encode_nodes, read_trace, read_traceset, write_traceset
from tracekit.model import Attr, Metadata
from tracekit.transforms import Compact, Pipeline, Retarget, ScaleCompute

N = 2_000


def _write_input(path) -> None:
    ids = np.arange(N, dtype=np.uint64)
    comm = ids % 2 == 1
    lens = np.where(ids == 0, 0, np.where((ids % 5 == 0) & (ids >= 2), 2, 1))
    ptr = np.concatenate(([0], np.cumsum(lens)))
    deps = np.concatenate([[i - 1, i - 2][: lens[i]] for i in range(N)]).astype(np.uint64)
    attrs = [
        Attr("stream", 7, "int64_val"),
        Attr("is_cpu_op", False, "bool_val"),
        Attr("comm_type", 0, "int64_val"),
        Attr("comm_size", 4096, "int64_val"),
    ]
    codes = np.where(comm[:, None], [2, 3], [0, 1]).ravel()
    body = encode_nodes(
        ids,
        np.where(comm, 7, 4),
        np.arange(N) * 37 % 5000 + 1000,
        names=["aten::mm", "nccl:all_reduce"],
        name_codes=comm.astype(np.int64),
        data_ptr=ptr,
        data_ids=deps,
        attrs=attrs,
        attr_ptr=np.arange(N + 1) * 2,
        attr_codes=codes,
    )
    path.write_bytes(encode_metadata(Metadata("0.0.4")) + body)


def test_columnar_transforms_output_loads_in_chakra(tmp_path):
    src = tmp_path / "mix.0.et"
    _write_input(src)
    assert assert_chakra_reads_as_we_do([src]) == {"mix.0.et": N}
    steps = [ScaleCompute(2), Compact(), Retarget("a100-80gb", "h100-sxm")]
    out = Pipeline(steps).run(read_traceset(str(tmp_path / "mix")), source=str(src))
    trace = out[0]
    assert trace._nodes is None  # still encoded records: the columnar path ran
    (path,) = write_traceset(out, tmp_path / "out")
    n = len(read_trace(path))
    deps = sum(len(node.data_deps) for node in read_trace(path).nodes)
    assert deps == n - 1  # the 2-step dependencies are gone, chains merged: one dependency per node left
    assert assert_chakra_reads_as_we_do([path]) == {path.name: n}
