"""Per-peer sizes of an uneven all-to-all (``all_to_allv``) from the ET (issue 27; :mod:`tracekit.model.uneven`).

Where the ET records them:

* ``record_param_comms`` (schema 1.0.x): inputs ``[tensor, seq, pg, rank, name, in_split_sizes, out_split_sizes]``
  (param-dlrm: ``[..., "all_to_allv", [96, 224, 288, 1664, 592, 96, 192, 240], [96, 96, ..., 96]]``), or the
  attributes ``in_split_size`` / ``out_split_size`` of later schemas; sizes in elements of the collective's
  dtype (``dtype`` attribute, else the input tensor's element size);
* ``c10d::alltoall_base_(output, input, pg, output_split_sizes, input_split_sizes, ...)``: the same lists, in
  elements of the tensors.

``in`` splits are what this rank sends to each member, ``out`` splits what it receives from each (group order).
Empty lists mean an even split (a plain ``all_to_all``): nothing is returned.
"""

from __future__ import annotations

from typing import Any, Sequence

from tracekit.workloads.units import torch_dtype_bytes

from tracekit.converters.pytorch.et_reader import EtOp
from tracekit.converters.pytorch.et_tensors import is_tensor_value


def _int_list(v: Any) -> list[int] | None:
    if isinstance(v, list) and v and all(isinstance(x, int) and not isinstance(x, bool) for x in v):
        return [int(x) for x in v]
    return None


def _elem_bytes(op: EtOp) -> int | None:
    dtype = op.extra.get("dtype")
    if isinstance(dtype, str):
        size = torch_dtype_bytes(dtype)
        if size:
            return size
    for v in op.inputs.values:
        if is_tensor_value(v) and len(v) > 4 and isinstance(v[4], int) and v[4] > 0:
            return int(v[4])
    return None


def _rpc_splits(op: EtOp) -> tuple[list[int], list[int]] | None:
    ins, outs = _int_list(op.extra.get("in_split_size")), _int_list(op.extra.get("out_split_size"))
    if ins is None and outs is None:
        vals = op.inputs.values
        named = next((i for i, v in enumerate(vals) if isinstance(v, str) and v), None)
        if named is None:
            return None
        lists = [v for v in vals[named + 1 :] if isinstance(v, list)]
        if len(lists) < 2:
            return None
        ins, outs = _int_list(lists[0]), _int_list(lists[1])
    if ins is None and outs is None:
        return None
    return ins or [], outs or []


def _c10d_splits(op: EtOp) -> tuple[list[int], list[int]] | None:
    vals = op.inputs.values
    if len(vals) < 5:
        return None
    outs, ins = _int_list(vals[3]), _int_list(vals[4])
    if ins is None and outs is None:
        return None
    return ins or [], outs or []


def split_bytes(ops: Sequence[EtOp]) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """``(send bytes per member, receive bytes per member)`` of an all-to-all from the ops folded into it.

    Args:
        ops: the ET ops of one communication (``record_param_comms`` preferred, then ``c10d::alltoall_base_``).

    Returns:
        The two tuples in bytes (one may be empty when the ET gives only the other), or None when the ET records
        no split sizes (an even all-to-all) or no element size.
    """
    for pick in ("record_param_comms", "c10d::alltoall_base_"):
        for op in ops:
            if op.name != pick:
                continue
            found = _rpc_splits(op) if pick == "record_param_comms" else _c10d_splits(op)
            size = _elem_bytes(op)
            if found is None or size is None:
                continue
            ins, outs = found
            return tuple(n * size for n in ins), tuple(n * size for n in outs)
    return None
