"""The reference tools start and agree with the facts measured with them (../shared/tools/README.md)."""

from __future__ import annotations

from reference_tools import astra_sim, chakra_node_count, feeder_drain


def test_astra_sim_reference_allreduce(real_dir, test_data_dir, tmp_path):
    # ../shared/tools/README.md: ring, 4 splits, 50 GB/s, 500 ns, endpoint-delay 10, active-chunks 1 -> 43,000 cycles
    prefix = real_dir / "chakra" / "astra-sim-allreduce-4npus" / "all_reduce"
    ranks = astra_sim(
        prefix,
        system=test_data_dir / "astra" / "system_ring_splits4.json",
        network=test_data_dir / "astra" / "network_ring_4.yml",
        workdir=tmp_path,
    )
    assert {r: v.finished_ns for r, v in ranks.items()} == {0: 43_000, 1: 43_000, 2: 43_000, 3: 43_000}


def test_chakra_decoder_and_feeder_read_reference_file(real_dir):
    path = real_dir / "chakra" / "chakra-feeder-tests" / "chakra.0.et"
    assert chakra_node_count(path) == 3_664  # shared/real/README.md: 3,643 COMP + 21 COMM_COLL
    result = feeder_drain(path)[path]
    assert result.nodes_issued == 3_664
