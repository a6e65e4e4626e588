"""The one collective/p2p matcher (tracekit/sets/rendezvous.py): reading order, missing values, pairing."""

from __future__ import annotations

from tracekit.model import Attr, ExecutionTrace, Node, NodeType
from tracekit.sets.rendezvous import NOT_AN_INT, collective_instances, comm_table, group_order, p2p_pairs
from tracekit.checks.validate import rank_collectives


def _coll(node_id: int, deps: list[int], pg: str, ctype: int | None = None, nbytes: int | None = None) -> Node:
    attrs = [Attr("pg_name", pg, "string_val")]
    if ctype is not None:
        attrs.append(Attr("comm_type", ctype, "int64_val"))
    if nbytes is not None:
        attrs.append(Attr("comm_size", nbytes, "int64_val"))
    return Node(node_id, f"c{node_id}", NodeType.COMM_COLL_NODE, data_deps=deps, attrs=attrs)


def _p2p(node_id: int, send: bool, peer: int | None, tag: int | None, nbytes: int, deps: list[int]) -> Node:
    attrs = [Attr("comm_size", nbytes, "int64_val")]
    if peer is not None:
        attrs.append(Attr("comm_dst" if send else "comm_src", peer, "int32_val"))
    if tag is not None:
        attrs.append(Attr("comm_tag", tag, "int32_val"))
    return Node(
        node_id,
        f"p{node_id}",
        NodeType.COMM_SEND_NODE if send else NodeType.COMM_RECV_NODE,
        data_deps=deps,
        attrs=attrs,
    )


def test_issue_order_is_the_dependency_order_not_the_file_order():
    # file order: c3 (after c2), c2 (after c1), c1; so the rank issues c1, c2, c3 (positions 2, 1, 0)
    trace = ExecutionTrace([_coll(3, [2], "g", 2, 64), _coll(2, [1], "h", 0, 32), _coll(1, [], "g")], rank=0)
    table = comm_table(trace)
    assert table.order == [2, 1, 0]
    assert table.coll == {"g": [2, 0], "h": [1]}
    # a missing comm_type / comm_size reads as ALL_REDUCE (0) and 0 bytes, as ASTRA-sim's feeder reads them
    assert table.coll_attr == {2: (0, 0), 1: (0, 32), 0: (2, 64)}
    # validation reads the same table: node ids in issue order per group
    assert rank_collectives(trace) == {"g": [(1, 0, 0), (3, 2, 64)], "h": [(2, 0, 32)]}


def test_p2p_keys_defaults_and_missing_peers():
    trace = ExecutionTrace(
        [
            _p2p(1, True, 3, 7, 100, []),
            _p2p(2, True, 3, None, -5, [1]),
            _p2p(3, False, None, 1, 8, [2]),
            _p2p(4, False, 3, 7, 8, [3]),
        ],
        rank=0,
    )
    table = comm_table(trace)
    assert table.sends == {(3, 7): [0], (3, 0): [1]}  # a missing tag reads as 0
    assert table.recvs == {(-1, 1): [2], (3, 7): [3]}  # a missing peer reads as -1 ...
    assert table.missing_peer == [2]  # ... and is listed
    assert table.p2p_attr == {0: (100, "0"), 1: (0, "0"), 2: (8, "0"), 3: (8, "0")}  # negative size: 0 bytes
    assert table.tag == {0: 7, 1: 0, 2: 1, 3: 7}


def test_a_non_integer_comm_type_is_marked():
    trace = ExecutionTrace(
        [
            Node(
                1,
                "c",
                NodeType.COMM_COLL_NODE,
                attrs=[Attr("comm_type", "x", "string_val"), Attr("comm_size", 4, "int64_val")],
            )
        ],
        rank=0,
    )
    assert comm_table(trace).coll_attr == {0: (NOT_AN_INT, 4)}


def test_collective_instances_pair_the_kth_of_each_member():
    assert list(collective_instances([[5, 6], [7, 8]])) == [(0, (5, 7)), (1, (6, 8))]
    assert list(collective_instances([[5, 6], [7]])) == [(0, (5, 7)), (1, (6, None))]
    assert list(collective_instances([])) == []


def test_p2p_pairs_in_key_then_issue_order():
    sends = {(1, 0, 0): ["s10a", "s10b"], (0, 1, 5): ["s01"]}
    recvs = {(1, 0, 0): ["r10a"], (0, 1, 5): ["r01"], (2, 0, 0): ["r20"]}
    assert list(p2p_pairs(sends, recvs)) == [
        ((0, 1, 5), 0, "s01", "r01"),
        ((1, 0, 0), 0, "s10a", "r10a"),
        ((1, 0, 0), 1, "s10b", None),
        ((2, 0, 0), 0, None, "r20"),
    ]


def test_group_order_puts_short_names_first():
    assert group_order({"10", "2", "b", "0", "ab"}) == ["0", "2", "b", "10", "ab"]
