"""nccl-tests' operation size and bus-bandwidth factor (nccl-tests ``doc/PERFORMANCE.md``), for the result's
collective table (:mod:`.result` explains the definitions; re-exported there)."""

from __future__ import annotations

_BUS_FACTOR_KIND = {
    "ALL_REDUCE": "allreduce",
    "ALL_GATHER": "pminus1",
    "REDUCE_SCATTER": "pminus1",
    "REDUCE_SCATTER_BLOCK": "pminus1",
    "ALL_TO_ALL": "pminus1",
    "GATHER": "pminus1",
    "SCATTER": "pminus1",
    "BROADCAST": "one",
    "REDUCE": "one",
    "SEND_RECV": "one",
    "BARRIER": "one",
}


def nccl_tests_size(kind: str, comm_bytes: int, p: int) -> int:
    """The operation size nccl-tests reports for a Chakra ``comm_size`` (see module doc)."""
    return comm_bytes * p if kind in ("ALL_GATHER", "GATHER", "SCATTER") else comm_bytes


def bus_factor(kind: str, p: int) -> float:
    """nccl-tests' bus-bandwidth factor for ``kind`` on ``p`` ranks."""
    rule = _BUS_FACTOR_KIND.get(kind, "one")
    if rule == "allreduce":
        return 2 * (p - 1) / p
    if rule == "pminus1":
        return (p - 1) / p
    return 1.0
