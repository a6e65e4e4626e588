"""Bugs the type checker found in the replayer (issue 13 item 5: mypy on the replayer modules)."""

from __future__ import annotations

import pytest

from tracekit.errors import ReplayError
from tracekit.model import Attr, Node, NodeType
from tracekit.replayer.simulation.program import ReplayOptions
from tracekit.replayer.simulation.run import replay
from tests.replayer._engine_kit import comp, one_dim, traceset


def _unknown_collective(node_id: int, deps: list[int]) -> Node:
    """A collective whose ``comm_type`` is 99 (no CollectiveType has that number)."""
    attrs = [
        Attr("is_cpu_op", False, "bool_val"),
        Attr("comm_type", 99, "int64_val"),
        Attr("comm_size", 1024, "int64_val"),
        Attr("pg_name", "0", "string_val"),
    ]
    return Node(node_id, "mystery_collective", NodeType.COMM_COLL_NODE, data_deps=deps, duration_ns=500, attrs=attrs)


@pytest.mark.parametrize("fold", [False, True])
def test_measured_model_without_checks_names_the_node_of_an_unknown_comm_type(tmp_path, fold):
    """``Instance.comm_type`` is ``int | None`` and the collective table converts it with ``CollectiveType(...)``.

    The measured model never converted it while costing, so with the checks off an unknown type got through the
    simulation and ``build_result`` raised a bare ``ValueError: 99 is not a valid CollectiveType`` (a traceback
    in the CLI). It is now a ReplayError naming the file, rank and node, as with the other models.
    """
    from tracekit.io import write_traceset

    write_traceset(traceset([[comp(1, 100), _unknown_collective(2, [1])] for _ in range(2)]), tmp_path / "job")
    options = ReplayOptions(collective_model="measured", check=False, fold=fold)
    with pytest.raises(ReplayError, match="unknown comm_type 99") as info:
        replay(str(tmp_path / "job"), one_dim(2, 100.0, 1000.0), options=options)
    assert info.value.rank == 0
    assert info.value.node_id == 2
    assert str(info.value.path).endswith("job.0.et")
