"""tracekit: convert, rewrite and replay execution traces of distributed ML training.

The core package holds the trace model (:mod:`tracekit.model`), I/O
(:mod:`tracekit.io`), graph utilities (:mod:`tracekit.model.graph`), validation
(:mod:`tracekit.checks.validate`), transforms and the CLI.  Producers live in
``tracekit.converters`` and the simulator in ``tracekit.replayer``; importing
``tracekit`` pulls in neither.
"""

from tracekit.errors import (
    ConfigError,
    ConversionError,
    DeadlockError,
    ReplayError,
    SpecError,
    TraceFormatError,
    TracekitError,
    TransformError,
    ValidationError,
)
from tracekit.model import Attr, CollectiveType, ExecutionTrace, IOInfo, Metadata, Node, NodeType

__version__ = "0.1.0"

__all__ = [
    "Attr",
    "CollectiveType",
    "ConfigError",
    "ConversionError",
    "DeadlockError",
    "ExecutionTrace",
    "IOInfo",
    "Metadata",
    "Node",
    "NodeType",
    "ReplayError",
    "SpecError",
    "TraceFormatError",
    "TracekitError",
    "TransformError",
    "ValidationError",
]
