"""Constants of the NCCL-like collective model (:mod:`.nccl_model`): the spec's ``[nccl]`` table.

Defaults are NCCL's own (NVIDIA/nccl release v2.30.7-1; sources on :class:`NcclConstants`); a hardware preset
(:mod:`.hardware`) overrides what it calibrates. :mod:`.spec_toml` reads and writes the table.
"""

from __future__ import annotations

from dataclasses import dataclass

#: NCCL's latency classes of a link (``hwLatencies`` rows).
NCCL_LINKS = ("nvlink", "pci", "net")
#: NCCL algorithms the model knows.
NCCL_ALGORITHMS = ("tree", "ring", "nvls", "nvls_tree")
#: NCCL protocols, in the order of NCCL's latency tables.
NCCL_PROTOCOLS = ("LL", "LL128", "Simple")

__all__ = ["NCCL_ALGORITHMS", "NCCL_LINKS", "NCCL_PROTOCOLS", "NcclConstants"]


def _proto_table(**rows: tuple[float, float, float]):
    return tuple((a, rows[a]) for a in NCCL_ALGORITHMS)


@dataclass(frozen=True)
class NcclConstants:
    """Constants of the NCCL-like model (see :mod:`.nccl_model`).

    Defaults are NCCL's own (NVIDIA/nccl release v2.30.7-1, ``src/graph/tuning.cc``:
    ``ncclTunerConstantsDefaults``; ``src/graph/topo.h``: NVLink per-link speeds;
    ``src/graph/search.cc``: ``speedArrayInter``); latencies in microseconds per
    (algorithm, protocol) with protocols in the order LL, LL128, Simple.  A preset
    overrides what it calibrates (with the measurement it was fitted to).

    Attributes:
        algorithms: enabled algorithms: ``tree`` (all-reduce), ``ring``,
            ``nvls`` (NVLink SHARP all-reduce inside one node) and ``nvls_tree``
            (NVLS inside nodes, a tree across them; all-reduce).
        protocols: enabled protocols.
        base_latency_us: ``((algorithm, (LL, LL128, Simple)), ...)``: NCCL ``baseLatencies``.
        hw_latency_us: ``((link, ((algorithm, (LL, LL128, Simple)), ...)), ...)``: NCCL ``hwLatencies``.
        channels: NCCL channels (rings) inside a node.
        per_channel_bw_gbps: ring bandwidth of one channel inside a node, GB/s;
            ``channels x per_channel_bw_gbps``, at most the innermost dimension's
            ``bandwidth_gbps``, is the Simple-protocol ring bus bandwidth over
            NVLink (NCCL: ``nChannels x bwIntra``).  0 = the innermost
            dimension's ``bandwidth_gbps`` split over the channels.
        nic_speeds_gbps: the per-channel speeds NCCL's topology search tries
            across nodes (``speedArrayInter``); a NIC of B GB/s runs at the
            largest one <= B.
        nics_per_node: NICs (rails) per node; 0 = one per GPU (DGX).
        net_overhead_us: NCCL ``getNetOverhead`` (1 us on Intel CPUs), the
            minimum step latency of an inter-node ring (x3 for Simple).
        tree_per_channel_max_bw_gbps: NCCL ``perChMaxTreeBws`` for 1, 2 and
            more nodes (Ampere row by default).
        ll_max_bw_gbps: NCCL ``llMaxBws`` for 1, 2 and more nodes (one node:
            Ampere 87.7; several nodes: Intel CPUs 39.0, 20.4).
        ll128_per_channel_max_bw_gbps: NCCL ``perChMaxRingLL128Bws`` (Ampere 20).
        nvls_efficiency: NCCL ``nvlsEfficiency`` (0.85 on Hopper).
        latency_floor_us: smallest time any collective takes (0 = none): one kernel launch.
        gpus_per_process: GPUs one process (one host thread) drives, as nccl-tests ``-g N``:
            their kernels are launched one after another, so the floor is this many launches.
        pcie_bw_gbps: GPU-to-NIC PCIe path per NIC, GB/s (NCCL's topology: width x
            generation speed / 80, so Gen4 x16 = 24, Gen5 x16 = 48; ``src/graph/topo.cc``
            ``kvDictPciGen``); a NIC runs at most this fast (0 = no limit).
        net_efficiency: achieved fraction of ``min(NIC, PCIe)`` per NIC under NCCL
            (GPUDirect RDMA, proxy and protocol overheads), the measured network
            bus-bandwidth ceiling divided by the NICs' nominal total (1 = nominal).
        tree_net_factor: how many times a NIC's bandwidth a tree on up to 2 nodes
            gets (NCCL's ``bwIntra``/``bwInter`` switch: 2, each node sending and
            receiving every byte once); 1 where the NIC path cannot run both
            directions at full speed (measured).
        hbm_bytes_per_byte: device-memory bytes a rank moves per buffer byte besides
            the links (reading its input, writing the result, reducing received data):
            every candidate's time gets ``hbm_bytes_per_byte x n / mem_bandwidth_gbps``
            of the spec's device, whatever the rank count (0 = none; fitted).
        net_latency_reference_ns: the network ``latency_ns`` that the ``net`` row of
            ``hw_latency_us`` stands for: a spec whose outermost spanned dimension
            has another ``latency_ns`` adds the difference to every inter-node step
            (so sweeping ``network[i].latency_ns`` moves collective times); < 0 =
            ``latency_ns`` not used (NCCL's tables alone).
        copy_latency_us: time of a one-rank collective besides its copy (kernel launch);
            an out-of-place one-rank all-reduce copies ``n`` bytes (read + write) at the
            device's memory bandwidth x ``memory_efficiency``.
    """

    algorithms: tuple[str, ...] = ("tree", "ring")
    protocols: tuple[str, ...] = NCCL_PROTOCOLS
    base_latency_us: tuple = _proto_table(
        tree=(6.8, 14.0, 8.4), ring=(6.6, 14.0, 8.4), nvls=(0.0, 0.0, 0.0), nvls_tree=(0.0, 0.0, 0.0)
    )
    hw_latency_us: tuple = (
        (
            "nvlink",
            _proto_table(
                tree=(0.6, 1.25, 4.0), ring=(0.6, 1.9, 3.4), nvls=(0.0, 0.0, 25.0), nvls_tree=(0.0, 0.0, 25.0)
            ),
        ),
        (
            "pci",
            _proto_table(tree=(1.0, 1.9, 4.0), ring=(1.0, 2.5, 5.7), nvls=(0.0, 0.0, 0.0), nvls_tree=(0.0, 0.0, 0.0)),
        ),
        (
            "net",
            _proto_table(
                tree=(5.0, 8.5, 14.0), ring=(2.7, 4.0, 14.0), nvls=(0.0, 0.0, 18.0), nvls_tree=(0.0, 0.0, 20.9)
            ),
        ),
    )
    channels: int = 12
    per_channel_bw_gbps: float = 0.0
    nic_speeds_gbps: tuple[float, ...] = (
        48.0,
        30.0,
        28.0,
        24.0,
        20.0,
        18.0,
        15.0,
        12.0,
        10.0,
        9.0,
        7.0,
        6.0,
        5.0,
        4.0,
        3.0,
        2.4,
        1.2,
        0.24,
        0.12,
    )
    nics_per_node: int = 0
    net_overhead_us: float = 1.0
    tree_per_channel_max_bw_gbps: tuple[float, float, float] = (24.0, 23.6, 17.8)
    ll_max_bw_gbps: tuple[float, float, float] = (87.7, 39.0, 20.4)
    ll128_per_channel_max_bw_gbps: float = 20.0
    nvls_efficiency: float = 0.85
    latency_floor_us: float = 0.0
    gpus_per_process: int = 1
    pcie_bw_gbps: float = 0.0
    net_efficiency: float = 1.0
    tree_net_factor: float = 2.0
    copy_latency_us: float = 0.0
    net_latency_reference_ns: float = -1.0
    hbm_bytes_per_byte: float = 0.0

    def base_latency(self, algorithm: str, protocol: str) -> float:
        """NCCL ``baseLatencies[algorithm][protocol]``, us.

        Raises:
            KeyError: ``algorithm`` is not in :attr:`base_latency_us`.
            ValueError: ``protocol`` is not one of :data:`NCCL_PROTOCOLS`.
        """
        return dict(self.base_latency_us)[algorithm][NCCL_PROTOCOLS.index(protocol)]

    def hw_latency(self, link: str, algorithm: str, protocol: str) -> float:
        """NCCL ``hwLatencies[link][algorithm][protocol]``: per-hop latency, us.

        Raises:
            KeyError: ``link`` or ``algorithm`` is not in :attr:`hw_latency_us`.
            ValueError: ``protocol`` is not one of :data:`NCCL_PROTOCOLS`.
        """
        return dict(dict(self.hw_latency_us)[link])[algorithm][NCCL_PROTOCOLS.index(protocol)]
