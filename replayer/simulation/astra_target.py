"""What an export for one ASTRA-sim build needs: the system settings of any spec, and traces master runs.

``export astra`` (:mod:`.astra_export`) writes for one build (``--target``; ``[astra] build`` of the spec, else
master 518bd51, which users run):

- **518bd51** aborts on any METADATA node (an assert in its statistics layer, ``Statistics.cc``) and on a rank
  file with no nodes (``No dependancy free nodes found``), recorded in ``shared/reference/astra-sim`` (README,
  "Binary defects" 1 and 8).  :func:`for_master` removes METADATA nodes (dependencies through them are kept,
  :func:`tracekit.transforms.bypass.remove_nodes`), so communicator groups live only in the comm-group file, and
  gives an idle rank one zero-duration COMP node (518bd51 replays it for 1 ns; so does tracekit's model for
  ``build = "518bd51"``).
- **c459ab6** needs no change beyond :func:`tracekit.interop.astra.astra_ready` (it completes a METADATA node marked
  ``is_cpu_op`` and finishes an empty rank at 0 ns).

A spec without an ``[astra]`` table (a preset such as ``dgx-h100``) gets ASTRA-sim settings derived from it by
:func:`astra_settings_for`, with a list of what ASTRA-sim cannot express.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from tracekit.errors import ConfigError
from tracekit.model import Node, NodeType

from tracekit.replayer.simulation.hardware import ASTRA_BUILDS, AstraSettings

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.model import ExecutionTrace
    from tracekit.replayer.simulation.hardware import HardwareSpec

#: what each build is, for run.sh and messages
BUILD_NAMES = {
    "518bd51": "ASTRA-sim master 518bd51 (2026-03-25)",
    "c459ab6": "ASTRA-sim c459ab6 (2025-08-11)",
}
#: ASTRA-sim's usual endpoint delay (its example system configs), ns
DEFAULT_ENDPOINT_DELAY_NS = 10
IDLE_RANK_NODE = "tracekit:idle_rank"
_GIB_PER_GB = 1e9 / (1 << 30)


def check_target(target: str) -> str:
    """``target`` if it is a build tracekit exports for.

    Raises:
        ConfigError: another value.
    """
    if target not in ASTRA_BUILDS:
        raise ConfigError(f"unknown ASTRA-sim build {target!r}; choose one of {', '.join(ASTRA_BUILDS)}")
    return target


def astra_settings_for(spec: "HardwareSpec") -> tuple["HardwareSpec", tuple[str, ...]]:
    """``spec`` with an ``[astra]`` table, and what ASTRA-sim cannot express of it (one line each).

    A spec with an ``[astra]`` table is returned as it is (no notes).  Otherwise: ``endpoint-delay`` 10 ns (the
    examples' value), 1 dataset split, 1 active chunk, ``local-mem-bw`` = the device's memory bandwidth,
    ``localBWAware``, no roofline (compute replays the traces' durations, 1 ns when zero), and every link's
    GB/s written as ``GB/s x 1e9 / 2^30`` because ASTRA-sim's analytical backend reads its bandwidth as GiB/s
    (``bandwidth_convention = "gib"``): the exported links move the spec's bytes per second.
    """
    if spec.astra is not None:
        return spec, ()
    notes = [
        f"collective model {spec.collective_model}: ASTRA-sim times collectives with its own algorithms "
        f"(per dimension: {', '.join(sorted({d.algorithm('all_reduce') for d in spec.network}))} all-reduce)",
        "link bandwidths written as GB/s x 1e9 / 2^30: ASTRA-sim's analytical backend reads GB/s as GiB/s",
        f"endpoint-delay {DEFAULT_ENDPOINT_DELAY_NS} ns, 1 dataset split, 1 active chunk per dimension "
        "(ASTRA-sim's settings; the spec has no [astra] table)",
        "compute: ASTRA-sim replays each node's recorded duration in whole microseconds (1 ns when zero); device "
        "peak FLOP/s, efficiencies and the spec's compute mode are not used",
        "broadcast, reduce, gather, scatter and barrier: ASTRA-sim replays their recorded duration",
    ]
    if spec.compute.duration_scale != 1.0:
        notes.append(f"compute.duration_scale {spec.compute.duration_scale:g} (not expressible: durations as recorded)")
    if any(d.nccl_link for d in spec.network):
        notes.append("NCCL link classes and protocol constants (no ASTRA-sim equivalent)")
    settings = AstraSettings(
        endpoint_delay_ns=DEFAULT_ENDPOINT_DELAY_NS,
        local_mem_bw_gbps=float(spec.device.mem_bandwidth_gbps),
        bandwidth_convention="gib",
    )
    network = tuple(replace(d, bandwidth_gbps=d.bandwidth_gbps * _GIB_PER_GB) for d in spec.network)
    return replace(spec, astra=settings, network=network), tuple(notes)


def for_master(trace: "ExecutionTrace") -> "tuple[ExecutionTrace, int, bool]":
    """``trace`` as ASTRA-sim 518bd51 runs it (module doc): ``(trace, METADATA nodes removed, idle placeholder)``."""
    from tracekit.transforms.bypass import remove_nodes
    from tracekit.transforms.colscale import is_encoded
    from tracekit.transforms.colselect import remove_rows

    types = trace.columns().types
    meta = types == int(NodeType.METADATA_NODE)
    n_meta = int(meta.sum())
    if n_meta:  # on encoded records by columns (decoding every node took ~3 s a 14,000-node rank)
        kept = remove_rows(trace, meta) if is_encoded(trace) else None
        if kept is None:
            kept = remove_nodes(trace, lambda n: n.type == NodeType.METADATA_NODE)
        trace = kept.with_label(path=trace.path)
    if len(trace) == 0:
        return trace.with_nodes([Node(0, IDLE_RANK_NODE, NodeType.COMP_NODE)]).with_label(path=trace.path), n_meta, True
    return trace, n_meta, False
