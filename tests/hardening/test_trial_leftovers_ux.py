"""Leftovers of the fresh-user trial (session of 2026-12-01): a lone rank file, the NIC cap, --top, analyze, YAML."""

from __future__ import annotations

import dataclasses
import json
import logging
import shutil
from pathlib import Path

import pytest
from _hardkit import one_line_error, run

REPO = Path(__file__).resolve().parents[2]
CHAKRA = REPO / "sample_traces" / "chakra"  # ASTRA-sim's all_reduce.{0..3}.et (sample_traces/README.md)


def test_one_file_of_astra_sims_four_rank_set_is_refused_naming_the_node_the_group_and_the_command():
    # all_reduce.0.et holds one ALL_REDUCE (node 0, 1 MiB) without pg_name: ASTRA-sim runs it over the 4 NPUs
    # whose files lie beside it; alone it was replayed over 1 rank in 0 ns, without a word
    line = one_line_error(run("replay", CHAKRA / "all_reduce.0.et", "--hw", "dgx-a100"))
    assert line == (
        f"tracekit: error: {CHAKRA / 'all_reduce.0.et'}: rank 0: node 0: ALL_REDUCE without a process group spans "
        "every rank of the job, and the set expects 4 ranks (4 rank files all_reduce.0.et ... all_reduce.3.et lie "
        "beside it) but only 1 is given: a collective over 1 rank takes 0 ns; pass the whole set: "
        f"tracekit replay {CHAKRA / 'all_reduce'}"
    )
    # unfolded, and two of the four files: the same check (the group of 2 is not the 4 ASTRA-sim ran)
    assert "node 0: ALL_REDUCE" in one_line_error(
        run("replay", CHAKRA / "all_reduce.0.et", "--hw", "dgx-a100", "--no-fold")
    )
    two = one_line_error(run("replay", CHAKRA / "all_reduce.0.et", CHAKRA / "all_reduce.1.et", "--hw", "dgx-a100"))
    assert "but only 2 are given: a collective over 2 ranks is timed as a smaller group" in two
    # a later rank alone names the whole set too (not only "the job has 3 ranks")
    assert one_line_error(run("replay", CHAKRA / "all_reduce.2.et", "--hw", "dgx-a100")).endswith(
        f"4 rank files of this set lie beside it (all_reduce.0.et ... all_reduce.3.et): pass the whole set: "
        f"tracekit replay {CHAKRA / 'all_reduce'}"
    )
    # the whole set, as the message says: ASTRA-sim's 1 MiB all-reduce over 4 ranks takes time
    whole = run("replay", CHAKRA / "all_reduce", "--hw", "dgx-a100", "--json")
    assert whole.exit_code == 0 and '"iteration_time_ns": 0' not in whole.stdout


def test_the_python_api_refuses_the_lone_file_too():
    from tracekit.errors import ReplayError
    from tracekit.io import read_traceset
    from tracekit.replayer import replay

    with pytest.raises(ReplayError, match=r"node 0: ALL_REDUCE .* expects 4 ranks") as info:
        replay(read_traceset(CHAKRA / "all_reduce.0.et"), "dgx-a100")
    assert (info.value.path, info.value.rank, info.value.node_id) == (str(CHAKRA / "all_reduce.0.et"), 0, 0)


def test_a_lone_file_without_siblings_replays_with_a_one_line_warning(tmp_path, caplog):
    from tracekit.io import read_traceset
    from tracekit.replayer import replay

    shutil.copy(CHAKRA / "all_reduce.0.et", tmp_path / "lonely.0.et")
    with caplog.at_level(logging.WARNING, logger="tracekit.replayer"):
        result = replay(read_traceset(tmp_path / "lonely.0.et"), "dgx-a100")
    assert result.iteration_time_ns == 0  # one rank: the all-reduce has nobody to talk to
    (record,) = [r for r in caplog.records if r.name == "tracekit.replayer"]
    assert record.getMessage() == (
        f"{tmp_path / 'lonely.0.et'}: rank 0: node 0: ALL_REDUCE without a process group spans every rank of the "
        "job, and the job has 1 rank: it takes 0 ns; if the job had more ranks, give every rank's file "
        "(<prefix>.<rank>.et)"
    )


@pytest.mark.parametrize(
    "nic_gbps, channels, net_gbps",
    [
        (25.0, 1, 24.0),  # HDR: one channel of 24
        (50.0, 1, 48.0),  # NDR 400 Gb/s: one channel of 48 (as before)
        (100.0, 2, 96.0),  # XDR 800 Gb/s: two channels of 48 on the NIC (capped at 48 before)
        (200.0, 4, 192.0),
        (1600.0, 32, 1536.0),  # one rail per node: at most 32 ring channels (MAXCHANNELS / 2)
    ],
)
def test_the_nccl_model_packs_channels_onto_a_nic_faster_than_one_channel(nic_gbps, channels, net_gbps):
    from dataclasses import replace

    from tracekit.replayer.simulation.specs import load_spec
    from tracekit.replayer.simulation.nccl_model import NcclModel

    # DGX H100 fitted to 32 ranks (4 nodes), the IB dimension at the swept speed; a group of one rank per node
    # (a data-parallel group under tp 8) crosses the network on one NIC per node.  NCCL's search
    # (src/graph/search.cc, v2.30.7-1) runs channels at 48 GB/s, the top of speedArrayInter, and puts a channel
    # on a NIC while the NIC has 48 GB/s left: floor(B / 48) channels
    base = load_spec("dgx-h100").fitted(32)
    network = (base.network[0], replace(base.network[1], bandwidth_gbps=nic_gbps))
    model = NcclModel(replace(base, network=network))
    assert model.nic_channels(nic_gbps, 1) == (channels, net_gbps / channels)
    shape = model.shape(model.placement((0, 8, 16, 24)))
    assert (shape.nodes, shape.net_bw_gbps) == (4, net_gbps)
    # ring Simple all-reduce: busBw = the network's, algBw = busBw x p / (2 (p - 1)) = busBw x 4 / 6
    (ring,) = [
        c for c in model.candidates("all_reduce", 1 << 30, shape) if (c.algorithm, c.protocol) == ("ring", "Simple")
    ]
    assert ring.alg_bw_gbps == pytest.approx(net_gbps * 4 / 6, rel=1e-12)


