"""Scaling one node's compute: the rule the node-wise and the column-wise scale transforms share
(:mod:`tracekit.transforms.scale`, :mod:`tracekit.transforms.colscale`, :mod:`tracekit.transforms.colretarget`)."""

from __future__ import annotations

from tracekit.model.attrs import NUM_OPS, TENSOR_SIZE
from tracekit.model import Node, NodeType
from tracekit.transforms.base import scale_int

_TIMED = frozenset({NodeType.COMP_NODE, NodeType.MEM_LOAD_NODE, NodeType.MEM_STORE_NODE})  # nodes with a duration


def scaled_compute(node: Node, k: float) -> Node:
    """A copy of ``node`` whose compute costs ``k`` times as much.

    The measured duration is scaled when there is one; otherwise the roofline
    inputs (``num_ops`` FLOPs and ``tensor_size`` bytes) are, so a roofline
    replay scales the same way.
    """
    if node.duration_ns > 0:
        return node.replace(duration_ns=scale_int(node.duration_ns, k))
    c = node.replace()
    for key in (NUM_OPS, TENSOR_SIZE):
        v = key.of(node)
        if v is not None and v > 0:
            c = c.with_attr(key, scale_int(v, k))
    return c
