"""`tracekit info/dump/load` through click's CliRunner (stdout and stderr checked apart), and the feeder JSON form."""

from __future__ import annotations

import json

from click.testing import CliRunner

from tracekit.cli import cli
from tracekit.io import read_trace


def test_info_json_counts_of_the_chakra_feeder_trace(samples_dir):
    res = CliRunner().invoke(cli, ["info", "--json", str(samples_dir / "chakra" / "feeder.0.et")])
    assert res.exit_code == 0 and res.stderr == ""
    doc = json.loads(res.stdout)
    (rank,) = doc["per_rank"]
    assert (doc["nodes"], rank["data_deps"], rank["ctrl_deps"]) == (3664, 181878, 3664)
    assert rank["nodes_by_type"] == {"COMM_COLL_NODE": 21, "COMP_NODE": 3643}
    assert rank["comm_bytes_by_collective"]["BROADCAST"] == 212480 + 424


def test_info_table_names_every_rank(samples_dir):
    res = CliRunner().invoke(cli, ["info", str(samples_dir / "chakra" / "all_reduce")])
    assert res.exit_code == 0
    assert "4 rank(s), 4 nodes" in res.stdout and "1.00 MiB" in res.stdout


def test_dump_then_load_is_byte_identical(samples_dir, tmp_path):
    src = samples_dir / "chakra" / "custom_allreduce.1.et"
    runner = CliRunner()
    assert runner.invoke(cli, ["dump", str(src), "-o", str(tmp_path / "c.json")]).exit_code == 0
    doc = json.loads((tmp_path / "c.json").read_text())  # one valid JSON document
    assert runner.invoke(cli, ["load", str(tmp_path / "c.json"), "-o", str(tmp_path / "c.1.et")]).exit_code == 0
    assert (tmp_path / "c.1.et").read_bytes() == src.read_bytes()
    # a send without its peer (comm_dst) fails validation: load refuses it unless told to round-trip it
    # (the sample itself has sends without comm_src, which validate no longer calls an error: the peer suffices)
    send = doc["nodes"][0]
    assert send["type"] == "COMM_SEND_NODE"
    send["attrs"] = [a for a in send["attrs"] if a["name"] != "comm_dst"]
    (tmp_path / "bad.json").write_text(json.dumps(doc))
    assert runner.invoke(cli, ["load", str(tmp_path / "bad.json"), "-o", str(tmp_path / "b.1.et")]).exit_code == 1
    args = ["load", str(tmp_path / "bad.json"), "-o", str(tmp_path / "b.1.et"), "--no-validate"]
    assert runner.invoke(cli, args).exit_code == 0 and (tmp_path / "b.1.et").is_file()


def test_feeder_json_form_reads_ids_deps_and_runtimes(samples_dir):
    trace = read_trace(samples_dir / "chakra" / "small_chakra.0.json")
    assert [n.id for n in trace.nodes] == [216, 217, 430, 432, 433, 435, 541]
    first, second = trace.nodes[0], trace.nodes[1]
    assert first.duration_ns == 318_000 and list(second.data_deps) == [216] and list(second.ctrl_deps) == [3]
    assert first.is_cpu_op is True and trace.nodes[5].type == 7  # ncclKernel broadcast: COMM_COLL


def test_feeder_json_and_et_of_the_same_trace_agree(real_dir):
    d = real_dir / "chakra" / "chakra-feeder-tests"
    a, b = read_trace(d / "chakra.0.json").columns(), read_trace(d / "chakra.0.et").columns()
    assert len(a) == len(b) == 3664
    assert a.ids.tolist() == b.ids.tolist()
    assert a.data_ids.tolist() == b.data_ids.tolist()
    assert a.duration_ns.tolist() == b.duration_ns.tolist()


def test_shell_completion_lists_commands():
    import os
    import subprocess
    import sys

    env = dict(os.environ, COMP_WORDS="tracekit rep", COMP_CWORD="1", _TRACEKIT_COMPLETE="bash_complete")
    out = subprocess.run([sys.executable, "-m", "tracekit.cli._main"], env=env, capture_output=True, text=True)
    assert out.stdout.split() == ["plain,replay", "plain,report"]
