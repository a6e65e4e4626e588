"""Node records a compiled kernel wrote, held in its output array until a reader needs ``bytes`` (issue 17).

A columnar transform (:func:`tracekit.wire.records.rewrite`) splices a
rank's records into a fresh ``uint8`` array; copying that array into ``bytes``
(the type :class:`~tracekit.wire.framing.EncodedNodes` readers slice) costs as much
as the splice, and the writer does not need it: :class:`SplicedNodes` keeps the
array, and :func:`record_array` gives kernels and writers the bytes of any
``EncodedNodes`` as ``uint8`` without a copy.
"""

from __future__ import annotations

import numpy as np

from tracekit.wire.framing import EncodedNodes, record_array  # noqa: F401 - record_array lived here


class SplicedNodes(EncodedNodes):
    """Node records a kernel wrote into a ``uint8`` array (a columnar transform's output), kept there.

    Writers and scans read :attr:`array` through :func:`record_array` without a copy; :attr:`data`,
    the ``bytes`` other readers slice, is made from it on first use (one copy, then the array
    becomes a view of those bytes).  Pickles as a plain :class:`~tracekit.wire.framing.EncodedNodes`.
    """

    __slots__ = ("array", "_bytes")

    def __init__(self, array: np.ndarray, starts: np.ndarray, ends: np.ndarray, rank: int | None) -> None:
        self.array: np.ndarray = array
        self._bytes: bytes | None = None
        super().__init__(None, starts, ends, None, rank)  # type: ignore[arg-type]  # data: made on first use

    @property  # type: ignore[override]
    def data(self) -> bytes:
        """The records' bytes (copied from :attr:`array` on first use)."""
        if self._bytes is None:
            self._bytes = self.array.tobytes()
            self.array = np.frombuffer(self._bytes, dtype=np.uint8)
        return self._bytes

    @data.setter
    def data(self, value: bytes | None) -> None:
        self._bytes = value  # None: made from the array on first use
        if value is not None:
            self.array = np.frombuffer(value, dtype=np.uint8)

    def __reduce__(self) -> tuple:
        return (EncodedNodes, (self.data, self.starts, self.ends, self.path, self.rank))
