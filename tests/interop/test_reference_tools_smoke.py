"""The reference tools start and agree with the facts measured with them (../shared/tools/README.md)."""

from __future__ import annotations

from reference_tools import chakra_node_count, feeder_drain


def test_chakra_decoder_and_feeder_read_reference_file(real_dir):
    path = real_dir / "chakra" / "chakra-feeder-tests" / "chakra.0.et"
    assert chakra_node_count(path) == 3_664  # shared/real/README.md: 3,643 COMP + 21 COMM_COLL
    result = feeder_drain(path)[path]
    assert result.nodes_issued == 3_664
