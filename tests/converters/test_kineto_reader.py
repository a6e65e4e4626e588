"""Kineto reader: category normalization, exact integer-ns times, ids, metadata, clear errors."""

from __future__ import annotations

import gzip
import json
import re

import orjson
import pytest

from tracekit.converters.pytorch.kineto_reader import (
    normalize_category,
    parse_kineto,
    read_kineto,
    us_to_ns,
)
from tracekit.errors import TraceFormatError


def _write(tmp_path, doc, name="k.json", raw=None):
    p = tmp_path / name
    data = raw if raw is not None else orjson.dumps(doc)
    p.write_bytes(gzip.compress(data) if name.endswith(".gz") else data)
    return p


@pytest.mark.parametrize(
    "value, ns",
    [
        (3, 3000),
        (1234.567, 1234567),
        (0.001, 1),
        (4458676522690.655, 4458676522690655),
        ("1712195495519689.047", 1712195495519689047),
        (2.5e3, 2500000),
        ("0.0005", 1),
        ("-1.5", -1500),
        (1e-05, 0),
    ],
)
def test_us_to_ns_is_exact(value, ns):
    assert us_to_ns(value) == ns


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), "NaN", None, True, "12a"])
def test_us_to_ns_rejects(bad):
    with pytest.raises(ValueError):
        us_to_ns(bad)


def test_old_and_new_category_names_normalize():
    assert [normalize_category(c) for c in ("Kernel", "Runtime", "Operator", "Memcpy", "Memset", "Driver")] == [
        "kernel",
        "cuda_runtime",
        "cpu_op",
        "gpu_memcpy",
        "gpu_memset",
        "cuda_driver",
    ]
    assert normalize_category("cuda_sync") == "cuda_sync"
    assert normalize_category(None) == ""


def test_old_layout_without_schema_version(tmp_path):
    doc = {
        "traceEvents": [
            {
                "ph": "X",
                "cat": "Runtime",
                "name": "cudaLaunchKernel",
                "pid": 1,
                "tid": 1,
                "ts": 10,
                "dur": 5,
                "args": {"correlation": 7, "external id": 3},
            },
            {
                "ph": "X",
                "cat": "Kernel",
                "name": "k",
                "pid": 0,
                "tid": 7,
                "ts": 20,
                "dur": 2,
                "args": {"correlation": 7, "external id": 3, "stream": 7, "device": 0},
            },
            {"ph": "s", "id": 7, "pid": 1, "tid": 1, "ts": 10, "cat": "async_gpu", "name": "x"},
        ],
        "distributedInfo": {"rank": 1},
    }
    kt = read_kineto(_write(tmp_path, doc, "old.json.gz"))
    assert kt.schema_version is None and kt.rank == 1
    launch, kernel = kt.events
    assert (launch.category, kernel.category) == ("cuda_runtime", "kernel")
    assert (kernel.correlation, kernel.external_id, kernel.stream, kernel.device) == (7, 3, 7, 0)
    assert (kernel.start_ns, kernel.duration_ns, kernel.end_ns) == (20000, 2000, 22000)
    assert len(kt.flows) == 1 and kt.flows[0].ts_ns == 10000


def test_new_layout_metadata_in_any_order_and_distributed_info(tmp_path):
    events = [
        {
            "ph": "X",
            "cat": "cpu_op",
            "name": "aten::mm",
            "pid": 5,
            "tid": 6,
            "ts": 1.5,
            "dur": 0.25,
            "args": {"External id": 9, "Record function id": 4},
        },
        {"ph": "M", "name": "thread_name", "pid": 5, "tid": 6, "args": {"name": "main"}},
        {"ph": "i", "name": "instant", "pid": 5, "tid": 6, "ts": 2},
    ]
    info = {
        "backend": "nccl",
        "rank": 3,
        "world_size": 4,
        "pg_config": [
            {
                "pg_name": "0",
                "pg_desc": "default_pg",
                "backend_config": "cuda:nccl",
                "pg_size": 4,
                "ranks": [0, 1, 2, 3],
            }
        ],
    }
    # traceEvents first, metadata after (and the other way round): same result
    for doc in (
        {"traceEvents": events, "distributedInfo": info, "schemaVersion": 1},
        {"schemaVersion": 1, "distributedInfo": info, "traceEvents": events},
    ):
        kt = parse_kineto(doc)
        assert (kt.rank, kt.world_size, kt.backend, kt.schema_version) == (3, 4, "nccl", 1)
        assert kt.process_groups[0].ranks == (0, 1, 2, 3) and kt.process_groups[0].pg_size == 4
        (op,) = kt.events
        assert (op.start_ns, op.duration_ns, op.external_id, op.rf_id) == (1500, 250, 9, 4)
        assert kt.thread_names == {(5, 6): "main"}
        assert kt.n_raw_events == 3