def test_a_sweep_of_the_nic_bandwidth_says_how_the_nccl_model_uses_it(tmp_path):
    res = run(
        "generate", "micro", "--collective", "all_reduce", "--size", "1MiB", "--ranks", "16", "-o", tmp_path / "ar"
    )
    assert res.exit_code == 0, res.stderr
    args = ["sweep", tmp_path / "ar", "--hw", "dgx-h100", "--collective-model", "nccl", "--executor", "serial"]
    res = run(*args, "--vary", "network[1].bandwidth_gbps=25,50,100", "-o", tmp_path / "sw")
    assert res.exit_code == 0, res.stderr
    notes = [ln for ln in res.stdout.splitlines() if ln.startswith("nccl model:")]
    # 16 ranks = 2 DGX H100 nodes of 8 NICs; inside a node the ring runs 16 channels x 23.175 = 370.8 GB/s
    assert notes == [
        "nccl model: network[1].bandwidth_gbps is used as whole channels per NIC at NCCL's per-channel speeds "
        "(search.cc speedArrayInter): 25 -> 24 (1 x 24), 50 -> 48 (1 x 48), 100 -> 96 (2 x 48) GB/s",
        "nccl model: from network[1].bandwidth_gbps = 50 on, a node's 8 NICs (8 x 48 GB/s) carry at least its "
        "ring inside the node (370.8 GB/s), which then bounds rings across nodes",
    ]
    assert json.loads((tmp_path / "sw" / "sweep.json").read_text())["notes"] == notes
    # NVLink swept above what 16 channels carry: said too; the alpha-beta model uses every GB/s (no note)
    res = run(*args, "--vary", "network[0].bandwidth_gbps=300,450", "-o", tmp_path / "sw0")
    assert [ln for ln in res.stdout.splitlines() if ln.startswith("nccl model:")] == [
        "nccl model: network[0].bandwidth_gbps is used up to channels x per_channel_bw_gbps (the ring inside a "
        "node): 450 -> 370.8 GB/s"
    ]
    res = run(*args[:4], "--collective-model", "alpha_beta", "--executor", "serial", "--vary",
              "network[1].bandwidth_gbps=25,100", "-o", tmp_path / "sw1")  # fmt: skip
    assert res.exit_code == 0 and "nccl model:" not in res.stdout
    # the 'wrote' line is one line, however long its three paths (it wrapped at 120 columns)
    out = tmp_path / "sw1"
    assert (
        res.stderr
        == f"2 point(s) on 16 ranks (serial); wrote {out / 'sweep.csv'}, {out / 'sweep.json'}, {out / 'sweep.html'}\n"
    )


@pytest.mark.parametrize("command", [["replay", "--hw", "dgx-a100"], ["info"]])
def test_top_is_bounded_like_every_range_option(command):
    from tracekit.cli._options import MAX_TOP
    from tracekit.model.node import MAX_RANKS

    assert MAX_TOP == MAX_RANKS  # one row per rank at most, and tracekit handles 2^20 ranks
    for top, exit_code, message in [
        ("0", 1, "0 is not in the range 1<=x<=1048576"),
        ("1048577", 1, "1048577 is not in the range 1<=x<=1048576"),
        ("99999999999999999999999", 1, "99999999999999999999999 is not in the range 1<=x<=1048576"),
        ("ten", 2, "'ten' is not a valid integer"),
    ]:
        res = run(command[0], CHAKRA / "all_reduce", *command[1:], "--top", top)
        line = one_line_error(res, exit_code)
        # (in-process, click names the program 'cli' in the help hint)
        assert line == f"tracekit: error: Invalid value for '--top': {message} (see 'cli {command[0]} --help')"
        assert res.stdout == ""
    assert run(command[0], CHAKRA / "all_reduce", *command[1:], "--top", str(MAX_TOP)).exit_code == 0


def test_analyze_of_a_set_without_measured_nodes_says_so_in_one_line_not_empty_tables():
    # ASTRA-sim's all_reduce.{0..3}.et: one COMM_COLL node per rank, no compute node, durations 0
    res = run("analyze", CHAKRA / "all_reduce")
    assert one_line_error(res) == (
        f"tracekit: error: {CHAKRA / 'all_reduce'}: nothing to analyze: none of the 4 nodes of the 4 rank(s) has a "
        "measured duration (0 compute nodes); analyze reads the measured times of a converted capture; "
        "tracekit replay times a trace without them"
    )
    assert res.stdout == ""
    assert run("analyze", CHAKRA / "all_reduce", "--json").stdout == ""


def test_analyze_of_a_kineto_file_without_timed_events_says_so_in_one_line(tmp_path):
    # a profiler dump with only a metadata event and an instant event: nothing with a duration
    path = tmp_path / "kineto_rank0.json"
    path.write_text(
        json.dumps(
            {
                "schemaVersion": 1,
                "traceEvents": [
                    {"name": "process_name", "ph": "M", "pid": 1, "tid": 0, "args": {"name": "python"}},
                    {"name": "mark", "ph": "i", "ts": 5, "pid": 1, "tid": 1, "s": "t"},
                ],
            }
        )
    )
    res = run("analyze", path)
    assert one_line_error(res) == (
        f"tracekit: error: {path}: nothing to analyze: no kernel, CPU op or communication event with a duration "
        "in the file"
    )
    assert res.stdout == ""


@pytest.mark.parametrize(
    "name, text, message",
    [
        # PyYAML prints these over 4-7 lines (problem, context, the line again with a caret)
        ("net.yml", "topology: [ Ring ]\nnpus_count: [ 4 ]\nthis line: has: two colons\n",
         "not valid YAML at line 3, column 15: mapping values are not allowed here"),
        ("net.yml", "topology: [ Ring\nnpus_count: [ 4 ]\n",
         "not valid YAML at line 2, column 11: expected ',' or ']', but got ':' (while parsing a flow sequence at "
         "line 1, column 11)"),
        ("net.yml", "topology: [ Ring ]\n\tnpus_count: 4\n",
         "not valid YAML at line 2, column 1: found character '\\t' that cannot start any token"),
        ("sys.json", '{"a": 1,\n "b": }\n', "not valid JSON at line 2, column 7: Expecting value"),
    ],
)  # fmt: skip
def test_an_astra_config_parse_error_is_one_line_with_file_line_and_column(tmp_path, name, text, message):
    data = REPO / "tests" / "data" / "astra"
    (tmp_path / name).write_text(text)
    system = tmp_path / name if name.endswith(".json") else data / "system_ring_splits1.json"
    network = tmp_path / name if name.endswith(".yml") else data / "network_ring_4.yml"
    res = run("hw", "import-astra", "--system", system, "--network", network, "-o", tmp_path / "s.toml")
    assert one_line_error(res) == f"tracekit: error: {tmp_path / name}: {message}"
    assert not (tmp_path / "s.toml").exists()


