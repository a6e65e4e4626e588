"""Process groups declared in a PyTorch Execution Trace (``## process_group:init ##``)."""

from __future__ import annotations

from dataclasses import dataclass

from tracekit.errors import ConversionError

from tracekit.converters.pytorch.et_reader import EtTrace

__all__ = ["ProcessGroups", "read_process_groups"]


@dataclass(frozen=True)
class ProcessGroups:
    """Process groups declared by ``## process_group:init ##``.

    Attributes:
        groups: pg_name -> ranks (empty tuple = all ranks).
        descriptions: pg_name -> pg_desc.
        backend_pg: NCCL backend id -> pg_name (old traces name groups by backend id).
        node_id: the ET node that declared them (None when absent).
        world_size: the ``group_size`` of the default group (``pg_name`` "0", ``ranks`` empty: all ranks), the
            capture's world size; None when not declared.
    """

    groups: dict[str, tuple[int, ...]]
    descriptions: dict[str, str]
    backend_pg: dict[int, str]
    node_id: int | None = None
    world_size: int | None = None


def read_process_groups(et: EtTrace) -> ProcessGroups:
    """Parse the ET's ``## process_group:init ##`` node (its value is a JSON string).

    Returns:
        :class:`ProcessGroups`; all empty (``node_id`` None) when the ET declares none.

    Raises:
        ConversionError: the value is not the JSON list PyTorch writes (naming
            the ET path and node id).
    """
    import orjson

    from tracekit.errors import ValidationError
    from tracekit.model.groups import parse_pg_json

    groups: dict[str, tuple[int, ...]] = {}
    desc: dict[str, str] = {}
    backend: dict[int, str] = {}
    node_id = world_size = None
    for op in et.ops:
        if "process_group:init" not in op.name:
            continue
        node_id = op.id
        vals = op.inputs.values
        text = vals[0] if len(vals) == 1 and isinstance(vals[0], str) else orjson.dumps(vals).decode()
        try:
            groups.update(parse_pg_json(text, path=et.path, node_id=op.id))
            entries = orjson.loads(text)
        except (ValidationError, orjson.JSONDecodeError) as exc:
            raise ConversionError(
                str(exc.message if isinstance(exc, ValidationError) else exc), path=et.path, node_id=op.id
            ) from None
        for e in entries if isinstance(entries, list) else ():
            if isinstance(e, dict):
                name = str(e.get("pg_name"))
                desc[name] = str(e.get("pg_desc", ""))
                if isinstance(e.get("backend_id"), int):
                    backend[e["backend_id"]] = name
                size = e.get("group_size")
                if name == "0" and not e.get("ranks") and type(size) is int and size > 0:
                    world_size = size
    return ProcessGroups(groups, desc, backend, node_id, world_size)
