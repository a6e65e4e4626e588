"""tracekit reads what Chakra and ASTRA-sim write, and is lenient exactly where they are.

- ``resnet.0.et`` (Chakra 21585d8's own PyTorch converter output: group list as a Python repr) and ``chakra.0.et``
  (Chakra's feeder test trace: collectives without comm_type/comm_size, ctrl deps on missing ids) pass ``info``,
  ``validate`` (warnings, no errors) and ``replay`` without ``--no-check``; Chakra's decoder (mlc-chakra from the
  package index) reads as many nodes.
- Collectives written without ``comm_size`` replay as ASTRA-sim runs them: 0 bytes, latency only.
"""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from reference_tools import chakra_node_count
from tracekit.cli import cli
from tracekit.io import read_trace, read_traceset, write_traceset
from tracekit.model import Attr, CollectiveType, ExecutionTrace, Node, NodeType
from tracekit.replayer import replay
from tracekit.replayer.simulation.astra_config import import_astra_config
from tracekit.sets.traceset import TraceSet
from tracekit.checks.validate import validate_traceset

OTHERS = {"resnet": ("chakra-converter-resnet", "resnet", 14_391), "feeder": ("chakra-feeder-tests", "chakra", 3_664)}


def run(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


@pytest.mark.parametrize("which", sorted(OTHERS))
def test_info_validate_replay_accept_chakra_files(which, real_dir):
    folder, stem, nodes = OTHERS[which]
    prefix = str(real_dir / "chakra" / folder / stem)
    info = run("info", prefix, "--json")
    assert info.exit_code == 0 and f'"nodes": {nodes}' in info.stdout
    check = run("validate", prefix)
    assert check.exit_code == 0, check.stdout
    assert check.stdout.strip().splitlines()[-1].startswith(f"OK: 1 ranks, {nodes} nodes")
    assert not [line for line in check.stdout.splitlines() if line.startswith("error")]
    rep = run("replay", prefix, "--hw", "dgx-a100")
    assert rep.exit_code == 0, rep.output
    assert "iteration time" in rep.stdout


@pytest.mark.parametrize("which", sorted(OTHERS))
def test_chakra_decoder_reads_them_too(which, real_dir):
    folder, stem, nodes = OTHERS[which]
    path = real_dir / "chakra" / folder / f"{stem}.0.et"
    # node for node as tracekit reads them: tests/interop/test_chakra_reads_every_file.py
    assert chakra_node_count(path) == len(read_trace(path)) == nodes


def test_feeder_trace_warnings_name_the_lenient_reading(real_dir):
    report = validate_traceset(read_traceset(real_dir / "chakra" / "chakra-feeder-tests" / "chakra"))
    assert report.ok
    comm = [i for i in report.issues if i.check == "comm-attrs"]
    assert comm and all(i.severity == "warning" for i in comm)  # listed up to the per-check cap
    assert {i.message.split(":")[0] for i in comm if i.node_id is not None} == {
        "COMM node has no comm_size",
        "COMM_COLL node has no comm_type",
    }
    nodes = read_trace(real_dir / "chakra" / "chakra-feeder-tests" / "chakra.0.et").nodes
    # 14 of the 21 COMM_COLL nodes have neither (tests/core/test_io_real.py: collectives "MISSING": 14)
    assert sum(n.type == NodeType.COMM_COLL_NODE and n.get_attr("comm_type") is None for n in nodes) == 14


def _no_size_job(world: int) -> TraceSet:
    """Per rank: 5 us compute, then an all-reduce written without comm_size (as ASTRA-sim's own sets)."""
    traces = []
    for _ in range(world):
        comp = Node(0, "fwd", NodeType.COMP_NODE, duration_ns=5_000, attrs=[Attr("is_cpu_op", False, "bool_val")])
        coll = Node(
            1,
            "ar",
            NodeType.COMM_COLL_NODE,
            data_deps=[0],
            attrs=[
                Attr("is_cpu_op", False, "bool_val"),
                Attr("comm_type", int(CollectiveType.ALL_REDUCE), "int64_val"),
            ],
        )
        traces.append(ExecutionTrace([comp, coll]))
    return TraceSet(traces)


def test_collectives_without_comm_size_replay_as_astra_sim_runs_them(test_data_dir, tmp_path):
    # ASTRA-sim c459ab6 printed the same 17,280 ns on every rank of this set when the suite still ran its binary
    # (commit 874ad4b); the recorded cases of ../shared/reference/astra-sim have no collective without a size
    astra = test_data_dir / "astra"
    prefix = tmp_path / "nosize"
    write_traceset(_no_size_job(4), prefix)
    report = validate_traceset(read_traceset(prefix))
    assert (
        report.ok
        and [i.message for i in report.warnings]
        == ["COMM node has no comm_size: read as 0 bytes, as ASTRA-sim and Chakra's feeder do"] * 4
    )
    system, network = astra / "system_ring_splits4.json", astra / "network_ring_4.yml"
    result = replay(read_traceset(prefix), import_astra_config(system, network).spec)
    # latency only: 4 splits x ring all-reduce of 0 bytes on 4 ranks, e + 3(X + e + 0) + 3(X + e) with
    # X = 1 hop x 500 ns, e = 10 ns -> 3,070 ns per split (what both ASTRA-sim builds printed for a 0-byte
    # all-reduce: edge-all_reduce-size0, test_a_0_byte_all_reduce_is_latency_only_as_recorded); after 5 us of compute
    expected = 5_000 + 4 * (10 + 3 * 510 + 3 * 510)
    assert expected == 17_280
    assert [s.iteration_time_ns for s in result.ranks] == [expected] * 4


def test_a_0_byte_all_reduce_is_latency_only_as_recorded():
    from astra_reference import reference_case

    case = reference_case("edge-all_reduce-size0")  # 4-ring, 50 GB/s, 500 ns, e = 10, 1 split
    assert case.cycles("c459ab6") == case.cycles("518bd51") == [10 + 3 * 510 + 3 * 510] * 4


def test_info_names_the_comm_group_file(tmp_path):
    res = run(
        "-q",
        "generate",
        "micro",
        "--collective",
        "all_reduce",
        "--size",
        "4KiB",
        "--ranks",
        "8",
        "--group",
        "0-3",
        "-o",
        str(tmp_path / "g"),
    )
    assert res.exit_code == 0, res.output
    assert (tmp_path / "g.comm_groups.json").read_text().split() == ["{", '"1":', "[", "0,", "1,", "2,", "3", "]", "}"]
    info = run("info", str(tmp_path / "g"))
    assert (
        f"comm groups for ASTRA-sim (--comm-group-configuration): {tmp_path / 'g.comm_groups.json'} "
        f"(1 sub-group(s))" in info.stdout.replace("\n", "")
    )
