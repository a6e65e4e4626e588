"""The trace model: :class:`Node`, :class:`Attr`, :class:`Metadata`, one rank's :class:`ExecutionTrace`.

The face of the package (import these names from here): values of the model in :mod:`tracekit.model.node`
(node and collective types, Node, Metadata, limits), attributes and their one rule per value type in
:mod:`tracekit.model.attrs`, the one mutable node form in :mod:`tracekit.model.draft`, the trace in
:mod:`tracekit.model.trace`, its columns and dependency graph in :mod:`tracekit.model.graph`, process groups in
:mod:`tracekit.model.groups`, uneven (all-to-all-v) collectives in :mod:`tracekit.model.uneven`. The model knows no
bytes: a trace read from a file holds its records as an opaque object that :mod:`tracekit.wire` gave it.
"""

from tracekit.model.attrs import (
    ATTR_KINDS,
    INT_KINDS,
    LIST_KINDS,
    SCALAR_KINDS,
    Attr,
    as_bool,
    as_bytes,
    as_int,
    as_str,
    infer_kind,
)
from tracekit.model.draft import NodeDraft
from tracekit.model.node import (
    COMM_TYPES,
    MAX_DURATION_NS,
    MAX_NODES_PER_RANK,
    MAX_RANKS,
    MAX_TIME_NS,
    NODE_FIELDS,
    CollectiveType,
    IOInfo,
    Metadata,
    Node,
    NodeType,
    check_node_count,
    check_rank_count,
    time_range_error,
)
from tracekit.model.trace import ExecutionTrace, nodes_by_id
