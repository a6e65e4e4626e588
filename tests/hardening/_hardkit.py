"""Small inputs built in the tests of the hardening suite, and the checks they share."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from tracekit.cli import cli
from tracekit.model.groups import pg_init_node
from tracekit.io import write_traceset
from tracekit.model import Attr, ExecutionTrace, Node, NodeType
from tracekit.sets.traceset import TraceSet


def run(*args: object):
    """Invoke the CLI in-process; returns click's Result (stdout/stderr apart)."""
    return CliRunner().invoke(cli, [str(a) for a in args])


def one_line_error(res, exit_code: int = 1) -> str:
    """Assert ``res`` failed with exactly one ``tracekit: error:`` line and no traceback; return the line."""
    assert res.exit_code == exit_code, (res.exit_code, res.stderr, res.exception)
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tracekit: error: "), res.stderr
    assert "Traceback" not in res.stderr
    return lines[0]


def leftovers(folder: Path) -> list[str]:
    """Temporary, lock or partial files the tools leave in ``folder`` (recursively)."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.name.startswith(".tk-"))


def ring_job(
    folder: Path,
    ranks: int = 2,
    *,
    name: str = "allreduce",
    pg: str = "0",
    duration_ns: int = 1000,
    comm_bytes: int = 1 << 20,
) -> Path:
    """A job of ``ranks`` ranks: one compute node, then an all-reduce in group ``pg``; returns the prefix."""
    traces = []
    for _ in range(ranks):
        init = pg_init_node(1, {pg: tuple(range(ranks))})
        comp = Node(id=2, name=name, type=NodeType.COMP_NODE, duration_ns=duration_ns)
        coll = Node(
            id=3,
            name=f"{name}_coll",
            type=NodeType.COMM_COLL_NODE,
            data_deps=[2],
            attrs=[Attr.infer("comm_type", 0), Attr.infer("comm_size", comm_bytes), Attr.infer("pg_name", pg)],
        )
        traces.append(ExecutionTrace([init, comp, coll]))
    prefix = folder / "job"
    write_traceset(TraceSet(traces), prefix)
    return prefix


def raw_et(path: Path, *nodes: dict) -> Path:
    """A `.et` file written field by field with protobuf (values the model refuses to encode pass through)."""
    from tracekit._proto import et_def_pb2 as pb
    from tracekit.io import frame

    parts = [frame(pb.GlobalMetadata(version="0.0.4").SerializeToString())]
    for fields in nodes:
        parts.append(frame(pb.Node(**fields).SerializeToString()))
    path.write_bytes(b"".join(parts))
    return path
