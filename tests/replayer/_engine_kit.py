"""Small builders shared by the engine tests: hardware specs and hand-made trace sets."""

from __future__ import annotations

import signal
from contextlib import contextmanager
import os
from typing import Iterator, Sequence

from tracekit.model.groups import pg_init_node
from tracekit.model import Attr, CollectiveType, ExecutionTrace, Node, NodeType
from tracekit.replayer.simulation.hardware import HardwareSpec
from tracekit.replayer.simulation.specs import spec_from_dict
from tracekit.sets.traceset import TraceSet


def make_spec(
    dims: Sequence[dict], *, model: str = "alpha_beta", fit: bool = True, astra: dict | None = None, name: str = "test"
) -> HardwareSpec:
    """A spec with the given network dimensions (dicts of NetworkDim keys; name/topology defaulted)."""
    network = []
    for i, d in enumerate(dims):
        row = {"name": f"d{i}", "topology": "ring", **d}
        network.append(row)
    data = {
        "name": name,
        "fit_to_world_size": fit,
        "device": {"name": "dev", "peak_flops_per_s": {"fp32": 1e12}, "mem_bandwidth_gbps": 1000.0},
        "collectives": {"model": model},
        "network": network,
    }
    if astra is not None:
        data["astra"] = astra
    return spec_from_dict(data)


def one_dim(
    size: int, bandwidth_gbps: float, latency_ns: float, topology: str = "ring", **algorithms: str
) -> HardwareSpec:
    dim = {"topology": topology, "size": size, "bandwidth_gbps": bandwidth_gbps, "latency_ns": latency_ns}
    if algorithms:
        dim["algorithms"] = algorithms
    return make_spec([dim], fit=False)


def comp(
    node_id: int,
    duration_ns: int,
    deps: Sequence[int] = (),
    *,
    stream: int | None = None,
    cpu: bool = False,
    tid: int | None = None,
    name: str | None = None,
) -> Node:
    attrs = [Attr("is_cpu_op", cpu, "bool_val")]
    if stream is not None:
        attrs.append(Attr("stream", stream, "int64_val"))
    if tid is not None:
        attrs.append(Attr("tid", tid, "int64_val"))
    return Node(
        node_id,
        name or f"comp{node_id}",
        NodeType.COMP_NODE,
        data_deps=list(deps),
        duration_ns=duration_ns,
        attrs=attrs,
    )


def coll(
    node_id: int,
    ctype: CollectiveType,
    nbytes: int,
    deps: Sequence[int] = (),
    *,
    pg: str = "0",
    stream: int | None = None,
    duration_ns: int = 0,
) -> Node:
    attrs = [
        Attr("is_cpu_op", False, "bool_val"),
        Attr("comm_type", int(ctype), "int64_val"),
        Attr("comm_size", nbytes, "int64_val"),
        Attr("pg_name", pg, "string_val"),
    ]
    if stream is not None:
        attrs.append(Attr("stream", stream, "int64_val"))
    return Node(
        node_id,
        f"{ctype.name.lower()}{node_id}",
        NodeType.COMM_COLL_NODE,
        data_deps=list(deps),
        duration_ns=duration_ns,
        attrs=attrs,
    )


def p2p(node_id: int, send: bool, peer: int, rank: int, nbytes: int, deps: Sequence[int] = (), *, tag: int = 0) -> Node:
    src, dst = (rank, peer) if send else (peer, rank)
    attrs = [
        Attr("comm_src", src, "int32_val"),
        Attr("comm_dst", dst, "int32_val"),
        Attr("comm_tag", tag, "int32_val"),
        Attr("comm_size", nbytes, "int64_val"),
    ]
    return Node(
        node_id,
        f"{'send' if send else 'recv'}{node_id}",
        NodeType.COMM_SEND_NODE if send else NodeType.COMM_RECV_NODE,
        data_deps=list(deps),
        attrs=attrs,
    )


def meta(node_id: int, deps: Sequence[int] = ()) -> Node:
    return Node(node_id, f"meta{node_id}", NodeType.METADATA_NODE, data_deps=list(deps))


def traceset(per_rank: Sequence[Sequence[Node]], groups: dict[str, Sequence[int]] | None = None) -> TraceSet:
    """A trace set from per-rank node lists; ``groups`` are declared in a process_group:init node too."""
    traces = {}
    for rank, nodes in enumerate(per_rank):
        nodes = list(nodes)
        if groups:
            top = max((n.id for n in nodes), default=-1) + 1
            nodes = [pg_init_node(top, {k: tuple(v) for k, v in groups.items()})] + nodes
        traces[rank] = ExecutionTrace(nodes, rank=rank)
    return TraceSet(traces)


@contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Fail with TimeoutError if the block runs longer than ``seconds`` (SIGALRM; main thread only)."""

    def _expired(signum, frame):  # pragma: no cover - only on a hang
        raise TimeoutError(f"did not finish within {seconds} s (hang)")

    old = signal.signal(signal.SIGALRM, _expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def write_small_llm(folder: os.PathLike[str] | str) -> str:
    """gpt3-1.3b cut to 2 layers, tp 2 x pp 2 x dp 2 (8 ranks: tensor-parallel all-reduces, pipeline send/recv,
    data-parallel gradient all-reduces), 8 micro-batches of 1, written as rank files on an H100-like roofline
    (70 % of 989 TFLOP/s, 80 % of 3.35 TB/s) under ``folder``; the prefix."""
    from dataclasses import replace
    from pathlib import Path

    from tracekit.converters.generators import LLMConfig, ParallelSpec, Roofline, llm_preset
    from tracekit.converters.generators.llm import write_llm

    model, _ = llm_preset("gpt3-1.3b")
    config = LLMConfig(
        replace(model, num_layers=2), ParallelSpec(dp=2, tp=2, pp=2), global_batch_size=8, micro_batch_size=1
    )
    prefix = Path(folder) / "job"
    write_llm(config, prefix, Roofline(989e12 * 0.7, 3.35e12 * 0.8))
    return str(prefix)
