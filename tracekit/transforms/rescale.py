"""World size: grow or shrink the data-parallel degree of a job.

:class:`Rescale` rewrites a :class:`~tracekit.sets.traceset.TraceSet` of ``dp``
data-parallel replicas into one of ``dp_new`` (grid and group mapping in
:mod:`tracekit.transforms.layout`): new rank ``(t, c, d', s)`` copies old rank
``(t, c, d' mod dp, s)``; groups spanning the data-parallel dimension
(gradient reduction, ZeRO) grow to ``dp_new`` members, groups inside a replica
(tensor, pipeline, context) are re-pointed to the new replica, send/recv peers
keep their offset.

* **weak scaling** (default): the same work per rank, so the global batch
  grows by ``dp_new / dp``.  Per-rank compute is unchanged.  Under ZeRO
  (``llm_config`` ``zero_stage`` >= 1) the parameter shards shrink: the
  per-rank all-gathers on data-parallel groups and the optimizer step
  (``op_role`` ``optimizer_step``) scale by ``dp / dp_new``.
* **strong scaling**: the global batch is fixed, so each rank's share
  shrinks by ``dp / dp_new``.  For a generated trace (``micro_batch``
  annotations) the micro-batches ``>= m dp / dp_new`` are removed (bypass
  edges keep the order; for GPipe and 1F1B this leaves exactly the
  schedule of ``m dp / dp_new`` micro-batches); for other traces every COMP
  node's time (or FLOPs and bytes) is multiplied by ``dp / dp_new``.

Refused (:class:`~tracekit.errors.ConfigError`): ``dp_new`` < 1; strong
scaling whose ``dp_new`` does not divide the global batch (``llm_config``'s,
or ``global_batch`` given) or leaves less than one micro-batch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tracekit.model.attrs import COMM_SIZE, NUM_OPS, TENSOR_SIZE
from tracekit.errors import ConfigError, TransformError
from tracekit.model import CollectiveType, Node, NodeType
from tracekit.transforms.base import Transform, check_degree, map_nodes, map_traces, scale_int
from tracekit.transforms.bypass import remove_nodes
from tracekit.transforms.layout import grid_of, llm_config_of, regrid

MODES = ("weak", "strong")


@dataclass(frozen=True)
class Rescale(Transform):
    """Change the data-parallel degree to ``dp`` (see module docstring).

    Args:
        dp: the new data-parallel degree (>= 1).
        mode: ``"weak"`` or ``"strong"``.
        global_batch: global batch in samples, for the divisibility check of
            strong scaling on traces without ``llm_config``.

    Raises:
        ConfigError: bad parameters (at construction) or a dp that does not
            divide the batch (at :meth:`apply`).
        TransformError: the trace set's rank grid is unknown (see
            :func:`tracekit.transforms.layout.grid_of`).
    """

    dp: int
    mode: str = "weak"
    global_batch: int | None = None

    def __post_init__(self) -> None:
        check_degree("dp", self.dp)
        if self.mode not in MODES:
            raise ConfigError(f"mode must be 'weak' or 'strong', got {self.mode!r}")
        if self.global_batch is not None:
            check_degree("global batch", self.global_batch)

    def plan(self, old, cfg: dict | None) -> "RescalePlan":
        """What :meth:`apply` does to a job of grid ``old`` with generator config ``cfg`` (or None).

        Raises:
            ConfigError: strong scaling that does not divide the global batch.
            TransformError: strong scaling of an interleaved schedule.
        """
        new = old.with_(dp=self.dp)
        update: dict[str, object] = {"dp": self.dp}
        keep_mb: int | None = None
        if cfg is not None:
            batch, micro = int(cfg["global_batch_size"]), int(cfg["micro_batch_size"])
            if self.mode == "weak":
                update["global_batch_size"] = batch * self.dp // old.dp if (batch * self.dp) % old.dp == 0 else batch
            else:
                if batch % (micro * self.dp):
                    raise ConfigError(
                        f"dp={self.dp} does not divide the global batch {batch} into micro-batches "
                        f"of {micro} (strong scaling keeps the global batch)"
                    )
                keep_mb = batch // (micro * self.dp)
                if cfg["parallel"].get("schedule") == "interleaved":
                    raise TransformError(
                        "strong scaling of an interleaved-schedule trace is not supported "
                        "(dropping micro-batches does not give the interleaved order)"
                    )
        elif self.mode == "strong" and self.global_batch is not None and self.global_batch % self.dp:
            raise ConfigError(f"dp={self.dp} does not divide the global batch {self.global_batch}")
        zero = int(cfg["parallel"].get("zero_stage", 0)) if cfg is not None else 0
        return RescalePlan(old, new, update, keep_mb, zero, old.dp / self.dp, self.mode)

    def apply(self, traceset):
        """The job at data-parallel degree ``dp``: ``pp x tp x cp x dp`` ranks (module docstring).

        Raises:
            ConfigError: strong scaling whose ``dp`` does not divide the global batch.
            TransformError: the rank grid is unknown, or strong scaling of an interleaved schedule.
        """
        cfg = llm_config_of(traceset)
        plan = self.plan(grid_of(traceset), cfg)
        old, new = plan.old, plan.new
        old_groups = traceset.process_groups

        def node_fn(node: Node, template: int, new_rank: int) -> Node | None:
            orig = traceset[template].node_by_id(node.id) if _zero_gather(plan, node) else None
            spans = orig is not None and dp_spanning(old_groups, old, orig.pg_name)
            return plan.node_change(node, spans)

        out = regrid(
            traceset,
            old,
            new,
            lambda r: old.rank(_template(new.coords(r), old)),
            node_fn=node_fn,
            config_update=plan.update,
            whole_job=cfg is None,
        )
        return map_traces(out, plan.finish)


def dp_spanning(groups, old, pg_name: str | None) -> bool:
    """Whether group ``pg_name`` (default ``"0"``) spans more than one data-parallel replica of grid ``old``."""
    members = groups.get(str(pg_name or "0"), ())
    return len({old.coords(r)[2] for r in members}) > 1


def _zero_gather(plan: "RescalePlan", node: Node) -> bool:
    return (
        plan.zero != 0
        and plan.ratio != 1
        and node.type == NodeType.COMM_COLL_NODE
        and node.comm_type == CollectiveType.ALL_GATHER
    )


@dataclass(frozen=True)
class RescalePlan:
    """A rescale decided for one job: grids, config update, micro-batches kept, ZeRO stage, ``ratio = dp / dp_new``."""

    old: Any
    new: Any
    update: dict[str, object]
    keep_mb: int | None
    zero: int
    ratio: float
    mode: str

    def node_change(self, node: Node, dp_spanning_gather: bool) -> Node | None:
        """ZeRO (stage >= 1): a data-parallel all-gather or the optimizer step scaled by ``ratio``; else None."""
        if self.zero == 0 or self.ratio == 1:
            return None
        if _zero_gather(self, node):
            return (
                node.with_attr(COMM_SIZE, scale_int(node.comm_bytes or 0, self.ratio)) if dp_spanning_gather else None
            )
        if node.get_attr("op_role") == "optimizer_step":
            c = node.replace(duration_ns=scale_int(node.duration_ns, self.ratio))
            for key in (NUM_OPS, TENSOR_SIZE):
                v = key.of(c)
                if v is not None and v > 0:
                    c = c.with_attr(key, scale_int(v, self.ratio))
            return c
        return None

    def finish(self, trace):
        """Strong scaling after the regrid: later micro-batches removed, or COMP time scaled by ``ratio``."""
        if self.mode == "weak" or self.ratio == 1:
            return trace
        if self.keep_mb is not None:
            keep_mb = self.keep_mb
            return remove_nodes(trace, lambda n: _mb(n) >= keep_mb)
        from tracekit.transforms.colscale import is_encoded, scale_compute_encoded

        if is_encoded(trace):  # ScaleCompute(ratio) of every COMP node, on the records
            return scale_compute_encoded(trace, float(self.ratio), frozenset({NodeType.COMP_NODE}), None, None)
        return map_nodes(trace, lambda n: _scale_comp(n, self.ratio))


def _template(coords: tuple[int, int, int, int], old) -> tuple[int, int, int, int]:
    t, c, d, s = coords
    return (t, c, d % old.dp, s)


def _mb(node: Node) -> int:
    v = node.get_attr("micro_batch")
    return v if isinstance(v, int) and not isinstance(v, bool) else -1


def _scale_comp(node: Node, k: float) -> Node | None:
    from tracekit.transforms.nodescale import scaled_compute

    return scaled_compute(node, k) if node.type == NodeType.COMP_NODE else None


__all__ = ["Rescale"]
