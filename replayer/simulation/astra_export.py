"""Export a trace set with the ASTRA-sim configuration of a spec, so the ASTRA-sim binary runs it directly.

``tracekit export astra PREFIX -o DIR --hw SPEC [--target 518bd51|c459ab6]`` writes into ``DIR``:

- ``<name>.<rank>.et`` and ``<name>.comm_groups.json``: the trace set as every
  tracekit writer writes it (:mod:`tracekit.interop.astra`), with the
  collectives ASTRA-sim cannot issue rewritten to what it does with the ones
  it cannot simulate: ASTRA-sim (c459ab6 ``Workload::issue_comm``) simulates
  all-reduce, all-gather, reduce-scatter and all-to-all, replays a broadcast
  for its recorded ``duration_micros`` (1 ns when 0), and never completes
  any other collective type (no rank finishes).  So REDUCE, GATHER, SCATTER
  and BARRIER are written as BROADCAST (which is also how tracekit's
  ASTRA-compatible model replays them: their measured duration) and
  REDUCE_SCATTER_BLOCK as REDUCE_SCATTER (tracekit costs it so); the original
  type's name is kept in the attribute ``tracekit_comm_type``.  For the
  target 518bd51 (master, the default) the files carry no METADATA node and no
  rank file is empty (:func:`.astra_target.for_master`): communicator groups
  are then declared only in the comm-group file.
- ``system.json``, ``network.yml``, ``memory.json``: the inverse of
  :func:`.astra_config.import_astra_config` (same keys; ``hw import-astra`` of
  these files gives the spec back).  A spec without an ``[astra]`` table (a
  preset) gets settings derived from it (:func:`.astra_target.astra_settings_for`),
  and :attr:`AstraExport.notes` says what ASTRA-sim cannot express.
- ``run.sh``: the command line, naming the ASTRA-sim build it targets.

The spec must have the trace set's number of ranks (a preset that fits to the
world size is fitted).
"""

from __future__ import annotations

import json
import logging
import os
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tracekit.model.attrs import COMM_TYPE
from tracekit.errors import SpecError
from tracekit.model import CollectiveType, NodeType

if TYPE_CHECKING:  # pragma: no cover
    from tracekit.model import ExecutionTrace
    from tracekit.replayer.simulation.hardware import HardwareSpec
    from tracekit.sets.traceset import TraceSet
    from tracekit.sets.classstream import StreamedClassSet

log = logging.getLogger(__name__)
#: comm_type rewrites for ASTRA-sim (module doc)
ASTRA_COMM_TYPES = {
    CollectiveType.REDUCE: CollectiveType.BROADCAST,
    CollectiveType.GATHER: CollectiveType.BROADCAST,
    CollectiveType.SCATTER: CollectiveType.BROADCAST,
    CollectiveType.BARRIER: CollectiveType.BROADCAST,
    CollectiveType.REDUCE_SCATTER_BLOCK: CollectiveType.REDUCE_SCATTER,
}
_TOPOLOGY_NAMES = {"ring": "Ring", "switch": "Switch", "fully_connected": "FullyConnected"}
_ALGORITHM_NAMES = {
    "ring": "ring",
    "direct": "direct",
    "halving_doubling": "halvingDoubling",
    "double_binary_tree": "doubleBinaryTree",
}
_IMPLEMENTATIONS = (
    ("all-reduce-implementation", "all_reduce"),
    ("reduce-scatter-implementation", "reduce_scatter"),
    ("all-gather-implementation", "all_gather"),
    ("all-to-all-implementation", "all_to_all"),
)


@dataclass(frozen=True)
class AstraExport:
    """What :func:`export_astra` wrote: the workload prefix, the config files, the command line, the build it
    targets, what ASTRA-sim cannot express of the spec, METADATA nodes removed and ranks given a placeholder node."""

    prefix: Path
    system: Path
    network: Path
    memory: Path
    comm_groups: Path
    argv: tuple[str, ...]
    target: str = "518bd51"
    notes: tuple[str, ...] = ()
    metadata_removed: int = 0
    idle_ranks: tuple[int, ...] = ()