def test_epoch_float_timestamps_keep_their_nanoseconds(tmp_path):
    # 1712195495519689.047 us does not fit a double at ns precision; the text does.
    raw = (
        b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, '
        b'"ts": 1712195495519689.047, "dur": 63.813}, {"ph": "X", "cat": "cpu_op", "name": "b", '
        b'"pid": 1, "tid": 1, "ts": 1712195495519689.048, "dur": 1}]}'
    )
    assert float("1712195495519689.047") == float("1712195495519689.048")  # why this matters
    kt = read_kineto(_write(tmp_path, None, "epoch.json", raw=raw))
    assert [e.start_ns for e in kt.events] == [1712195495519689047, 1712195495519689048]
    assert kt.events[0].duration_ns == 63813


def test_zero_events_is_a_clear_error(tmp_path):
    p = _write(tmp_path, {"schemaVersion": 1, "traceEvents": []})
    with pytest.raises(TraceFormatError, match=r"k\.json: Kineto trace has zero events"):
        read_kineto(p)


def test_nan_timestamp_names_event(tmp_path):
    p = _write(
        tmp_path,
        None,
        raw=b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::add", '
        b'"pid": 1, "tid": 1, "ts": "NaN", "dur": 1}]}',
    )
    with pytest.raises(TraceFormatError, match=r"traceEvents\[0\] \('aten::add'\): bad timestamp.*'NaN'"):
        read_kineto(p)


def test_bare_nan_token_is_rejected(tmp_path):
    p = _write(tmp_path, None, raw=b'{"traceEvents": [{"ph": "X", "name": "a", "ts": NaN, "dur": 1}]}')
    with pytest.raises(TraceFormatError, match="NaN"):
        read_kineto(p)


def test_not_kineto(tmp_path):
    with pytest.raises(TraceFormatError, match="no 'traceEvents' key"):
        read_kineto(_write(tmp_path, {"nodes": []}))
    with pytest.raises(TraceFormatError, match="cannot read Kineto file"):
        read_kineto(tmp_path / "missing.json")


def test_negative_duration(tmp_path):
    with pytest.raises(TraceFormatError, match="negative duration"):
        parse_kineto({"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": -2}]})


@pytest.mark.parametrize("flow_id", [None, [5], True])
def test_flow_without_a_usable_id_names_event(flow_id):
    """A flow's id pairs its start and finish: a missing one (paired with every other id-less flow) or a list
    (unhashable: a crash when fwdbwd flows are linked) is bad input, named with its index."""
    flow = {"ph": "s", "pid": 1, "tid": 1, "ts": 1, "cat": "fwdbwd", "name": "fwdbwd"}
    if flow_id is not None:
        flow["id"] = flow_id
    doc = {"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 1}, flow]}
    with pytest.raises(
        TraceFormatError, match=r"traceEvents\[1\] \(flow, ph 's'\): 'id' must be .*got " + re.escape(repr(flow_id))
    ):
        parse_kineto(doc)


def test_bare_list_document():
    kt = parse_kineto([{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 1}])
    assert len(kt.events) == 1 and kt.rank is None


def test_real_float_ns_file_matches_decimal_text(real_dir):
    """Every ts of hta-ns_resolution_trace equals its decimal text in ns (the stdlib parse as reference)."""
    path = real_dir / "kineto/hta-ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
    kt = read_kineto(path)
    ref = json.loads(gzip.decompress(path.read_bytes()), parse_float=str)
    texts = [e["ts"] for e in ref["traceEvents"] if e.get("ph") == "X"]
    assert len(texts) == len(kt.events) == 45420
    for e, text in zip(kt.events, texts):
        whole, _, frac = text.partition(".")
        assert e.start_ns == int(whole) * 1000 + int((frac + "000")[:3])
