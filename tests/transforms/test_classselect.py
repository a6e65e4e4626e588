"""KeepRanks and KeepIteration on a rank-class set without per-rank traces: equal to the expanded job's result."""

from __future__ import annotations

import pytest
from _tfhelpers import class_set  # noqa: F401  (the shared fixture)
from columnar_cases import digest

from tracekit.errors import TransformError
from tracekit.transforms import KeepIteration, KeepRanks, Pipeline


@pytest.fixture(scope="module")
def expanded(class_set):
    return class_set.to_traceset()


def _on_classes(cs, steps, out):
    from tracekit.sets.classset import read_class_set
    from tracekit.transforms.classrescale import transform_classes

    manifest, n_in, n_out = transform_classes(cs, steps, out, source="job")
    return read_class_set(manifest), n_in, n_out


@pytest.mark.parametrize(
    ("ranks", "n_classes"),
    [
        ("0-3", 1),  # stage 0 alone: the pipeline sends and recvs lose their peers
        ("0,4", 2),  # one rank per stage: tensor- and data-parallel groups shrink to one rank
        ("0,1,4,5", 2),  # one data-parallel replica
        ("1,2,5,6", 2),  # tensor- and data-parallel groups all cut to one rank: still one class per stage
        # the old class splits three ways: rank 0 keeps its tensor- and data-parallel groups ({0,1}, {0,2}),
        # rank 1 only the tensor-parallel one ({1,3} is cut to one rank), rank 2 only the data-parallel one
        ("0,1,2", 3),
        ("0-7", 2),  # everything: the same job
    ],
)
def test_keep_ranks_on_classes_equals_expanded(class_set, expanded, ranks, n_classes, tmp_path):
    step = KeepRanks(ranks)
    out, n_in, n_out = _on_classes(class_set, [step], tmp_path / "k")
    want = Pipeline([step]).run(expanded, source="job")
    assert out.world_size == len(step.ranks) == len(want)
    assert len(out.classes) == n_classes
    assert digest(out.to_traceset()) == digest(want)
    assert (n_in, n_out) == (sum(len(t) for t in expanded), sum(len(t) for t in want))


def test_keep_ranks_partial_error_is_the_same(class_set, expanded, tmp_path):
    step = KeepRanks("0,1", partial="error")
    with pytest.raises(TransformError, match="loses ranks outside the kept subset") as on_set:
        step.apply(expanded)
    with pytest.raises(TransformError, match="loses ranks outside the kept subset") as on_classes:
        _on_classes(class_set, [step], tmp_path / "e")
    assert on_classes.value.rank == on_set.value.rank == 0
    with pytest.raises(TransformError, match=r"ranks \[9\] are not in the trace set"):
        _on_classes(class_set, [KeepRanks("0,9")], tmp_path / "m")


def test_keep_iteration_on_classes_equals_expanded(class_set, expanded, tmp_path):
    # the generated traces carry no ProfilerStep markers; fc1/fc2 GEMMs split each layer the same way
    steps = [KeepIteration(2, marker="fc{n}_gemm.fwd"), KeepRanks("0,1,4,5")]
    out, _, n_out = _on_classes(class_set, steps, tmp_path / "i")
    want = Pipeline(steps).run(expanded, source="job")
    assert digest(out.to_traceset()) == digest(want)
    assert n_out == sum(len(t) for t in want) < sum(len(t) for t in expanded)


def test_cli_keeps_ranks_of_a_class_set_as_classes(class_set, expanded, tmp_path):
    from click.testing import CliRunner

    from tracekit.sets.classset import read_class_set
    from tracekit.cli import cli

    res = CliRunner().invoke(
        cli, ["transform", str(class_set.manifest), "-o", str(tmp_path / "k"), "--keep-ranks", "0-3"]
    )
    assert res.exit_code == 0, res.output
    out = read_class_set(tmp_path / "k.classes.json")
    assert out.world_size == 4 and [c.ranks for c in out.classes] == [(0, 1, 2, 3)]
    assert not list(tmp_path.glob("k.[0-9]*.et"))  # no rank files
    want = KeepRanks("0-3").apply(expanded)
    assert [len(out.to_traceset()[r]) for r in range(4)] == [len(want[r]) for r in range(4)]


def test_cli_keep_iteration_on_a_class_set_without_markers_fails_cleanly(class_set, tmp_path):
    from click.testing import CliRunner

    from tracekit.cli import cli

    res = CliRunner().invoke(
        cli, ["transform", str(class_set.manifest), "-o", str(tmp_path / "i"), "--keep-iteration", "3"]
    )
    assert res.exit_code == 1
    assert "no iteration 3: no node is named like 'ProfilerStep#N'" in res.output
    assert list(tmp_path.iterdir()) == []  # nothing half-written


def test_keep_ranks_refuses_a_slot_that_is_not_only_a_group_or_peer():
    """A slot value also carried by a compute node would be renamed there too: no class-wise answer."""
    from tracekit.model.groups import pg_init_node
    from tracekit.model import Attr, ExecutionTrace, Node, NodeType
    from tracekit.transforms.classrescale import ClassState
    from tracekit.transforms.classselect import keep_ranks_classes

    pg = Attr("pg_name", "5", "string_val")
    nodes = [
        pg_init_node(0, {"5": (0, 1), "6": (2, 3)}),
        Node(1, "ar", NodeType.COMM_COLL_NODE, data_deps=[0], attrs=[pg, Attr("comm_size", 8)]),
        Node(2, "mm", NodeType.COMP_NODE, data_deps=[1], duration_ns=5, attrs=[pg]),
    ]
    cls = ClassState(ExecutionTrace(nodes, rank=0), (0, 1, 2, 3), (pg,), (("5",), ("5",), ("6",), ("6",)))
    with pytest.raises(TransformError, match="varies attributes other than group names and peers"):
        keep_ranks_classes([cls], 4, KeepRanks("0,2"))