def astra_system_json(spec: "HardwareSpec") -> dict:
    """ASTRA-sim's system JSON for ``spec`` (the keys :func:`.astra_config.import_astra_config` reads).

    Raises:
        SpecError: the spec has no ``[astra]`` table, or an algorithm ASTRA-sim does not know.
    """
    a = spec.astra
    if a is None:
        raise SpecError(
            "exporting for ASTRA-sim needs the spec's [astra] table (endpoint delay, dataset "
            "splits, ...): import an ASTRA-sim config with `tracekit hw import-astra`",
            path=spec.path,
        )
    doc: dict = {
        "scheduling-policy": "LIFO",
        "endpoint-delay": a.endpoint_delay_ns,
        "active-chunks-per-dimension": a.active_chunks_per_dimension,
        "preferred-dataset-splits": a.preferred_dataset_splits,
    }
    for key, coll in _IMPLEMENTATIONS:
        names = []
        for i, dim in enumerate(spec.network):
            alg = dim.algorithm(coll)
            if alg not in _ALGORITHM_NAMES:
                raise SpecError(f"key network[{i}].algorithms.{coll}: ASTRA-sim has no {alg!r}", path=spec.path)
            names.append(_ALGORITHM_NAMES[alg])
        doc[key] = names
    doc.update(
        {"collective-optimization": a.collective_optimization, "local-mem-bw": a.local_mem_bw_gbps, "boost-mode": 0}
    )
    if a.roofline_enabled:
        doc.update({"roofline-enabled": 1, "peak-perf": a.peak_perf_tflops})
    return doc


def astra_network_yaml(spec: "HardwareSpec") -> str:
    """ASTRA-sim's analytical network YAML for ``spec`` (one list entry per dimension)."""

    def row(values) -> str:
        """A YAML flow list ``[ a, b ]`` of already-formatted values."""
        return "[ " + ", ".join(values) + " ]"

    return (
        f"# written by tracekit export astra from spec {spec.name!r}\n"
        f"topology: {row(_TOPOLOGY_NAMES[d.topology] for d in spec.network)}\n"
        f"npus_count: {row(str(d.size) for d in spec.network)}\n"
        f"bandwidth: {row(repr(float(d.bandwidth_gbps)) for d in spec.network)}  # GB/s\n"
        f"latency: {row(repr(float(d.latency_ns)) for d in spec.network)}  # ns\n"
    )


def astra_comm_types(trace: "ExecutionTrace") -> "ExecutionTrace":
    """``trace`` with the collective types ASTRA-sim cannot issue rewritten (module doc); same object if none."""
    cols = trace.columns()
    present, values, ok = COMM_TYPE.column_or(cols, absent=0, bad=-1)
    changes = {}
    for pos, t in enumerate(cols.types.tolist()):
        if t != NodeType.COMM_COLL_NODE or not present[pos] or not ok[pos]:
            continue
        try:
            ctype = CollectiveType(int(values[pos]))
        except ValueError:
            continue
        if ctype in ASTRA_COMM_TYPES:
            node = trace.node_at(pos).with_attr(COMM_TYPE, int(ASTRA_COMM_TYPES[ctype]), "int64_val")
            changes[pos] = node.with_attr("tracekit_comm_type", ctype.name, "string_val")
    from tracekit.interop.astra import with_changed_nodes

    return with_changed_nodes(trace, changes)  # encoded records: only the changed ones re-encoded


