"""Other tools' forms of a trace set: making a set ASTRA-sim-ready (:mod:`tracekit.interop.astra`).

Writing a set writes what it holds (:mod:`tracekit.sets.io`); making it run in ASTRA-sim as it is (process-group
ids, the comm-group file, records ASTRA-sim's feeder needs) is this explicit step, used by the callers that need it
(generators, converters, ``export astra``).
"""

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tracekit.interop.astra import astra_ready, write_traceset

__all__ = [
    "astra_ready",
    "write_traceset",
]

# name -> the module defining it, imported on first use (PEP 562): importing the package imports no module
_FACE = {
    "astra_ready": "tracekit.interop.astra",
    "write_traceset": "tracekit.interop.astra",
}


def __getattr__(name: str) -> object:
    """A name of the face, from its defining module on first use; ``AttributeError`` for any other name."""
    if name not in _FACE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_FACE[name]), name)