@pytest.mark.parametrize(
    "args, message",
    [
        (["replay", CHAKRA / "all_reduce", "--hw"], "Option '--hw' requires an argument (see 'cli replay --help')"),
        (["info", CHAKRA / "all_reduce", "--top"], "Option '--top' requires an argument (see 'cli info --help')"),
        (["convert", "pytorch", "--et"], "Option '--et' requires an argument (see 'cli convert pytorch --help')"),
        (["hw", "import-astra", "--system"], "Option '--system' requires an argument (see 'cli hw import-astra --help')"),
        (["export", "astra", CHAKRA / "all_reduce", "--hw"], "Option '--hw' requires an argument (see 'cli export astra --help')"),
    ],
)  # fmt: skip
def test_an_option_without_its_value_names_the_commands_help_like_every_usage_error(args, message):
    # click's option parser raises these without a context: the line ended without the help hint, and in a
    # nested group (convert, hw, generate, export) the hint named the group, not the command
    assert one_line_error(run(*args), 2) == f"tracekit: error: {message}"


def test_dump_of_a_prefix_names_its_rank_files_and_the_command_for_one(tmp_path):
    res = run("dump", CHAKRA / "all_reduce")  # was: "No such file or directory"
    first, last = CHAKRA / "all_reduce.0.et", CHAKRA / "all_reduce.3.et"
    assert one_line_error(res) == (
        f"tracekit: error: {CHAKRA / 'all_reduce'}: dump takes one trace file; this names 4 rank file(s) "
        f"({first} ... {last}): dump one, e.g. tracekit dump {first} -o all_reduce.0.json"
    )
    assert (
        one_line_error(run("dump", tmp_path / "nothing"))
        == f"tracekit: error: {tmp_path / 'nothing'}: No such file or directory"
    )


def test_load_of_a_chakra_et_file_says_it_is_not_json_and_which_command_reads_it(tmp_path):
    et = CHAKRA / "all_reduce.0.et"
    res = run("load", et, "-o", tmp_path / "x.0.et")  # was: "invalid JSON: str is not valid UTF-8: surrogates ..."
    assert one_line_error(res) == (
        f"tracekit: error: {et}: not JSON: by its name a Chakra .et trace (protobuf); load turns JSON into .et, "
        f"tracekit dump {et} turns it into JSON"
    )
    assert not (tmp_path / "x.0.et").exists()


def test_timeline_of_a_set_without_measured_times_says_why_it_is_empty(tmp_path):
    res = run("timeline", CHAKRA / "all_reduce", "-o", tmp_path / "t.json")
    assert res.exit_code == 0 and res.stdout == ""
    assert res.stderr == (
        f"wrote {tmp_path / 't.json'}: 0 slices on 4 rank(s): none of the 4 nodes has a measured duration (a replay "
        "draws its own timeline: tracekit replay TRACES --hw SPEC --timeline-out FILE)\n"
    )


def _one_rank_with_group(path: Path, entry: dict | None) -> Path:
    """One rank: a process_group:init declaring ``entry`` (None: no declaration), then a 1 MiB all-reduce."""
    from tracekit.io import write_trace
    from tracekit.model import Attr, ExecutionTrace, IOInfo, Node, NodeType

    nodes = []
    if entry is not None:
        values = json.dumps([entry])
        nodes.append(Node(id=1, name="process_group:init", type=NodeType.METADATA_NODE, inputs=IOInfo(values=values)))
    coll = [Attr.infer("comm_type", 0), Attr.infer("comm_size", 1 << 20)]
    nodes.append(Node(id=7, name="allreduce", type=NodeType.COMM_COLL_NODE, attrs=coll))
    write_trace(ExecutionTrace(nodes), path)
    return path


def test_a_lone_rank_whose_capture_names_a_larger_default_group_is_refused_and_a_one_gpu_run_is_not(tmp_path, caplog):
    from tracekit.errors import ReplayError
    from tracekit.io import read_traceset
    from tracekit.replayer import replay

    # PyTorch's ET writes the default group as ranks [] (all) with group_size = the world size
    pg = {"pg_name": "0", "pg_desc": "default_pg", "ranks": [], "group_size": 8, "group_count": 1}
    path = _one_rank_with_group(tmp_path / "solo.0.et", pg)
    with pytest.raises(ReplayError) as info:
        replay(read_traceset(path), "dgx-a100")
    assert str(info.value) == (
        f"{path}: rank 0: node 7: ALL_REDUCE without a process group spans every rank of the job, and the set "
        "expects 8 ranks (its process_group:init gives the default group 8 ranks) but only 1 is given: a "
        "collective over 1 rank takes 0 ns; pass the whole set: tracekit replay "
        f"{tmp_path / 'solo'} with every rank's file beside it (solo.0.et ... solo.7.et)"
    )
    # a one-GPU NCCL run (param-resnet's ET: group_size 1), or a capture declaring its all-ranks group without a
    # size (what tracekit's converter writes): replayed without a warning, the collective over its one rank
    for n, entry in enumerate((dict(pg, group_size=1), dict(pg, group_size=0))):
        with caplog.at_level(logging.WARNING, logger="tracekit.replayer"):
            result = replay(read_traceset(_one_rank_with_group(tmp_path / f"gpu{n}.0.et", entry)), "dgx-a100")
        assert result.iteration_time_ns == 0
    assert [r for r in caplog.records if r.name == "tracekit.replayer"] == []


def test_the_astra_model_on_a_preset_says_where_an_astra_table_comes_from():
    line = one_line_error(run("replay", CHAKRA / "all_reduce", "--hw", "dgx-h100", "--collective-model", "astra"))
    assert line.endswith(
        "dgx-h100.toml: key astra: is required for collectives.model = 'astra' (ASTRA-sim's endpoint delay, dataset "
        "splits, ...): import an ASTRA-sim config with `tracekit hw import-astra`, or choose another "
        "--collective-model (alpha_beta, nccl)"
    )


