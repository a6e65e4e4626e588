"""Tiny synthetic PyTorch ET and Kineto documents for the PyTorch converter tests.

The layouts copy what torch 2.x writes (see ../shared/real/pytorch/torch-cpu-gloo):
ET nodes with ``ctrl_deps`` = parent id and an ``attrs`` list; Kineto
``traceEvents`` with ``X`` events in microseconds.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def tensor(tid: int, storage: int, numel: int, elem: int = 4, device: str = "cpu") -> list:
    return [tid, storage, 0, numel, elem, device]


def node(
    nid: int,
    name: str,
    parent: int,
    rf: int,
    *,
    tid: int = 1,
    values: list | None = None,
    shapes: list | None = None,
    types: list | None = None,
    extra: dict | None = None,
) -> dict:
    attrs = [
        {"name": "rf_id", "type": "uint64", "value": rf},
        {"name": "fw_parent", "type": "uint64", "value": 0},
        {"name": "seq_id", "type": "int64", "value": -1},
        {"name": "scope", "type": "uint64", "value": 0},
        {"name": "tid", "type": "uint64", "value": tid},
        {"name": "fw_tid", "type": "uint64", "value": 0},
        {"name": "op_schema", "type": "string", "value": ""},
    ]
    for k, v in (extra or {}).items():
        attrs.append({"name": k, "type": "string" if isinstance(v, str) else "uint64", "value": v})
    values = values or []
    return {
        "id": nid,
        "name": name,
        "ctrl_deps": parent,
        "inputs": {
            "values": values,
            "shapes": shapes if shapes is not None else [[] for _ in values],
            "types": types if types is not None else ["Int" for _ in values],
        },
        "outputs": {"values": [], "shapes": [], "types": []},
        "attrs": attrs,
    }


def roots(tids: tuple[int, ...] = (1,)) -> list[dict]:
    out = [node(1, "[pytorch|profiler|execution_trace|process]", 1, 0, tid=0)]
    for i, t in enumerate(tids):
        out.append(node(2 + i, "[pytorch|profiler|execution_trace|thread]", 1, 0, tid=t))
    return out


def et_doc(nodes: list[dict], schema: str = "1.1.1-chakra.0.0.4") -> dict:
    return {"schema": schema, "pid": 7, "time": "2026-01-01 00:00:00", "start_ts": 0, "finish_ts": 1, "nodes": nodes}


def pg_init(nid: int, parent: int, rf: int, world: int) -> dict:
    value = json.dumps(
        [
            {
                "pg_name": "0",
                "pg_desc": "default_pg",
                "backend_config": "cpu:gloo",
                "ranks": [],
                "group_size": world,
                "group_count": 1,
            }
        ]
    )
    return node(nid, "## process_group:init ##", parent, rf, values=[value], shapes=[[]], types=["String"])


def mlp_et() -> dict:
    """Main thread: ProfilerStep#1 > {aten::linear > {aten::t, aten::addmm}, aten::relu}; rf 1..5."""
    return et_doc(
        roots()
        + [
            node(10, "ProfilerStep#1", 2, 1),
            node(11, "aten::linear", 10, 2),
            node(12, "aten::t", 11, 3),
            node(13, "aten::addmm", 11, 4),
            node(14, "aten::relu", 10, 5),
        ]
    )


def cpu(
    name: str,
    ts: float,
    dur: float,
    *,
    rf: int | None = None,
    ext: int | None = None,
    tid: int = 100,
    pid: int = 100,
    cat: str = "cpu_op",
) -> dict:
    args: dict[str, Any] = {}
    if ext is not None:
        args["External id"] = ext
    if rf is not None:
        args["Record function id"] = rf
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def mlp_kineto(rf_base: int = 0, with_rf: bool = True) -> dict:
    """Kineto events matching :func:`mlp_et`: step [0,100), linear [10,60) > t [12,20), addmm [25,55); relu [70,90)."""

    def rf(k: int) -> int | None:
        return k + rf_base if with_rf else None

    events = [
        cpu("ProfilerStep#1", 0, 100, rf=rf(1), ext=1, cat="user_annotation"),
        cpu("aten::linear", 10, 50, rf=rf(2), ext=2),
        cpu("aten::t", 12, 8, rf=rf(3), ext=3),
        cpu("aten::addmm", 25, 30, rf=rf(4), ext=4),
        cpu("aten::relu", 70, 20, rf=rf(5), ext=5),
    ]
    return kineto_doc(events)


def kineto_doc(events: list[dict], *, rank: int | None = 0, world: int = 1) -> dict:
    doc: dict[str, Any] = {"schemaVersion": 1, "traceEvents": events}
    if rank is not None:
        doc["distributedInfo"] = {"backend": "gloo", "rank": rank, "world_size": world}
    return doc


def write(path: Path, doc: Any) -> Path:
    path.write_text(json.dumps(doc))
    return path
