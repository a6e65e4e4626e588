"""Reading and writing traces and trace sets: the one public face of tracekit's I/O.

This module defines nothing: one trace file is :mod:`tracekit.wire.io` (Chakra `.et`, `.et.gz`, tracekit JSON,
Chakra feeder JSON; its framing, codec and columns live in :mod:`tracekit.wire`), a trace set on disk is
:mod:`tracekit.sets.io`, output safety (atomic writes, inputs never written) is :mod:`tracekit.output`. Code
outside the core (converters, replayer, CLI, tests) imports from here; modules inside ``tracekit/`` import from
the defining module, so the layers stay one-directional (docs/architecture.md).
"""

from tracekit.interop.astra import write_traceset
from tracekit.model import Metadata
from tracekit.output import (
    DEFAULT_MAX_DECOMPRESSED_BYTES,
    DEFAULT_MAX_GZIP_RATIO,
    decompression_limits,
    _UMASK,
    atomic_output,
    check_output,
    make_parents,
    note_input,
    open_input,
    output_target,
    protect_inputs,
    read_input_bytes,
    remove_if_empty,
    write_bytes_atomic,
    write_files_atomic,
)
from tracekit.sets.io import (
    TraceSetWriter,
    hold_prefix,
    hold_prefix_shared,
    read_traceset,
    trace_paths,
)
from tracekit.wire.batch import encode_nodes
from tracekit.wire.framing import (
    GZIP_MAGIC,
    EncodedNodes,
    _read_raw,
    frame,
    gunzip_limited,
    rank_from_path,
    split_records,
)
from tracekit.wire.io import (
    encode_metadata,
    encode_node,
    encode_trace,
    encoded_pieces,
    framed_records,
    read_trace,
    trace_from_bytes,
    write_trace,
)
from tracekit.wire.stream import iter_nodes, read_metadata

__all__ = [
    "TraceSetWriter",
    "hold_prefix",
    "hold_prefix_shared",
    "atomic_output",
    "check_output",
    "encode_metadata",
    "note_input",
    "open_input",
    "protect_inputs",
    "read_input_bytes",
    "encode_node",
    "encode_nodes",
    "encode_trace",
    "encoded_pieces",
    "frame",
    "iter_nodes",
    "read_metadata",
    "rank_from_path",
    "read_trace",
    "read_traceset",
    "split_records",
    "trace_from_bytes",
    "trace_paths",
    "write_bytes_atomic",
    "write_files_atomic",
    "write_trace",
    "write_traceset",
    "Metadata",
]
