"""Properties (hypothesis): random DAGs round-trip through .et and JSON; validation finds injected cycles."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tracekit.io import encode_trace, trace_from_bytes
from tracekit.wire.jsonform import dumps_trace, loads_trace
from tracekit.model import Attr, ExecutionTrace, Node, NodeType
from tracekit.checks.validate import validate_trace
from hypothesis_profiles import examples

attr_values = st.one_of(
    st.tuples(st.just("int64_val"), st.integers(-(2**63), 2**63 - 1)),
    st.tuples(st.just("uint64_val"), st.integers(0, 2**64 - 1)),
    st.tuples(st.just("int32_val"), st.integers(-(2**31), 2**31 - 1)),
    st.tuples(st.just("bool_val"), st.booleans()),
    st.tuples(st.just("string_val"), st.text(max_size=8)),
    st.tuples(st.just("double_val"), st.floats(allow_nan=False)),
    st.tuples(st.just("int64_list"), st.lists(st.integers(-(2**63), 2**63 - 1), max_size=3)),
)


@st.composite
def dags(draw, max_nodes: int = 40):
    n = draw(st.integers(1, max_nodes))
    ids = draw(st.lists(st.integers(0, 2**40), min_size=n, max_size=n, unique=True))
    nodes = []
    for i, nid in enumerate(ids):
        deps = draw(st.lists(st.sampled_from(ids[:i]), max_size=4, unique=True)) if i else []
        ctrl = draw(st.lists(st.sampled_from(ids[:i]), max_size=1)) if i else []
        attrs = [Attr(f"a{k}", v, kind) for k, (kind, v) in enumerate(draw(st.lists(attr_values, max_size=3)))]
        nodes.append(
            Node(
                id=nid,
                name=draw(st.text(max_size=6)),
                type=draw(st.sampled_from(list(NodeType)[1:])),
                data_deps=deps,
                ctrl_deps=ctrl,
                duration_ns=draw(st.integers(0, 10**12)),
                start_time_ns=draw(st.integers(0, 10**15)),
                attrs=attrs,
            )
        )
    return nodes


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dags())
def test_random_dag_roundtrips_through_et_and_json(nodes):
    trace = ExecutionTrace(nodes, rank=0)
    data = encode_trace(trace)
    back = trace_from_bytes(data)
    assert list(back.nodes) == nodes
    assert encode_trace(back) == data
    via_json = loads_trace(dumps_trace(back))
    assert list(via_json.nodes) == nodes
    assert encode_trace(via_json) == data
    cols = trace_from_bytes(data).columns()  # the columnar decoder agrees with the node decoder
    assert cols.ids.tolist() == [n.id for n in nodes]
    assert cols.duration_ns.tolist() == [n.duration_ns for n in nodes]
    assert cols.names == [n.name for n in nodes]
    assert cols.data_ids.tolist() == [d for n in nodes for d in n.data_deps]


@settings(max_examples=examples(150), deadline=None)
@given(dags(max_nodes=30), st.data())
def test_validation_finds_every_injected_cycle(nodes, data):
    assert not [i for i in validate_trace(ExecutionTrace(nodes)).issues if i.check == "cycle"]
    if len(nodes) < 2:
        return
    # add an edge from an earlier node back to a later one that (transitively) depends on it
    i = data.draw(st.integers(0, len(nodes) - 2))
    j = data.draw(st.integers(i + 1, len(nodes) - 1))
    if nodes[i].id not in nodes[j].data_deps:
        nodes[j] = nodes[j].replace(data_deps=nodes[j].data_deps + (nodes[i].id,))
    nodes[i] = nodes[i].replace(data_deps=nodes[i].data_deps + (nodes[j].id,))  # i waits for j, j for i: a cycle
    issues = [x for x in validate_trace(ExecutionTrace(nodes)).issues if x.check == "cycle"]
    assert len(issues) == 1
    assert "dependency cycle" in issues[0].message
    named = {
        int(tok)
        for tok in issues[0].message.split(": ", 1)[1].replace("->", " ").split()
        if tok.isascii() and tok.isdigit()
    }
    assert nodes[j].id in named or nodes[i].id in named


@settings(max_examples=examples(200), deadline=None)
@given(st.data())
def test_corrupted_real_file_gives_a_format_error_or_a_trace_never_a_crash(data):
    """Flip random bytes of a real ASTRA-sim trace: reading and validating either works or raises TracekitError."""
    from pathlib import Path

    from tracekit.errors import TracekitError

    raw = bytearray((Path(__file__).parents[2] / "sample_traces" / "chakra" / "custom_allreduce.0.et").read_bytes())
    for _ in range(data.draw(st.integers(1, 12))):
        raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    try:
        trace = trace_from_bytes(bytes(raw), path="fuzz.0.et", rank=0)
        validate_trace(trace)
        trace.columns().attr("comm_size")
        _ = trace.columns().names
    except TracekitError as exc:
        assert str(exc).startswith("fuzz.0.et: rank 0")
