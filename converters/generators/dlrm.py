"""Synthetic DLRM training traces: sharded embedding tables, all-to-all, data-parallel MLPs.

The hybrid parallelism of Naumov et al. 2019, "Deep Learning Recommendation
Model for Personalization and Recommendation Systems" (section 4): embedding
tables are model-parallel (table ``k`` lives on rank ``k mod R``), the bottom
and top MLPs are data-parallel, and an all-to-all turns "all samples, my
tables" into "my samples, all tables" in the forward and back in the
backward.  One training iteration per rank, local batch ``b = B / R``:

forward
    per local table an ``embedding_lookup`` (``B`` samples x ``pooling``
    rows of ``d`` elements summed); ``embedding_alltoall``; the bottom MLP
    (GEMM + ReLU per layer, ``b`` samples); the feature ``interaction`` (a
    batched ``(T+1) x d`` by ``d x (T+1)`` product per sample, ``2 b (T+1)^2
    d`` FLOPs); the top MLP; the loss.
backward
    the top MLP (data-gradient and weight-gradient GEMMs), the interaction
    (twice its forward), ``embedding_alltoall`` of the pooled-embedding
    gradients, the bottom MLP (no data gradient for its first layer), the
    sparse ``embedding_update`` of the looked-up rows per local table.
then
    all-reduce of the MLP gradients over all ranks in buckets of
    ``grad_bucket_bytes`` (top MLP first, each bucket as soon as its layers'
    weight gradients exist) and the optimizer step of the dense parameters.

``comm_size`` of each all-to-all is one rank's receive buffer, ``b T d``
elements: equal on every rank even when tables do not divide evenly (the
average send buffer is the same).  An MLP layer ``n_in -> n_out`` is a GEMM
of ``2 b n_in n_out`` FLOPs (the bias add is folded into the ReLU node).
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Iterable

from tracekit.converters.generators.build import DEFAULT_PG, ProcessGroups, RankTraceBuilder
from tracekit.workloads.buckets import bucket_limit_elems, pack_buckets
from tracekit.workloads.flops import gemm_elements, gemm_flops
from tracekit.workloads.units import DTYPE_BYTES, TRAINING_DTYPES
from tracekit.converters.generators.llm_ops import Roofline
from tracekit.errors import ConfigError
from tracekit.model import Attr, CollectiveType
from tracekit.sets.traceset import TraceSet

PRODUCER = "tracekit.converters.generators.dlrm"


def _positive(what: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{what} must be a positive integer, got {value!r}")


@dataclass(frozen=True)
class DLRMConfig:
    """One DLRM training iteration on ``num_ranks`` ranks.

    Attributes:
        num_ranks: world size ``R``.
        global_batch_size: samples per iteration ``B`` (a multiple of ``R``).
        num_tables: embedding tables ``T``.
        embedding_dim: ``d``; the bottom MLP's last width must equal it.
        rows_per_table: rows of each table (sets parameter counts only).
        pooling_factor: rows looked up and summed per sample per table.
        dense_features: inputs of the bottom MLP.
        bottom_mlp: output widths of the bottom MLP layers.
        top_mlp: output widths of the top MLP layers (the last is usually 1).
        dtype: data type of activations, weights and gradients.
        grad_bucket_bytes: all-reduce bucket size.
        name, source: label and where the shape comes from.

    Raises:
        ConfigError: non-positive sizes, ``B`` not divisible by ``R``,
            bottom MLP not ending in ``d``.
    """

    num_ranks: int
    global_batch_size: int
    num_tables: int
    embedding_dim: int
    bottom_mlp: tuple[int, ...]
    top_mlp: tuple[int, ...]
    dense_features: int = 13
    rows_per_table: int = 1_000_000
    pooling_factor: int = 1
    dtype: str = "fp32"
    grad_bucket_bytes: int = 25 * 2**20
    name: str = "dlrm"
    source: str = ""

    def __post_init__(self) -> None:
        for what in (
            "num_ranks",
            "global_batch_size",
            "num_tables",
            "embedding_dim",
            "dense_features",
            "rows_per_table",
            "pooling_factor",
            "grad_bucket_bytes",
        ):
            _positive(what.replace("_", " "), getattr(self, what))
        for what in ("bottom_mlp", "top_mlp"):
            widths = getattr(self, what)
            if not widths:
                raise ConfigError(f"{what.replace('_', ' ')} needs at least one layer")
            for w in widths:
                _positive(f"{what.replace('_', ' ')} width", w)
        if self.dtype not in TRAINING_DTYPES:
            raise ConfigError(f"dtype must be one of {', '.join(TRAINING_DTYPES)}; got {self.dtype!r}")
        if self.global_batch_size % self.num_ranks:
            raise ConfigError(f"global batch {self.global_batch_size} is not divisible by {self.num_ranks} ranks")
        if self.bottom_mlp[-1] != self.embedding_dim:
            raise ConfigError(
                f"the bottom MLP must end in the embedding dim {self.embedding_dim}, not {self.bottom_mlp[-1]}"
            )

    @property
    def local_batch(self) -> int:
        """Samples per rank per iteration: ``B / R`` (exact: ``__post_init__`` checks ``R`` divides ``B``)."""
        return self.global_batch_size // self.num_ranks

    @property
    def dtype_bytes(self) -> int:
        """Bytes per element of :attr:`dtype` (``tracekit.workloads`` dtype table: fp32 4, bf16/fp16 2, fp8 1)."""
        return DTYPE_BYTES[self.dtype]

    @property
    def interaction_features(self) -> int:
        """Top MLP input: ``d`` plus the ``T (T+1) / 2`` pairwise dot products of ``T+1`` vectors."""
        t = self.num_tables
        return self.embedding_dim + t * (t + 1) // 2

    def bottom_layers(self) -> list[tuple[int, int]]:
        """``(n_in, n_out)`` of each bottom MLP layer."""
        widths = (self.dense_features, *self.bottom_mlp)
        return list(zip(widths[:-1], widths[1:]))

    def top_layers(self) -> list[tuple[int, int]]:
        """``(n_in, n_out)`` of each top MLP layer; the first takes :attr:`interaction_features` inputs."""
        widths = (self.interaction_features, *self.top_mlp)
        return list(zip(widths[:-1], widths[1:]))

    def tables_of(self, rank: int) -> list[int]:
        """Tables placed on ``rank`` (round robin)."""
        return list(range(rank, self.num_tables, self.num_ranks))

    def mlp_params(self) -> int:
        """Weights and biases of both MLPs (replicated on every rank)."""
        return sum(i * o + o for i, o in self.bottom_layers() + self.top_layers())


DLRM_PRESETS: dict[str, dict] = {
    "dlrm-mlperf": dict(
        num_tables=26,
        embedding_dim=128,
        bottom_mlp=(512, 256, 128),
        top_mlp=(1024, 1024, 512, 256, 1),
        dense_features=13,
        rows_per_table=40_000_000,
        global_batch_size=65536,
        pooling_factor=1,
        name="dlrm-mlperf",
        source="facebookresearch/dlrm MLPerf Criteo Terabyte settings (arch-mlp-bot 13-512-256-128, "
        "arch-mlp-top 1024-1024-512-256-1, sparse feature size 128, 26 tables, "
        "max-ind-range 40M); global batch is our default",
    ),
    "dlrm-small": dict(
        num_tables=8,
        embedding_dim=16,
        bottom_mlp=(64, 16),
        top_mlp=(64, 1),
        dense_features=13,
        rows_per_table=10_000,
        global_batch_size=256,
        pooling_factor=4,
        name="dlrm-small",
        source="small test shape (ours)",
    ),
}


def dlrm_preset(name: str, num_ranks: int, **overrides) -> DLRMConfig:
    """A :class:`DLRMConfig` from a named preset with some fields replaced.

    Raises:
        ConfigError: unknown preset or invalid result.
    """
    try:
        fields = dict(DLRM_PRESETS[name.lower()])
    except KeyError:
        raise ConfigError(f"unknown DLRM preset {name!r}; choose one of {', '.join(DLRM_PRESETS)}") from None
    fields.update({k: v for k, v in overrides.items() if v is not None})
    return DLRMConfig(num_ranks=num_ranks, **fields)


def _attrs(layer: int, phase: str, role: str) -> list[Attr]:
    return [
        Attr("layer", layer, "int64_val"),
        Attr("micro_batch", 0 if phase not in ("grad_sync", "optim") else -1, "int64_val"),
        Attr("phase", phase, "string_val"),
        Attr("op_role", role, "string_val"),
    ]


class _DLRMRank:
    def __init__(self, c: DLRMConfig, rank: int, roofline: Roofline | None) -> None:
        self.c, self.rank, self.roof = c, rank, roofline
        self.b = RankTraceBuilder(rank)

    def comp(self, name: str, flops: int, elements: int, deps: Iterable[int], attrs: list[Attr]) -> int:
        nbytes = elements * self.c.dtype_bytes
        dur = self.roof.duration_ns(flops, nbytes) if self.roof else 0
        return self.b.comp(name, duration_ns=dur, num_ops=flops, tensor_bytes=nbytes, deps=deps, extra_attrs=attrs)

    def gemm(self, name: str, m: int, k: int, n: int, deps, attrs) -> int:
        return self.comp(name, gemm_flops(m, k, n), gemm_elements(m, k, n), deps, attrs)

    def mlp_forward(self, which: str, layers: list[tuple[int, int]], dep: list[int]) -> list[int]:
        bl = self.c.local_batch
        for i, (n_in, n_out) in enumerate(layers):
            g = self.gemm(f"{which}_mlp_gemm.fwd", bl, n_in, n_out, dep, _attrs(i, "fwd", f"{which}_mlp_gemm"))
            dep = [
                self.comp(
                    f"{which}_mlp_relu.fwd", 2 * bl * n_out, 2 * bl * n_out, [g], _attrs(i, "fwd", f"{which}_mlp_relu")
                )
            ]
        return dep

    def mlp_backward(
        self, which: str, layers: list[tuple[int, int]], dep: list[int], *, first_dgrad: bool
    ) -> tuple[list[int], dict[int, int]]:
        bl = self.c.local_batch
        wgrads: dict[int, int] = {}
        for i in reversed(range(len(layers))):
            n_in, n_out = layers[i]
            dep = [
                self.comp(
                    f"{which}_mlp_relu.bwd", 2 * bl * n_out, 3 * bl * n_out, dep, _attrs(i, "bwd", f"{which}_mlp_relu")
                )
            ]
            if i > 0 or first_dgrad:
                dep = [self.gemm(f"{which}_mlp_gemm.bwd", bl, n_out, n_in, dep, _attrs(i, "bwd", f"{which}_mlp_gemm"))]
            wgrads[i] = self.gemm(
                f"{which}_mlp_gemm.wgrad", n_in, bl, n_out, dep, _attrs(i, "wgrad", f"{which}_mlp_gemm")
            )
            dep = [wgrads[i]]
        return dep, wgrads

    def build(self, groups: ProcessGroups):
        c, b = self.c, self.b
        b.declare_groups(groups)
        tables = c.tables_of(self.rank)
        d, bl, B, dt = c.embedding_dim, c.local_batch, c.global_batch_size, c.dtype_bytes
        a2a_bytes = bl * c.num_tables * d * dt
        lookup_elems = B * c.pooling_factor * d
        dep: list[int] = []
        for k in tables:
            dep = [
                self.comp(
                    "embedding_lookup.fwd",
                    lookup_elems,
                    lookup_elems + B * d,
                    dep,
                    _attrs(-1, "fwd", "embedding_lookup") + [Attr("table", k, "int64_val")],
                )
            ]
        a2a = b.collective(
            "embedding_alltoall.fwd",
            CollectiveType.ALL_TO_ALL,
            a2a_bytes,
            pg_name=DEFAULT_PG,
            deps=dep,
            extra_attrs=_attrs(-1, "fwd", "embedding_alltoall"),
        )
        bottom = self.mlp_forward("bottom", c.bottom_layers(), dep)
        vectors = c.num_tables + 1
        inter_flops = 2 * bl * vectors * vectors * d
        inter_elems = bl * (vectors * d + vectors * vectors)
        dep = [self.comp("interaction.fwd", inter_flops, inter_elems, bottom + [a2a], _attrs(-1, "fwd", "interaction"))]
        dep = self.mlp_forward("top", c.top_layers(), dep)
        dep = [self.comp("loss.fwd", 4 * bl, 2 * bl, dep, _attrs(-1, "fwd", "loss"))]
        dep = [self.comp("loss.bwd", 4 * bl, 2 * bl, dep, _attrs(-1, "bwd", "loss"))]
        dep, top_w = self.mlp_backward("top", c.top_layers(), dep, first_dgrad=True)
        inter = self.comp("interaction.bwd", 2 * inter_flops, 2 * inter_elems, dep, _attrs(-1, "bwd", "interaction"))
        a2a = b.collective(
            "embedding_alltoall.bwd",
            CollectiveType.ALL_TO_ALL,
            a2a_bytes,
            pg_name=DEFAULT_PG,
            deps=[inter],
            extra_attrs=_attrs(-1, "bwd", "embedding_alltoall"),
        )
        dep, bottom_w = self.mlp_backward("bottom", c.bottom_layers(), [inter], first_dgrad=False)
        updates: list[int] = []
        for k in tables:
            dep = [
                self.comp(
                    "embedding_update.wgrad",
                    2 * lookup_elems,
                    2 * lookup_elems + B * d,
                    dep + [a2a],
                    _attrs(-1, "wgrad", "embedding_update") + [Attr("table", k, "int64_val")],
                )
            ]
            updates = dep
        waits = self._grad_buckets(top_w, bottom_w) + dep + updates + [a2a]
        params = c.mlp_params()
        self.comp("optimizer_step.optim", 2 * params, 4 * params, waits, _attrs(-1, "optim", "optimizer_step"))
        md = {"producer": PRODUCER, "model": c.name, "dlrm_config": json.dumps(dataclasses.asdict(c), sort_keys=True)}
        return b.build(md)

    def _grad_buckets(self, top_w: dict[int, int], bottom_w: dict[int, int]) -> list[int]:
        """All-reduce the MLP gradients in buckets, in the order they become final (top MLP first)."""
        c = self.c
        if c.num_ranks == 1:
            return []
        units = [(f"top{i}", top_w[i], c.top_layers()[i]) for i in sorted(top_w, reverse=True)] + [
            (f"bottom{i}", bottom_w[i], c.bottom_layers()[i]) for i in sorted(bottom_w, reverse=True)
        ]

        def elems(index: int) -> int:
            n_in, n_out = units[index][2]
            return n_in * n_out + n_out

        buckets = pack_buckets(range(len(units)), elems, bucket_limit_elems(c.grad_bucket_bytes, c.dtype_bytes))
        return [
            self.b.collective(
                "dp_grad_allreduce.grad_sync",
                CollectiveType.ALL_REDUCE,
                total * c.dtype_bytes,
                pg_name=DEFAULT_PG,
                deps=[units[i][1] for i in members],
                extra_attrs=[
                    Attr("layers", [units[i][0] for i in members], "string_list"),
                    Attr("micro_batch", -1, "int64_val"),
                    Attr("phase", "grad_sync", "string_val"),
                    Attr("bucket", index, "int64_val"),
                    Attr("op_role", "dp_grad_allreduce", "string_val"),
                ],
            )
            for index, (members, total) in enumerate(buckets)
        ]


def generate_dlrm(config: DLRMConfig, hardware=None) -> TraceSet:
    """The traces of one DLRM training iteration on every rank.

    Args:
        hardware: None (durations 0), a Roofline, a ``(peak_flops_per_s,
            mem_bandwidth_bytes_per_s)`` pair, or an object with those attributes.

    Raises:
        ConfigError: bad hardware values.
    """
    roof = Roofline.of(hardware)
    groups = ProcessGroups(config.num_ranks)
    traces = {r: _DLRMRank(config, r, roof).build(groups) for r in range(config.num_ranks)}
    return TraceSet(traces, groups.mapping())
