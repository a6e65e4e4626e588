"""`convert text` equals Chakra's own text converter node for node, on every real text workload.

The reference: ``chakra_converter Text --input F --output P --num-npus N --num-passes 1`` (mlc-chakra 1.0.0 from
the package index, tests/reference_tools.py), decoded with Chakra's own ``protolib``.  Compared per rank:
node names, types, ``duration_micros``, ``comm_type``, ``comm_size`` and data/control dependencies.  Chakra numbers
node ids on across ranks (rank 1 starts where rank 0 ended) and tracekit restarts them per rank, so dependencies
are compared as positions in the rank's file.  tracekit adds a ``process_group:init`` METADATA node to hybrid
workloads (its model/data groups; Chakra puts every collective on all ranks): it is left out of the comparison,
and so are ``pg_name`` and ``is_cpu_op``, which Chakra does not write.
"""

from __future__ import annotations

import pytest

from reference_tools import chakra_decode, chakra_script
from tracekit.converters.text_workload import convert_text_workload
from tracekit.io import read_traceset, write_traceset
from tracekit.model import NodeType

RANKS = 4
CHAKRA_TEXT = [
    "Resnet50_DataParallel",
    "MLP_ModelParallel",
    "MLP_HybridParallel_Data_Model",
    "MLP_HybridParallel_Model_Data",
    "DLRM_HybridParallel",
]


def chakra_text_convert(workload, prefix, ranks: int) -> list[list]:
    """Run Chakra's text converter and decode its files with Chakra's protolib (rows as in :func:`tracekit_rows`)."""
    prefix.parent.mkdir(parents=True, exist_ok=True)
    log = prefix.parent / "chakra_converter.log"
    args = ["--input", workload, "--output", prefix, "--num-npus", str(ranks), "--num-passes", "1"]
    proc = chakra_script("chakra_converter", "--log-filename", log, "Text", *args)
    assert proc.returncode == 0, proc.stderr[-800:]
    out = []
    for _, nodes in chakra_decode(*(f"{prefix}.{r}.et" for r in range(ranks))):
        pos = {row[0]: i for i, row in enumerate(nodes)}
        rows = []
        for _id, name, kind, data, ctrl, _start, duration, _in, _out, attrs in nodes:
            comm = dict(attrs)
            rows.append(
                [name, kind, duration, comm.get("comm_type"), comm.get("comm_size"),
                 sorted(pos[d] for d in data), sorted(pos[d] for d in ctrl)]
            )  # fmt: skip
        out.append(rows)
    return out


def tracekit_rows(prefix) -> list[list]:
    out = []
    for trace in read_traceset(prefix):
        nodes = [n for n in trace.nodes if n.type != NodeType.METADATA_NODE]
        pos = {n.id: i for i, n in enumerate(nodes)}
        rows = []
        for n in nodes:
            ctype = int(n.comm_type) if n.comm_type is not None else None
            rows.append(
                [
                    n.name,
                    int(n.type),
                    n.duration_ns // 1000,
                    ctype,
                    n.comm_bytes,
                    sorted(pos[d] for d in n.data_deps),
                    sorted(pos[d] for d in n.ctrl_deps),
                ]
            )
        out.append(rows)
    return out


@pytest.mark.parametrize("name", CHAKRA_TEXT)
def test_convert_text_equals_chakra_text_converter(real_dir, tmp_path, name):
    src = real_dir / "text" / f"{name}.txt"
    reference = chakra_text_convert(src, tmp_path / "chakra" / name, RANKS)
    tp = 2 if name.startswith("MLP_Hybrid") else None
    write_traceset(convert_text_workload(src, RANKS, tp=tp), tmp_path / "tk" / name)
    ours = tracekit_rows(tmp_path / "tk" / name)
    assert len(ours) == len(reference) == RANKS
    for rank in range(RANKS):
        assert len(ours[rank]) == len(reference[rank]), f"rank {rank}: node count"
        for i, (a, b) in enumerate(zip(ours[rank], reference[rank])):
            assert a == b, f"rank {rank} node #{i}: tracekit {a} != Chakra {b}"


def test_resnet_matches_the_published_figures(real_dir, tmp_path):
    # shared/real/README.md: Resnet50 DATA, one pass: 215 nodes per rank whose durations sum to 1,082,450 (us)
    src = real_dir / "text" / "Resnet50_DataParallel.txt"
    reference = chakra_text_convert(src, tmp_path / "r", 1)
    assert len(reference[0]) == 215 and sum(row[2] for row in reference[0]) == 1_082_450
