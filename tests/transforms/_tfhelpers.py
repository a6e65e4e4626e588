"""Shared helpers for transform tests: small hand-built traces, generated LLM jobs, and replay with a skip."""

from __future__ import annotations

import pytest

from tracekit.model import Attr, CollectiveType, ExecutionTrace, Node, NodeType
from tracekit.sets.traceset import TraceSet


def comp(
    node_id: int,
    deps=(),
    duration_ns: int = 0,
    *,
    name: str = "k",
    cpu: bool = False,
    stream: int | None = None,
    num_ops: int | None = None,
    tensor_bytes: int | None = None,
    ctrl=(),
) -> Node:
    attrs = [Attr("is_cpu_op", cpu, "bool_val")]
    if stream is not None:
        attrs.append(Attr("stream", stream, "int64_val"))
    if num_ops is not None:
        attrs.append(Attr("num_ops", num_ops, "int64_val"))
    if tensor_bytes is not None:
        attrs.append(Attr("tensor_size", tensor_bytes, "uint64_val"))
    return Node(node_id, name, NodeType.COMP_NODE, list(deps), list(ctrl), 0, duration_ns, attrs=attrs)


def coll(node_id: int, deps=(), comm_bytes: int = 1 << 20, ctype=CollectiveType.ALL_REDUCE, pg: str = "0") -> Node:
    return Node(
        node_id,
        "allreduce",
        NodeType.COMM_COLL_NODE,
        list(deps),
        attrs=[
            Attr("is_cpu_op", False, "bool_val"),
            Attr("comm_type", int(ctype), "int64_val"),
            Attr("comm_size", comm_bytes, "int64_val"),
            Attr("pg_name", pg, "string_val"),
        ],
    )


def one_rank(nodes) -> TraceSet:
    return TraceSet([ExecutionTrace(nodes)])


def replay_ns(ts, spec="dgx-a100", **options) -> float:
    """Replayed iteration time; skips while the replayer's ``replay`` is not written."""
    replayer = pytest.importorskip("tracekit.replayer", reason="tracekit.replayer is not installed yet")
    if not hasattr(replayer, "replay"):
        pytest.skip("tracekit.replayer.replay does not exist yet")
    opts = replayer.ReplayOptions(**options) if options else None
    return replayer.replay(ts, spec, options=opts).iteration_time_ns


def llm():
    """``(LLMConfig, ModelSpec, ParallelSpec, generate_llm)``; skips while the LLM generator is absent."""
    cfg = pytest.importorskip(
        "tracekit.workloads.config", reason="the LLM generator (tracekit.converters.generators) is not written yet"
    )
    gen = pytest.importorskip("tracekit.converters.generators.llm")
    return cfg.LLMConfig, cfg.ModelSpec, cfg.ParallelSpec, gen.generate_llm


@pytest.fixture(scope="module")
def class_set(tmp_path_factory):
    """The job of ``columnar_cases.generated_llm`` (tp 2, pp 2, dp 2, ZeRO 1) written as rank classes: two, one
    per pipeline stage (shared by the class-set transform tests)."""
    llm = pytest.importorskip("tracekit.converters.generators.llm")
    from columnar_cases import llm_config

    from tracekit.sets.classset import read_class_set

    manifest = llm.write_llm(llm_config(), tmp_path_factory.mktemp("cs") / "job", classes=True)[0]
    return read_class_set(manifest)


def convert_pytorch(et_paths, kineto_paths=None, **kw):
    mod = pytest.importorskip(
        "tracekit.converters.pytorch", reason="the PyTorch converter (tracekit.converters.pytorch) is not written yet"
    )
    return mod.convert_pytorch(et_paths, kineto_paths, executor="serial", **kw)