def test_info_counts_sends_and_recvs_in_the_communication_table(tmp_path):
    from tracekit.io import write_traceset
    from tracekit.model import Attr, ExecutionTrace, Node, NodeType
    from tracekit.sets.traceset import TraceSet

    def p2p(kind: NodeType, node_id: int) -> Node:
        attrs = [Attr.infer(k, v) for k, v in (("comm_src", 0), ("comm_dst", 1), ("comm_size", 128), ("comm_tag", 0))]
        return Node(id=node_id, name="p2p", type=kind, attrs=attrs)

    # rank 0 sends 128 B twice, rank 1 receives them: the table printed "- / 256 B" (a count of "-")
    sends = ExecutionTrace([p2p(NodeType.COMM_SEND_NODE, 1), p2p(NodeType.COMM_SEND_NODE, 2)])
    recvs = ExecutionTrace([p2p(NodeType.COMM_RECV_NODE, 1), p2p(NodeType.COMM_RECV_NODE, 2)])
    write_traceset(TraceSet([sends, recvs]), tmp_path / "pp")
    res = run("info", tmp_path / "pp")
    assert res.exit_code == 0, res.stderr
    lines = res.stdout.splitlines()
    at = next(i for i, ln in enumerate(lines) if "communication: count / bytes" in ln)
    header = [c.strip() for c in lines[at + 2].split("┃")[1:-1]]
    rows = [[c.strip() for c in ln.split("│")[1:-1]] for ln in lines[at + 4 : at + 6]]
    assert header == ["rank", "RECV", "SEND"]
    assert rows == [["0", "0 / 0 B", "2 / 256 B"], ["1", "2 / 256 B", "0 / 0 B"]]


def test_the_replay_headline_stays_one_line_off_a_terminal(tmp_path):
    # the demo's last step: ASTRA-sim's all-reduce on an imported ASTRA-sim config; piped (not a terminal, 120
    # columns), the headline was cut after "compute astra x" and its "1" printed on a line of its own
    data = REPO / "tests" / "data" / "astra"
    spec = tmp_path / "ring4.toml"
    args = ["--system", data / "system_ring_splits1.json", "--network", data / "network_ring_4.yml", "-o", spec]
    assert run("hw", "import-astra", *args).exit_code == 0
    res = run("replay", CHAKRA / "all_reduce", "--hw", spec)
    assert res.exit_code == 0, res.stderr
    assert res.stdout.splitlines()[0] == (
        "iteration time 33.829 us (33,829 ns) on astra:system_ring_splits1+network_ring_4: 4 rank(s), 4 nodes, "
        "collective model astra, compute astra x 1"
    )


def test_bench_coll_names_its_option_when_a_rank_list_does_not_parse(tmp_path):
    for text, message in (
        ("8,x", "expected comma-separated integers, got '8,x'"),
        (",", "expected at least one rank count"),
    ):
        res = run("bench-coll", "--hw", "dgx-h100", "--ranks", text, "-o", tmp_path / "b.html")
        assert (
            one_line_error(res, 2)
            == f"tracekit: error: Invalid value for '--ranks': {message} (see 'cli bench-coll --help')"
        )


