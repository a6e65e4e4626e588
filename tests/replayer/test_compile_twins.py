"""Ranks equal up to group names and peers are compiled once (issue 34: a TP x PP x DP job's pipeline stages).

The job: 4 ranks in two data-parallel groups (``g0`` = ranks 0 and 2, ``g1`` = 1 and 3); each rank launches a
kernel, all-reduces on its group and then the even ranks send to the next rank, which receives.  Ranks 0 and 2 differ
in nothing the compile reads (their files differ in ``pg_name`` and ``comm_dst``), rank 3 differs from rank 1 by its
kernel's duration.  Sharing must give the replay of compiling every rank, node by node.
"""

from __future__ import annotations

from tracekit.io import read_traceset, write_traceset
from tracekit.model import Attr, CollectiveType, Node, NodeType
from tracekit.replayer import ReplayOptions, replay
from tracekit.replayer.simulation import program as program_mod
from tracekit.replayer.simulation.rank_twins import CompileTwins, compile_inputs
from tracekit.replayer.simulation.compute import ComputeModel
from tracekit.replayer.simulation.specs import load_spec

from _engine_kit import coll, comp, p2p, traceset

GROUPS = {"g0": (0, 2), "g1": (1, 3)}


def _nodes(rank: int, kernel_ns: int = 40_000) -> list:
    pg = f"g{rank % 2}"
    last = p2p(4, True, rank + 1, rank, 1 << 20, [3]) if rank % 2 == 0 else p2p(4, False, rank - 1, rank, 1 << 20, [3])
    return [
        comp(1, 3_000, cpu=True, name="launch"),
        comp(2, kernel_ns, [1], name="fwd"),
        coll(3, CollectiveType.ALL_REDUCE, 8 << 20, [2], pg=pg),
        last,
    ]


def _prefix(tmp_path, per_rank) -> str:
    prefix = str(tmp_path / "job")
    write_traceset(traceset(per_rank, GROUPS), prefix)
    return prefix


def _job(tmp_path) -> str:
    return _prefix(tmp_path, [_nodes(r, 41_000 if r == 3 else 40_000) for r in range(4)])


def _compiled(monkeypatch) -> list[int]:
    compiled: list[int] = []
    real = program_mod.compile_rank
    monkeypatch.setattr(
        program_mod, "compile_rank", lambda trace, rank, *a: compiled.append(rank) or real(trace, rank, *a)
    )
    return compiled


def test_ranks_differing_in_group_and_peer_compile_once(tmp_path, monkeypatch):
    compiled = _compiled(monkeypatch)
    result = replay(read_traceset(_job(tmp_path)), "dgx-h100", options=ReplayOptions(fold=False))
    assert compiled == [0, 1, 3]  # rank 2 is rank 0's twin; rank 3's kernel differs from rank 1's
    assert result.node_count == 4 * 5  # the process-group declaration node of each rank counted


def test_twin_replay_equals_compiling_every_rank_node_by_node(tmp_path, monkeypatch):
    prefix = _job(tmp_path)
    shared = replay(read_traceset(prefix), "dgx-h100", options=ReplayOptions(fold=False))
    compiled = _compiled(monkeypatch)
    monkeypatch.setattr(CompileTwins, "find", lambda self, trace: (None, None))
    alone = replay(read_traceset(prefix), "dgx-h100", options=ReplayOptions(fold=False))
    assert compiled == [0, 1, 2, 3]
    assert shared.to_dict(include_schedule=True) == alone.to_dict(include_schedule=True)
    assert [r.iteration_time_ns for r in shared.ranks] == [r.iteration_time_ns for r in alone.ranks]


def test_a_value_that_is_not_an_integer_is_compiled_alone(tmp_path, monkeypatch):
    # rank 2's kernel carries a float stream: read as 1 by the integer rule, the same number as rank 0's int 1,
    # but only a rank whose attributes are plain integers is shared
    def nodes(r: int) -> list:
        out = _nodes(r)
        stream = Attr("stream", 1.0, "double_val") if r == 2 else Attr("stream", 1, "int64_val")
        out[1] = Node(2, "fwd", NodeType.COMP_NODE, data_deps=[1], duration_ns=40_000, attrs=[out[1].attrs[0], stream])
        return out

    prefix = _prefix(tmp_path, [nodes(r) for r in range(4)])
    ts = read_traceset(prefix)
    compute = ComputeModel(load_spec("dgx-h100"))
    assert compile_inputs(ts[0], "trace", "analytical", compute) is not None
    assert compile_inputs(ts[2], "trace", "analytical", compute) is None
    compiled = _compiled(monkeypatch)
    replay(ts, "dgx-h100", options=ReplayOptions(fold=False))
    assert compiled == [0, 1, 2]  # rank 3 is rank 1's twin