def export_astra(
    traceset: "TraceSet | StreamedClassSet",
    spec: "HardwareSpec",
    out_dir: str | os.PathLike[str],
    *,
    name: str = "workload",
    binary: str = "AstraSim_Analytical_Congestion_Unaware",
    target: str | None = None,
    progress: Any = None,
) -> AstraExport:
    """Write ``traceset`` and ``spec``'s ASTRA-sim configuration into ``out_dir`` (module doc).

    Args:
        traceset: a TraceSet, or a class set visited rank by rank (:class:`~tracekit.sets.classstream.
            StreamedClassSet`: one member in memory at a time).
        target: the ASTRA-sim build (``518bd51`` or ``c459ab6``); None: the spec's ``[astra] build``, else 518bd51.
        progress: ``progress(items, total)`` wrapping the ``(rank, trace)`` pairs as they are written (a bar).

    Raises:
        SpecError: the spec cannot have the trace set's rank count, or names what ASTRA-sim has not.
        ConfigError: an unknown target.
        TracekitError: an output would overwrite an input, or the prefix holds other rank files.
    """
    from tracekit.interop.astra import astra_group_ids, astra_ready, comm_groups_document
    from tracekit.io import TraceSetWriter, encode_trace, write_bytes_atomic
    from tracekit.replayer.simulation.astra_target import BUILD_NAMES, astra_settings_for, check_target, for_master
    from tracekit.model.uneven import uneven_warnings

    if spec.astra is None and spec.fit_to_world_size:
        spec = spec.fitted(traceset.world_size)
    spec, notes = astra_settings_for(spec)
    assert spec.astra is not None
    target = check_target(target or spec.astra.build)
    system = astra_system_json(spec)
    if spec.world_size != traceset.world_size:
        raise SpecError(
            f"spec {spec.name!r} has {spec.world_size} ranks but the trace set has "
            f"{traceset.world_size}; ASTRA-sim needs one NPU per rank",
            path=spec.path,
        )
    out = Path(out_dir)
    prefix = out / name
    configs = ("system.json", "network.yml", "memory.json", "run.sh")
    refuse_files_not_ours(out, configs)
    groups = traceset.process_groups
    ids = astra_group_ids(groups, traceset.world_size)
    removed, idle = 0, []
    with TraceSetWriter(prefix) as writer:
        items = traceset.items() if progress is None else progress(traceset.items(), len(traceset))
        for rank, trace in items:
            for text in uneven_warnings(trace, groups):  # per-peer sizes ASTRA-sim cannot run (issue 27)
                log.warning("%s", text)
            trace = astra_comm_types(astra_ready(trace, ids))
            if target == "518bd51":
                trace, n_meta, placeholder = for_master(trace)
                removed += n_meta
                idle += [rank] if placeholder else []
            writer.add(rank, encode_trace(trace))
        writer.comm_groups = comm_groups_document(groups, ids)
    paths = {"system": out / "system.json", "network": out / "network.yml", "memory": out / "memory.json"}
    write_bytes_atomic(paths["system"], (json.dumps(system, indent=2) + "\n").encode())
    write_bytes_atomic(paths["network"], astra_network_yaml(spec).encode())
    write_bytes_atomic(paths["memory"], b'{"memory-type": "NO_MEMORY_EXPANSION"}\n')
    groups_path = Path(f"{prefix}.comm_groups.json")
    argv = (
        binary,
        f"--workload-configuration={prefix}",
        f"--system-configuration={paths['system']}",
        f"--network-configuration={paths['network']}",
        f"--remote-memory-configuration={paths['memory']}",
        f"--comm-group-configuration={groups_path}",
    )
    header = (
        f"#!/bin/sh\n# {BUILD_NAMES[target]}, analytical backend, on this export (tracekit export astra --target "
        f'{target}; replay it with [astra] build = "{target}")\n'
    )
    write_bytes_atomic(out / "run.sh", (header + " ".join(shlex.quote(a) for a in argv) + "\n").encode())
    record_files_ours(out, configs)
    files = (paths["system"], paths["network"], paths["memory"], groups_path)
    return AstraExport(prefix, *files, argv, target, notes, removed, tuple(idle))


_OURS = ".tracekit-export.json"  # in the export folder: SHA-256 of each config file an export wrote there


def refuse_files_not_ours(out: Path, names: tuple[str, ...]) -> None:
    """Refuse to overwrite a file of ``names`` in ``out`` that no export wrote, or that changed since (a user's
    own system.json or run.sh in the folder was replaced silently).

    Raises:
        TracekitError: names the first such file.
    """
    import hashlib

    from tracekit.errors import TracekitError

    try:
        ours = json.loads((out / _OURS).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        ours = {}
    for name in names:
        path = out / name
        if not path.is_file():
            continue
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        if not isinstance(ours, dict) or ours.get(name) != digest:
            raise TracekitError(
                "exists and was not written by `tracekit export astra` (or was edited since); remove it or "
                "export into another folder",
                path=path,
            )


def record_files_ours(out: Path, names: tuple[str, ...]) -> None:
    """Record the SHA-256 of the files ``names`` just written in ``out`` (read by :func:`refuse_files_not_ours`)."""
    import hashlib

    from tracekit.io import write_bytes_atomic

    ours = {name: hashlib.sha256((out / name).read_bytes()).hexdigest() for name in names}
    write_bytes_atomic(out / _OURS, (json.dumps(ours, indent=1, sort_keys=True) + "\n").encode())
