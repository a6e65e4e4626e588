"""Bad input: one clear line naming file, node and problem; exit code 1 (3 for validate findings); no traceback; no partial output."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tracekit.errors import TraceFormatError
from tracekit.io import encode_trace, frame, read_trace, write_traceset
from tracekit.model import Attr, CollectiveType, ExecutionTrace, Node, NodeType
from tracekit.sets.traceset import TraceSet

from cli_inprocess import run as inprocess_run  # noqa: E402

TRACEKIT = [sys.executable, "-m", "tracekit.cli._main"]


run = inprocess_run  # what a command prints and returns: in-process (tests/cli_inprocess.py)


def run_process(*args: object) -> subprocess.CompletedProcess:
    return subprocess.run([*TRACEKIT, *map(str, args)], capture_output=True, text=True, timeout=60)


def _good_bytes() -> bytes:
    nodes = [Node(id=i, name=f"op{i}", data_deps=[i - 1] if i else [], duration_ns=1000) for i in range(5)]
    return encode_trace(ExecutionTrace(nodes))


def _assert_one_line_error(proc: subprocess.CompletedProcess, *needles: str) -> None:
    assert proc.returncode == 1, proc
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_truncated_inside_a_record(tmp_path):
    data = _good_bytes()
    p = tmp_path / "t.0.et"
    p.write_bytes(data[:-3])
    with pytest.raises(TraceFormatError) as exc:
        read_trace(p)
    assert exc.value.byte_offset is not None
    out = tmp_path / "o.json"
    proc = run("dump", p, "-o", out)
    _assert_one_line_error(proc, str(p), "runs past the end of the file", "at byte")
    assert not out.exists()
    assert list(tmp_path.iterdir()) == [p]  # no temp files left behind


def test_length_prefix_larger_than_file(tmp_path):
    p = tmp_path / "t.0.et"
    p.write_bytes(frame(b"") + b"\xff\xff\x03" + b"\x08\x01")
    _assert_one_line_error(run("info", p), str(p), "record of 65535 bytes", "at byte 1")


def test_garbage_bytes(tmp_path):
    p = tmp_path / "t.0.et"
    p.write_bytes(frame(b"") + frame(b"\xff\xff\xff\xff\xff\xff"))
    _assert_one_line_error(run("info", p), str(p), "undecodable")


def test_garbage_after_good_nodes_names_last_good_node(tmp_path):
    p = tmp_path / "t.0.et"
    p.write_bytes(_good_bytes() + frame(b"\x0a\x05ab"))
    proc = run("validate", p)
    _assert_one_line_error(proc, "undecodable", "after node 4")


def test_empty_file(tmp_path):
    p = tmp_path / "t.0.et"
    p.write_bytes(b"")
    _assert_one_line_error(run("info", p), str(p), "empty file")


def test_zero_length_record(tmp_path):
    p = tmp_path / "t.0.et"
    p.write_bytes(_good_bytes() + b"\x00")
    _assert_one_line_error(run("info", p), str(p), "empty node record")


def _write(tmp_path: Path, nodes: list[Node], name: str = "t.0.et") -> Path:
    p = tmp_path / name
    p.write_bytes(encode_trace(ExecutionTrace(nodes)))
    return p


def test_dependency_on_missing_id(tmp_path):
    p = _write(tmp_path, [Node(id=1), Node(id=412, data_deps=[1, 9999])])
    proc = run("validate", p)
    assert proc.returncode == 3
    assert f"{p}: rank 0: node 412: data dep 9999 does not exist" in proc.stdout


def test_cycle_names_its_nodes(tmp_path):
    p = _write(
        tmp_path,
        [
            Node(id=1, name="a", data_deps=[3]),
            Node(id=2, name="b", data_deps=[1]),
            Node(id=3, name="c", data_deps=[2]),
            Node(id=4, name="d", data_deps=[3]),
        ],
    )
    proc = run("validate", p)
    assert proc.returncode == 3
    assert "[cycle]" in proc.stdout and "1 (a) -> 2 (b) -> 3 (c) -> 1" in proc.stdout


def test_duplicate_ids(tmp_path):
    p = _write(tmp_path, [Node(id=1), Node(id=2), Node(id=2)])
    proc = run("validate", p)
    assert proc.returncode == 3 and "node 2: duplicate node id 2" in proc.stdout


def test_comm_node_without_comm_type_is_a_warning_and_an_unknown_one_an_error(tmp_path):
    p = _write(tmp_path, [Node(id=7, type=NodeType.COMM_COLL_NODE, attrs=[Attr("comm_size", 64)])])
    proc = run("validate", p)
    assert proc.returncode == 0 and "node 7: COMM_COLL node has no comm_type: read as ALL_REDUCE" in proc.stdout
    p = _write(
        tmp_path, [Node(id=7, type=NodeType.COMM_COLL_NODE, attrs=[Attr("comm_size", 64), Attr("comm_type", 42)])]
    )
    proc = run("validate", p)
    assert proc.returncode == 3 and "node 7: unknown comm_type 42" in proc.stdout


def _coll(nid: int, ctype: CollectiveType, size: int) -> Node:
    return Node(
        id=nid,
        type=NodeType.COMM_COLL_NODE,
        attrs=[Attr("comm_type", int(ctype)), Attr("comm_size", size), Attr("pg_name", "0", "string_val")],
    )


def test_mismatched_collectives_across_ranks(tmp_path):
    r0 = ExecutionTrace([_coll(1, CollectiveType.ALL_REDUCE, 1024), _coll(2, CollectiveType.ALL_GATHER, 64)])
    r1 = ExecutionTrace([_coll(1, CollectiveType.ALL_REDUCE, 1024), _coll(2, CollectiveType.ALL_GATHER, 128)])
    write_traceset(TraceSet([r0, r1]), tmp_path / "job")
    proc = run("validate", tmp_path / "job")
    assert proc.returncode == 3
    assert (
        "rank 1: node 2: group '0': collective #1 is ALL_GATHER of 128 bytes here but ALL_GATHER of 64 bytes "
        "on rank 0" in proc.stdout
    )


def test_missing_collective_on_one_rank(tmp_path):
    r0 = ExecutionTrace([_coll(1, CollectiveType.ALL_REDUCE, 1024), _coll(2, CollectiveType.BARRIER, 0)])
    r1 = ExecutionTrace([_coll(1, CollectiveType.ALL_REDUCE, 1024)])
    write_traceset(TraceSet([r0, r1]), tmp_path / "job")
    proc = run("validate", tmp_path / "job")
    assert "rank 0 issues 2 collectives, rank 1 issues 1; first unmatched is #1: BARRIER" in proc.stdout


def test_missing_input_file(tmp_path):
    _assert_one_line_error(run("info", tmp_path / "nope"), "no trace files match")


def test_debug_shows_traceback(tmp_path):
    p = tmp_path / "t.0.et"
    p.write_bytes(b"")
    proc = run_process("--debug", "info", p)  # a traceback on the real stderr
    assert proc.returncode != 0 and "Traceback" in proc.stderr


def test_load_rejects_bad_json_and_writes_nothing(tmp_path):
    j = tmp_path / "t.json"
    j.write_text('{"format": "tracekit.et.json", "nodes": [{"id": 1,}]}')
    out = tmp_path / "t.0.et"
    _assert_one_line_error(run("load", j, "-o", out), str(j), "invalid JSON")
    assert not out.exists()


def test_failed_write_keeps_existing_output(tmp_path):
    """An encoding failure leaves the previous file intact (atomic write)."""
    from tracekit.errors import TracekitError
    from tracekit.io import write_trace

    out = tmp_path / "t.0.et"
    out.write_bytes(b"previous")
    bad = ExecutionTrace([Node(id=1, attrs=[Attr("x", "not an int", "int64_val")])])
    with pytest.raises(TracekitError, match="cannot encode node"):
        write_trace(bad, out)
    assert out.read_bytes() == b"previous"
    assert list(tmp_path.iterdir()) == [out]


def test_partial_job_is_a_warning_naming_missing_ranks(tmp_path):
    from tracekit.model.groups import pg_init_node
    from tracekit.checks.validate import validate_traceset

    r0 = ExecutionTrace([pg_init_node(0, {"0": (0, 1, 2)}), _coll(1, CollectiveType.ALL_REDUCE, 64)])
    ts = TraceSet({0: r0})
    assert ts.world_size == 3 and ts.missing_ranks == (1, 2)
    report = validate_traceset(ts)
    assert report.ok
    (issue,) = report.warnings
    assert issue.check == "rank-count" and "traces for 1 of 3 ranks; no trace for ranks [1, 2]" in issue.message


@pytest.mark.parametrize(
    "doc,message",
    [
        ('{"format":"tracekit.et.json","nodes":null}', "document: nodes must be a list, got None"),
        (
            '{"format":"tracekit.et.json","nodes":[{"id":1,"duration_ns":5000.5}]}',
            "node 1: duration_ns must be an integer from 0 to 2^64-1, got 5000.5",
        ),
        ('{"format":"tracekit.et.json","nodes":[{"id":1,"duration_ns":"5000"}]}', "got '5000'"),
        (
            '{"format":"tracekit.et.json","nodes":[{"id":1,"durration_ns":5}]}',
            "node 1: unknown node keys ['durration_ns']",
        ),
        ('{"format":"tracekit.et.json","format_version":99,"nodes":[]}', "unsupported format_version 99"),
        ('{"format":"tracekit.et.json","nodes":[{"id":-1}]}', "id must be an integer from 0 to 2^64-1, got -1"),
        # found while typing tracekit.wire.jsonform: "rank": true was read as rank True ("wrote ... (rank True, ...)"),
        # -3 as rank -3, and "0" dropped silently
        (
            '{"format":"tracekit.et.json","rank":true,"nodes":[]}',
            "rank must be null or a non-negative integer, got True",
        ),
        ('{"format":"tracekit.et.json","rank":-3,"nodes":[]}', "rank must be null or a non-negative integer, got -3"),
        ('{"format":"tracekit.et.json","rank":"0","nodes":[]}', "rank must be null or a non-negative integer, got '0'"),
        ('{"workload_graph":null}', "workload_graph must be a non-empty list of nodes"),
        ('{"workload_graph":[]}', "workload_graph must be a non-empty list of nodes"),
        ('{"workload_graph":[{"Id":1,"ctrlDeps":3}]}', "node 1: ctrlDeps must be a list of node ids, got 3"),
    ],
)
def test_load_rejects_json_that_is_not_exactly_a_trace(tmp_path, doc, message):
    j = tmp_path / "t.json"
    j.write_text(doc)
    out = tmp_path / "t.0.et"
    _assert_one_line_error(run("load", j, "-o", out), str(j), message)
    assert not out.exists()