def test_a_library_warning_reads_like_the_clis_own_warnings(tmp_path):
    import subprocess
    import sys

    # a real process: the CLI configures logging once per process (pytest's own handlers would hide it here).
    # Before: "WARNING tracekit.replayer: ..." (logging's format), beside "tracekit: warning: ..." lines
    shutil.copy(CHAKRA / "all_reduce.0.et", tmp_path / "lonely.0.et")
    tool = Path(sys.executable).with_name("tracekit")
    proc = subprocess.run(
        [str(tool), "replay", "lonely.0.et", "--hw", "dgx-a100"], cwd=tmp_path, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == (
        "tracekit: warning: lonely.0.et: rank 0: node 0: ALL_REDUCE without a process group spans every rank of the "
        "job, and the job has 1 rank: it takes 0 ns; if the job had more ranks, give every rank's file "
        "(<prefix>.<rank>.et)\n"
    )


def test_convert_names_the_rank_whose_et_or_kineto_file_is_missing(tmp_path):
    dist = REPO / "sample_traces" / "pytorch" / "dist_ws2"
    res = run(
        "convert",
        "pytorch",
        "--et",
        dist / "et_rank0.json",
        "--kineto",
        dist / "kineto_rank*.json",
        "-o",
        tmp_path / "j",
    )
    assert one_line_error(res) == (
        f"tracekit: error: ET ranks [0] and Kineto ranks [0, 1] differ: rank 1 has a Kineto file "
        f"({dist / 'kineto_rank1.json'}) but no ET; give one ET and one Kineto file per rank (or --et alone)"
    )
    assert list(tmp_path.iterdir()) == []


# ----- round 2 of the trial's leftovers: absurd sizes, PyTorch JSON given as a trace, random bytes ------------------

INT64_MAX = (1 << 63) - 1
PYTORCH = REPO / "sample_traces" / "pytorch"


def test_generate_llm_refuses_sizes_that_overflow_int64_up_front_naming_option_value_and_bound(tmp_path):
    from tracekit.converters.generators.llm_limits import int64_overflow
    from tracekit.workloads.config import LLMConfig, preset

    out = tmp_path / "job"
    res = run("generate", "llm", "--model", "gpt3-1.3b", "--seq", "100000000000", "-o", out)
    # gpt3-1.3b: h 2048; attention scores 2 b s^2 h FLOPs = 2 x 10^22 x 2048 = 4.096e25 in the forward
    assert one_line_error(res) == (
        "tracekit: error: Invalid value for '--seq': 100000000000 is too large: node 'attn_score.fwd' would carry "
        "num_ops 40960000000000000000000000, above the int64 bound 2^63-1 = 9223372036854775807; with the other "
        "options as given, --seq can be at most 33554431 (see 'cli generate llm --help')"
    )
    assert not list(tmp_path.iterdir())  # refused before anything was written
    # the bound is exact: the backward's attn_value carries 4 s^2 h FLOPs = 2^63 at s = 2^25
    model, _ = preset("gpt3-1.3b")
    fits = LLMConfig(dataclasses.replace(model, seq_length=33554431))
    assert int64_overflow(fits) is None
    over = int64_overflow(LLMConfig(dataclasses.replace(model, seq_length=1 << 25)))
    assert (over.node_name, over.field, over.value) == ("attn_value.bwd", "num_ops", 4 * (1 << 50) * 2048)
    assert over.value == INT64_MAX + 1
    # a sibling option: the vocabulary's logits GEMM, 2 t h V FLOPs (V padded to 128)
    res = run("generate", "llm", "--model", "gpt3-1.3b", "--vocab", "100000000000000000", "-o", out)
    line = one_line_error(res)
    assert line.startswith("tracekit: error: Invalid value for '--vocab': 100000000000000000 is too large: node ")
    assert "logits_gemm.fwd' would carry num_ops" in line and "--vocab can be at most 1099511627648" in line
    # two options, neither too large alone: both named
    res = run("generate", "llm", "--model", "gpt3-1.3b", "--hidden", "3000000000", "--seq", "3000000000", "-o", out)
    assert "--seq 3000000000, --hidden 3000000000 together are too large: node " in one_line_error(res)
    # not a number at all stays click's usage error (exit 2)
    assert "'1e11' is not a valid integer" in one_line_error(
        run("generate", "llm", "--model", "gpt3-1.3b", "--seq", "1e11", "-o", out), 2
    )


@pytest.mark.parametrize("command", [["info"], ["validate"], ["replay", "--hw", "dgx-a100"]])
@pytest.mark.parametrize(
    "name, what",
    [
        ("dist_ws2/et_rank0.json", "a PyTorch Execution Trace JSON (schema '1.1.1-chakra.0.0.4')"),
        ("dist_ws2/kineto_rank1.json", "a Kineto (PyTorch profiler) trace JSON"),
    ],
)
def test_a_pytorch_capture_given_as_a_trace_says_so_and_shows_the_convert_command(command, name, what):
    res = run(command[0], PYTORCH / name, *command[1:])
    folder = PYTORCH / "dist_ws2"
    assert one_line_error(res) == (
        f"tracekit: error: {PYTORCH / name}: {what}, not a Chakra trace: convert the capture first: tracekit "
        f"convert pytorch --et '{folder}/et_rank*.json' --kineto '{folder}/kineto_rank*.json' -o out/job"
    )


def test_several_pytorch_capture_files_say_so_too():
    files = sorted((PYTORCH / "dist_ws2").glob("et_rank*.json"))  # what an unquoted shell glob expands to
    line = one_line_error(run("info", *files))
    assert line.startswith(f"tracekit: error: {files[0]}: a PyTorch Execution Trace JSON, not a Chakra trace: ")
    assert line.endswith("-o out/job")


def test_random_bytes_named_et_say_not_a_chakra_trace_keeping_file_rank_and_offset(tmp_path):
    import random

    rng = random.Random(1)
    junk = tmp_path / "junk.0.et"
    junk.write_bytes(bytes(rng.randrange(256) for _ in range(4096)))
    for command in (["info"], ["validate"], ["dump"], ["replay", "--hw", "dgx-a100"]):
        line = one_line_error(run(command[0], junk, *command[1:]))
        assert line.startswith(f"tracekit: error: {junk}: rank 0: "), line
        assert line.endswith(") ; not a Chakra execution trace?".replace(" ;", ";")) and "(at byte " in line
    # a real trace cut short is a truncated trace, not "not a trace"
    cut = tmp_path / "cut.0.et"
    cut.write_bytes((REPO / "sample_traces" / "chakra" / "feeder.0.et").read_bytes()[:300])
    line = one_line_error(run("info", cut))
    assert line == (
        f"tracekit: error: {cut}: rank 0: record of 5948 bytes runs past the end of the file (203 bytes left) "
        "(at byte 95)"
    )


def test_the_chakra_sniff_accepts_every_real_trace_and_no_random_bytes():
    import random

    from tracekit.wire.framing import looks_like_chakra

    real = sorted((REPO / "sample_traces" / "chakra").glob("*.et"))
    shared = Path("/work/shared/real/chakra")
    real += sorted(shared.rglob("*.et")) if shared.is_dir() else []
    assert len(real) >= 7 and all(looks_like_chakra(p.read_bytes()[: 1 << 20], p.stat().st_size) for p in real)
    rng = random.Random(7)
    blobs = [bytes(rng.randrange(256) for _ in range(rng.choice([16, 100, 4096]))) for _ in range(3000)]
    assert sum(looks_like_chakra(b, len(b)) for b in blobs) == 0


def _declared_groups(trace) -> list[dict]:
    from tracekit.model.groups import is_pg_init, parse_pg_entries

    (init,) = [n for n in trace.nodes if is_pg_init(n)]
    return parse_pg_entries(init.inputs.values)


def test_converted_and_generated_traces_give_the_default_group_the_world_size(tmp_path):
    from tracekit.model.groups import default_group_size
    from tracekit.io import read_traceset

    # dist_ws2's ETs declare {"pg_name": "0", "ranks": [], "group_size": 2}; the output said group_size 0
    folder = PYTORCH / "dist_ws2"
    args = ["--et", f"{folder}/et_rank*.json", "--kineto", f"{folder}/kineto_rank*.json", "-o", tmp_path / "job"]
    assert run("convert", "pytorch", *args, "--executor", "serial").exit_code == 0
    job = read_traceset(tmp_path / "job")
    for rank in (0, 1):
        (entry,) = _declared_groups(job[rank])
        assert (entry["pg_name"], entry["ranks"], entry["group_size"]) == ("0", [], 2)
        assert default_group_size(job[rank]) == 2
    # the ET alone (no Kineto): the ET's own declaration gives it
    assert run("convert", "pytorch", "--et", f"{folder}/et_rank0.json", "-o", tmp_path / "one").exit_code == 0
    assert default_group_size(read_traceset(tmp_path / "one")[0]) == 2
    # a generator's all-ranks group: 4 ranks, beside a sub-group of 2
    res = run(
        "generate", "micro", "--collective", "all_reduce", "--size", "1MiB", "--ranks", "4", "--group", "0-1",
        "-o", tmp_path / "micro",
    )  # fmt: skip
    assert res.exit_code == 0, res.stderr
    entries = _declared_groups(read_traceset(tmp_path / "micro")[3])
    assert [(e["pg_name"], e["ranks"], e["group_size"]) for e in entries] == [("0", [], 4), ("1", [0, 1], 2)]


def test_the_four_rank_gloo_capture_converts_with_group_size_4(tmp_path, real_dir):
    folder = real_dir / "pytorch" / "torch-cpu-gloo" / "dist_ws4"  # ../shared/real (README there)
    from tracekit.model.groups import default_group_size
    from tracekit.io import read_traceset

    args = ["--et", f"{folder}/et_rank*.json", "--kineto", f"{folder}/kineto_rank*.json", "-o", tmp_path / "job"]
    assert run("convert", "pytorch", *args, "--executor", "serial").exit_code == 0
    job = read_traceset(tmp_path / "job")
    assert [default_group_size(job[r]) for r in job.ranks] == [4, 4, 4, 4]


def test_a_tensor_parallel_rewrite_gives_the_default_group_the_new_world_size(tmp_path):
    from tracekit.model.groups import default_group_size
    from tracekit.io import read_traceset

    # 2 x 2 x 2 = 8 ranks; --tp 4 makes 4 x 2 x 2 = 16 (ChangeTP: world * tp / tp_old); the rewrite wrote 0
    res = run(
        "generate", "llm", "--model", "gpt3-1.3b", "--layers", "2", "--tp", "2", "--pp", "2", "--dp", "2",
        "--global-batch", "4", "--hw", "dgx-a100", "-o", tmp_path / "llm",
    )  # fmt: skip
    assert res.exit_code == 0, res.stderr
    assert run("transform", tmp_path / "llm", "--tp", "4", "-o", tmp_path / "tp4").exit_code == 0
    job = read_traceset(tmp_path / "tp4")
    assert len(job) == 16
    assert {default_group_size(job[r]) for r in job.ranks} == {16}


def test_the_tutorials_hardware_comparison_says_which_collective_model_the_presets_use():
    import tomllib

    presets = REPO / "replayer" / "presets"
    models = {name: tomllib.loads((presets / f"{name}.toml").read_text())["collectives"]["model"] for name in ("dgx-a100", "dgx-h100")}  # fmt: skip
    assert models == {"dgx-a100": "nccl", "dgx-h100": "nccl"}  # what step 7 says; change both together
    step7 = (REPO / "docs" / "tutorial.md").read_text().split("## 7. Compare")[1].split("## 8.")[0]
    flat = " ".join(step7.split())
    assert "Both presets time collectives with the `nccl` model" in flat
    # the other-model replay is a command the tutorial test runs, and its diff is checked there
    assert "tracekit replay out/job --hw dgx-h100 --compute measured --collective-model alpha_beta" in flat
    assert "$ tracekit diff out/h100.json out/h100_ab.json" in step7


def test_astra_sims_custom_allreduce_sample_validates_and_is_named_a_partial_set(tmp_path):
    # ASTRA-sim's custom collective: a send carries only comm_dst, a recv only comm_src (the peer; the own end is
    # the rank), as ASTRA-sim and our replayer read them; validate asked for both and found 56 "errors"
    res = run("validate", CHAKRA / "custom_allreduce")
    assert res.exit_code == 0, res.stdout
    assert res.stdout.splitlines() == [
        "warning: [rank-count] partial job: traces for 2 of 8 ranks (sends and recvs name peers up to rank 7); no "
        "trace for ranks [2, 3, 4, 5, 6, 7] (a replay needs them all)",
        "OK: 2 ranks, 70 nodes, 1 warnings",
    ]
    # the peer is still required: a send without comm_dst (node 0 of rank 0 here) is an error
    from tracekit.io import read_traceset, write_traceset
    from tracekit.model import ExecutionTrace, Node
    from tracekit.sets.traceset import TraceSet

    trace = read_traceset(CHAKRA / "custom_allreduce.0.et")[0]
    first = trace.nodes[0]
    attrs = [a for a in first.attrs if a.name != "comm_dst"]
    stripped = Node(id=first.id, name=first.name, type=first.type, data_deps=list(first.data_deps), attrs=attrs)
    write_traceset(TraceSet([ExecutionTrace([stripped, *trace.nodes[1:]], trace.metadata)]), tmp_path / "x")
    res = run("validate", tmp_path / "x")
    assert res.exit_code == 3
    assert (
        f"error: [comm-attrs] {tmp_path / 'x.0.et'}: rank 0: node 0: COMM_SEND_NODE has no comm_dst (the peer rank)"
        in res.stdout.splitlines()
    )


@pytest.mark.parametrize("executor", ["serial", "process"])
def test_convert_prints_a_warning_found_on_every_rank_once_naming_the_ranks(tmp_path, executor):
    import subprocess
    import sys

    # a real process: the CLI configures logging once per process (see the test above)
    shutil.copytree(PYTORCH / "dist_ws2", tmp_path / "cap")
    tool = str(Path(sys.executable).with_name("tracekit"))
    args = ["convert", "pytorch", "--et", "cap/et_rank*.json", "--kineto", "cap/kineto_rank*.json", "-o", "out/job"]
    proc = subprocess.run([tool, *args, "--executor", executor], cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    # each rank's ET has one host op overlapping its parent (the same finding): one line, not one per rank
    assert proc.stderr.splitlines() == [
        "tracekit: warning: cap/et_rank0.json ... cap/et_rank1.json: ranks 0, 1: 1 host op(s) overlap an enclosing "
        "op without nesting; clamped to its end"
    ]
    args = ["convert", "pytorch", "--kineto", "cap/kineto_rank*.json", "-o", "out/k", "--executor", executor]
    proc = subprocess.run([tool, *args], cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == [
        "tracekit: warning: cap/kineto_rank0.json ... cap/kineto_rank1.json: ranks 0, 1: 1 host event(s) overlap "
        "an enclosing event without nesting; clamped to its end"
    ]


def test_grouped_log_lines_keep_distinct_texts_and_lone_ranks_as_they_were(caplog):
    from tracekit.converters.pytorch.log_groups import LogLine, emit_grouped, rank_list

    name = "tracekit.converters.pytorch.et_convert"

    def warn(path: str, text: str) -> LogLine:
        return LogLine(logging.WARNING, name, f"{path}: {text}")

    per_rank = [
        (r, f"d/et_rank{r}.json", [warn(f"d/et_rank{r}.json", "2 ops clamped" if r != 5 else "3 ops clamped")])
        for r in (4, 0, 1, 2, 3, 5)
    ]
    with caplog.at_level(logging.WARNING, logger="tracekit.converters"):
        emit_grouped(per_rank)
    assert [r.getMessage() for r in caplog.records] == [
        "d/et_rank0.json ... d/et_rank4.json: ranks 0-4: 2 ops clamped",
        "d/et_rank5.json: 3 ops clamped",
    ]
    assert rank_list([9, 0, 1, 2, 3, 6, 8]) == "0-3, 6, 8, 9"


def test_every_writer_creates_the_missing_folders_of_its_output_as_docs_cli_says(tmp_path):
    # the trial thought generate alone created them and transform/convert refused: all create them (docs/cli.md)
    text = REPO / "sample_traces" / "text" / "Resnet50_DataParallel.txt"
    folder = PYTORCH / "dist_ws2"
    base = tmp_path / "base.json"
    assert run("replay", CHAKRA / "all_reduce", "--hw", "dgx-a100", "-o", base).exit_code == 0
    new = Path("{new}")  # each command gets its own missing folder
    commands = {
        "generate": (
            ["generate", "micro", "--collective", "all_reduce", "--size", "1KiB", "--ranks", "2", "-o", new / "g"],
            "g.0.et",
        ),  # fmt: skip
        "transform": (["transform", CHAKRA / "all_reduce", "--scale-compute", "0.5", "-o", new / "t"], "t.0.et"),
        "convert text": (["convert", "text", text, "--ranks", "2", "-o", new / "c"], "c.1.et"),
        "convert pytorch": (["convert", "pytorch", "--et", f"{folder}/et_rank0.json", "-o", new / "p"], "p.0.et"),
        "replay": (["replay", CHAKRA / "all_reduce", "--hw", "dgx-a100", "-o", new / "r.json"], "r.json"),
        "timeline": (
            ["replay", CHAKRA / "all_reduce", "--hw", "dgx-a100", "--timeline-out", new / "t.json"],
            "t.json",
        ),  # fmt: skip
        "dump": (["dump", CHAKRA / "all_reduce.0.et", "-o", new / "d.json"], "d.json"),
        "report": (["report", base, "-o", new / "r.html"], "r.html"),
        "diff": (["diff", base, base, "--html-out", new / "d.html"], "d.html"),
    }
    for i, (what, (args, written)) in enumerate(commands.items()):
        folder_i = tmp_path / f"missing{i}" / "deeper"
        res = run(*[str(a).replace("{new}", str(folder_i)) for a in args])
        assert res.exit_code == 0, (what, res.stderr)
        assert (folder_i / written).is_file(), what
    cli_md = " ".join((REPO / "docs" / "cli.md").read_text().split())
    assert "Every writer (`-o/--output`, `--*-out`) creates the missing folders of its output path" in cli_md


def test_several_gzipped_pytorch_capture_files_say_so_too(tmp_path):
    import gzip

    for name in ("kineto_rank0.json", "kineto_rank1.json"):
        (tmp_path / f"{name}.gz").write_bytes(gzip.compress((PYTORCH / "dist_ws2" / name).read_bytes()))
    line = one_line_error(run("info", tmp_path / "kineto_rank0.json.gz", tmp_path / "kineto_rank1.json.gz"))
    assert line == (
        f"tracekit: error: {tmp_path}/kineto_rank0.json.gz: a Kineto (PyTorch profiler) trace JSON, not a Chakra "
        f"trace: convert the capture first: tracekit convert pytorch --kineto '{tmp_path}/kineto_rank*.json.gz' "
        "-o out/job"
    )


def test_report_and_diff_given_a_chakra_trace_say_so_and_show_the_replay_command(tmp_path):
    # the trial ran `tracekit report x.0.et -o out` and was told "not JSON (str is not valid UTF-8 ...)"
    trace = CHAKRA / "all_reduce.0.et"
    expected = (
        f"tracekit: error: {trace}: not a tracekit replay result: by its name a Chakra .et trace (protobuf); this "
        f"command takes a replay result: tracekit replay {trace} --hw HW -o result.json"
    )
    assert one_line_error(run("report", trace, "-o", tmp_path / "r.html")) == expected
    assert one_line_error(run("diff", trace, CHAKRA / "all_reduce.1.et")) == expected
    assert not (tmp_path / "r.html").exists()


@pytest.fixture(scope="module")
def gloo_ws4(real_dir, tmp_path_factory):
    """The four-rank gloo capture (send/recv, collectives, host-cpu) converted: the prefix of its rank files."""
    folder = real_dir / "pytorch" / "torch-cpu-gloo" / "dist_ws4"
    prefix = tmp_path_factory.mktemp("ws4") / "j"
    args = ["--et", f"{folder}/et_rank*.json", "--kineto", f"{folder}/kineto_rank*.json", "-o", prefix]
    assert run("convert", "pytorch", *args, "--executor", "serial").exit_code == 0
    return prefix


def test_one_rank_of_a_projected_capture_is_refused_naming_the_file_and_the_prefix(gloo_ws4, tmp_path):
    # the capture runs on host-cpu, so replay --hw dgx-h100 projects its compute: the projected traces had lost
    # their file, and the refusal named neither it nor the prefix ("pass the whole set: every rank's file")
    shutil.copy(f"{gloo_ws4}.0.et", tmp_path / "j.0.et")
    for path, how in (
        (f"{gloo_ws4}.0.et", f"tracekit replay {gloo_ws4}"),
        (tmp_path / "j.0.et", f"tracekit replay {tmp_path / 'j'} with every rank's file beside it (j.0.et ... j.3.et)"),
    ):
        line = one_line_error(run("replay", path, "--hw", "dgx-h100", "--no-check"))
        assert line == (
            f"tracekit: error: {path}: rank 0: node 314: ALL_REDUCE without a process group spans every rank of the "
            "job, and the set expects 4 ranks (its process_group:init gives the default group 4 ranks) but only 1 "
            f"is given: a collective over 1 rank takes 0 ns; pass the whole set: {how}"
        )


_HELD_AT_READ = """
import sys
import tracekit.io
from tracekit.cli import main

read = tracekit.io.read_traceset


def held(*args, **kwargs):  # the first command stops before reading its input until the test says go
    print("reading", flush=True)
    sys.stdin.readline()
    return read(*args, **kwargs)


tracekit.io.read_traceset = held
sys.argv = ["tracekit", *sys.argv[1:]]
main()
"""


def test_a_second_command_writing_the_same_prefix_is_refused_while_the_first_still_reads(tmp_path):
    # the trial started two `transform ... -o lk/m` 0.1-1.1 s apart: both succeeded and the last one won, since
    # the lock was taken only when writing started; it is now taken when the command starts
    import subprocess
    import sys

    from tracekit.io import read_traceset

    src = CHAKRA / "all_reduce"
    out = tmp_path / "lk" / "m"
    first = subprocess.Popen(
        [sys.executable, "-c", _HELD_AT_READ, "transform", src, "-o", out, "--scale-comm", "2"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert first.stdout is not None and first.stdout.readline() == "reading\n"  # holds the prefix, reads
        second = run("transform", src, "-o", out, "--scale-comm", "3")
        assert one_line_error(second) == (
            f"tracekit: error: {out}: another tracekit command is writing this output prefix right now "
            "(lock .m.tk-lock is held); wait for it or choose another prefix"
        )
        assert not list(out.parent.glob("m.*"))
    finally:
        _, err = first.communicate("go\n", timeout=120)
    assert first.returncode == 0, err
    # the first command's output, whole: every message is twice ASTRA-sim's 1 MiB
    job = read_traceset(out)
    assert [n.comm_bytes for _, t in job.items() for n in t.nodes if n.is_comm] == [2 << 20] * 4
    assert sorted(p.name for p in out.parent.iterdir()) == [f"m.{r}.et" for r in range(4)] + ["m.comm_groups.json"]


_FINISHED_THEN_WAIT = """
import sys
from tracekit.cli import main

try:
    main(sys.argv[1:])
except SystemExit:  # the command has finished: wait, as a large job's interpreter shutdown does
    print("finished", flush=True)
    sys.stdin.readline()
    raise
"""


def _interactive_signals() -> None:
    """In the child before exec: SIGINT back to its default, as in a terminal where a user types Ctrl-C.

    A suite started with SIGINT ignored (``nohup make test``, ``make test &``) passes SIG_IGN on to every child,
    and Python then installs no KeyboardInterrupt handler: the child rightly ignores Ctrl-C, as ``nohup tracekit``
    must, and the test would measure the shell rather than tracekit.
    """
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _started(script: str, *args: object):
    import subprocess
    import sys

    proc = subprocess.Popen(
        [sys.executable, "-c", script, *map(str, args)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_interactive_signals,
    )
    assert proc.stdout is not None
    return proc, proc.stdout.readline()


def test_ctrl_c_mid_run_is_one_error_line_and_exit_1_and_after_the_command_finished_changes_nothing(tmp_path):
    import signal

    # Ctrl-C while transform reads: click printed "Aborted!"; docs/cli.md promises one error line and exit 1
    out = tmp_path / "x"
    proc, line = _started(_HELD_AT_READ, "transform", CHAKRA / "all_reduce", "-o", out, "--scale-comm", "2")
    assert line == "reading\n"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert (proc.returncode, err) == (
        1,
        "tracekit: error: interrupted (Ctrl-C) before the command finished; its temporary files were removed, no "
        "output is half-written\n",
    )
    assert list(tmp_path.iterdir()) == []
    # Ctrl-C after the output was written and `wrote ...` printed: the command succeeded (was exit 130)
    proc, line = _started(_FINISHED_THEN_WAIT, "transform", CHAKRA / "all_reduce", "-o", out, "--scale-comm", "2")
    assert line == "finished\n"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate("go\n", timeout=60)
    assert proc.returncode == 0, err
    assert err.startswith(f"wrote 4 ranks to {out}.<rank>.et")
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"x.{r}.et" for r in range(4)] + ["x.comm_groups.json"]


def test_shrinking_dp_of_a_job_with_send_recv_between_replicas_names_the_file_node_and_reason(gloo_ws4, tmp_path):
    # was "rank 2: peer rank 3 of rank 2 has no counterpart for new rank 2 (dp coordinate 3 outside 0..2)"
    line = one_line_error(run("transform", gloo_ws4, "-o", tmp_path / "x", "--dp", "3"))
    assert line == (
        f"tracekit: error: {gloo_ws4}.2.et: rank 2: node 566: send to peer rank 3: dp cannot change from 4 to 3: "
        "this send/recv pairs data-parallel replicas 2 and 3, and new rank 2 (dp coordinate 2) would pair with dp "
        "coordinate 3, which a dp of 3 does not have (0..2)"
    )
    assert list(tmp_path.iterdir()) == []


def test_message_lines_are_not_wrapped_on_a_pipe_and_tables_keep_their_layout(gloo_ws4):
    # on a pipe rich wrapped replay's projection line at 120 columns, cutting it in two for grep
    res = run("replay", gloo_ws4, "--hw", "dgx-h100")
    assert res.exit_code == 0, res.stderr
    lines = (res.stdout + res.stderr).splitlines()
    assert (
        "compute projected host-cpu -> h100-sxm (CPU capture -> GPU: a rough estimate; each op with a cost takes the "
        "GPU's roofline time, the CPU's measured time says nothing of the GPU's)"
    ) in lines
    boxed = [line for line in lines if line[:1] in "┏┃┡│└"]
    assert boxed and max(len(line) for line in boxed) <= 120


def test_convert_pytorch_kineto_alone_draws_the_converting_ranks_bar_on_a_terminal(real_dir, tmp_path, monkeypatch):
    # the ET + Kineto path showed "converting ranks"; --kineto alone (2.4 s for one big file) showed nothing
    import io

    from rich.console import Console

    import tracekit.cli._common as common

    folder = real_dir / "pytorch" / "torch-cpu-gloo" / "dist_ws4"
    drawn = io.StringIO()
    console = Console(file=drawn, force_terminal=True, width=100)
    monkeypatch.setattr(common, "err_console", lambda: console)
    args = ["convert", "pytorch", "--kineto", f"{folder}/kineto_rank*.json", "--executor", "serial"]
    assert run(*args, "-o", tmp_path / "a").exit_code == 0
    assert "converting ranks" in drawn.getvalue() and "4/4" in drawn.getvalue()
    drawn.seek(0)
    drawn.truncate(0)
    assert run("-q", *args, "-o", tmp_path / "b").exit_code == 0
    assert "converting ranks" not in drawn.getvalue()


def test_a_scale_factor_that_turns_every_scaled_value_into_0_is_refused(gloo_ws4, tmp_path):
    # --scale-compute 1e-320 was accepted and zeroed every duration without a word; the rank's longest compute
    # node (262, 135,176,357 ns) and largest message (node 314, 104,488 bytes) name the factor that would do
    first = f"tracekit: error: {gloo_ws4}.0.et: rank 0: node"
    assert one_line_error(run("transform", gloo_ws4, "-o", tmp_path / "x", "--scale-compute", "1e-320")) == (
        f"{first} 262: compute scale factor 1e-320 turns every duration it scales into 0 (the largest, 135,176,357 "
        "ns, becomes 1.35e-312, rounded to 0); only a factor above 3.7e-09 keeps it non-zero"
    )
    assert one_line_error(run("transform", gloo_ws4, "-o", tmp_path / "x", "--scale-comm", "1e-320")) == (
        f"{first} 314: message size factor 1e-320 turns every comm_size it scales into 0 (the largest, 104,488 bytes, "
        "becomes 1.04e-315, rounded to 0); only a factor above 4.79e-06 keeps it non-zero"
    )
    assert list(tmp_path.iterdir()) == []
    # a factor that keeps the longest duration: accepted, though shorter ones may round to 0
    assert run("transform", gloo_ws4, "-o", tmp_path / "y", "--scale-compute", "4e-9").exit_code == 0
