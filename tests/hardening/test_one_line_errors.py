"""Tracebacks that became one-line errors, and the small faults (issue 11): each input built in the test."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from _hardkit import leftovers, one_line_error, run
from _pytorch_synth import et_doc, mlp_et, mlp_kineto, node, roots, write

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"


def _kineto_line(tmp_path, mutate) -> str:
    doc = copy.deepcopy(mlp_kineto())
    mutate(doc)
    write(tmp_path / "k.json", doc)
    line = one_line_error(
        run("convert", "pytorch", "--kineto", tmp_path / "k.json", "-o", tmp_path / "o" / "j", "--executor", "serial")
    )
    assert not (tmp_path / "o").exists() and leftovers(tmp_path) == []
    return line.removeprefix(f"tracekit: error: {tmp_path}/k.json: ")


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d.__setitem__("deviceProperties", 5), "'deviceProperties' must be a list of objects, got 5"),
        (
            lambda d: d["traceEvents"][1].__setitem__("tid", {"a": 1}),
            "rank 0: traceEvents[1]: 'tid' must be an integer or a string, got {'a': 1}",
        ),
        (
            lambda d: d["traceEvents"][1].__setitem__("cat", ["cpu_op"]),
            "rank 0: traceEvents[1]: 'cat' must be a string, got ['cpu_op']",
        ),
        (
            lambda d: d["traceEvents"][1].__setitem__("cat", True),
            "rank 0: traceEvents[1]: 'cat' must be a string, got True",
        ),
        (lambda d: d["traceEvents"][1].__setitem__("cat", 3), "rank 0: traceEvents[1]: 'cat' must be a string, got 3"),
        (lambda d: d["distributedInfo"].__setitem__("pg_config", 4), "distributedInfo.pg_config must be a list, got 4"),
    ],
)
def test_kineto_fields_of_the_wrong_json_type(tmp_path, mutate, message):
    assert _kineto_line(tmp_path, mutate) == message


def test_et_attrs_of_the_wrong_type(tmp_path):
    doc = mlp_et()
    doc["nodes"][3]["attrs"] = 5
    write(tmp_path / "et.json", doc)
    line = one_line_error(run("convert", "pytorch", "--et", tmp_path / "et.json", "-o", tmp_path / "o" / "j"))
    assert line == (
        f"tracekit: error: {tmp_path}/et.json: node 11: attrs must be a list of {{name, type, value}} objects, got 5"
    )


@pytest.mark.parametrize(
    "attr, message",
    [
        ({"name": "x", "kind": {"a": 1}, "value": 1}, "attribute 'x' has unknown kind {'a': 1}"),
        (
            {"name": "x", "kind": "bytes_val", "value": "not base64!"},
            "attribute 'x' of kind bytes_val: value must be base64 text, got 'not base64!'",
        ),
        (
            {"name": "x", "kind": "double_val", "value": {"v": 1}},
            'attribute \'x\' of kind double_val: value must be a number (or "NaN", "Infinity", "-Infinity"), got {\'v\': 1}',
        ),
    ],
)
def test_tracekit_json_attributes_of_the_wrong_type(tmp_path, attr, message):
    doc = json.loads(run("dump", SAMPLES / "chakra" / "all_reduce.0.et").stdout)
    doc["nodes"][0]["attrs"].append(attr)
    (tmp_path / "t.0.json").write_text(json.dumps(doc))
    for args in (("info", tmp_path / "t.0.json"), ("load", tmp_path / "t.0.json", "-o", tmp_path / "t.0.et")):
        assert one_line_error(run(*args)) == f"tracekit: error: {tmp_path}/t.0.json: node 0: {message}"
    assert not (tmp_path / "t.0.et").exists()


@pytest.mark.parametrize(
    "name, text, message",
    [
        ("deep.json", '{"a":' * 5000 + "1" + "}" * 5000, "not valid JSON: nested too deeply"),
        # PyYAML's scanner is quadratic in the depth (5,000: ~20 s); 1,500 is 3x what the default recursion
        # limit (1,000) needs to raise RecursionError (from ~500)
        ("deep.yml", "a: " + "[" * 1500 + "]" * 1500 + "\n", "not valid YAML: nested too deeply"),
    ],
)
def test_deeply_nested_astra_configs(tmp_path, test_data_dir, name, text, message):
    (tmp_path / name).write_text(text)
    system, network = (
        test_data_dir / "astra" / "system_ring_splits1.json",
        test_data_dir / "astra" / "network_ring_8.yml",
    )
    if name.endswith(".json"):
        system = tmp_path / name
    else:
        network = tmp_path / name
    line = one_line_error(
        run("hw", "import-astra", "--system", system, "--network", network, "-o", tmp_path / "a.toml")
    )
    assert line == f"tracekit: error: {tmp_path}/{name}: {message}"


def test_deeply_nested_toml_spec_and_pipeline(tmp_path):
    (tmp_path / "deep.toml").write_text("a = " + "[" * 5000 + "]" * 5000 + "\n")
    line = one_line_error(run("hw", "show", tmp_path / "deep.toml"))
    assert line == f"tracekit: error: {tmp_path}/deep.toml: not a valid TOML file: arrays or tables nested too deeply"
    line = one_line_error(
        run(
            "transform",
            SAMPLES / "chakra" / "all_reduce",
            "-o",
            tmp_path / "o" / "x",
            "--pipeline",
            tmp_path / "deep.toml",
        )
    )
    assert line == f"tracekit: error: {tmp_path}/deep.toml: not valid TOML: arrays or tables nested too deeply"
    assert not (tmp_path / "o").exists()


def test_absurd_rank_counts_fail_at_once(tmp_path):
    line = one_line_error(
        run(
            "convert",
            "text",
            SAMPLES / "text" / "Resnet50_DataParallel.txt",
            "--ranks",
            "100000000",
            "-o",
            tmp_path / "o" / "x",
        )
    )
    assert line == "tracekit: error: the converted job would have 100,000,000 ranks; tracekit handles 1 to 1,048,576"
    line = one_line_error(
        run("transform", SAMPLES / "chakra" / "all_reduce", "-o", tmp_path / "o" / "x", "--dp", "1000000000")
    )
    assert line == (
        "tracekit: error: the new layout (tp 1 x cp 1 x dp 1000000000 x pp 1) would have 1,000,000,000 "
        "ranks; tracekit handles 1 to 1,048,576"
    )
    assert not (tmp_path / "o").exists()


def test_dp_2_of_a_one_rank_et_only_trace(tmp_path):
    write(tmp_path / "et.json", et_doc(roots() + [node(10, "aten::mm", 2, 1)]))
    assert run("convert", "pytorch", "--et", tmp_path / "et.json", "-o", tmp_path / "one" / "x").exit_code == 0
    res = run("transform", tmp_path / "one" / "x", "-o", tmp_path / "two" / "x", "--dp", "2")
    assert res.exit_code == 0, res.stderr
    assert res.stderr.startswith(f"wrote {tmp_path}/two/x.classes.json (1 rank class of 2 ranks; --per-rank or ")
    # one node per rank, as in the 1-rank input (it was 4: a declaration of bogus 1-rank groups on each rank)
    assert run("validate", tmp_path / "two" / "x").stdout.strip().splitlines()[-1] == "OK: 2 ranks, 2 nodes, 0 warnings"


def test_an_old_protobuf_runtime_is_one_line_naming_the_version(tmp_path):
    code = (
        "import google.protobuf as p; p.__version__ = '4.25.3'; from tracekit.cli import main; "
        f"main(['info', {str(SAMPLES / 'chakra' / 'all_reduce.0.et')!r}])"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert proc.stderr == (
        "tracekit: error: protobuf 4.25.3 is older than the 7.35.1 tracekit's generated code needs; "
        "install it with `pip install 'protobuf>=7.35.1,<8'`\n"
    )


# ----------------------------------------------------------------------------- small
def test_problem_counts_include_the_summarised_ones(tmp_path):
    from tracekit.io import write_traceset
    from tracekit.model import ExecutionTrace, Node
    from tracekit.sets.traceset import TraceSet

    nodes = [Node(id=i, data_deps=[10_000 + i]) for i in range(1, 51)]  # 50 dangling deps
    write_traceset(TraceSet([ExecutionTrace(nodes)]), tmp_path / "job")
    res = run("validate", tmp_path / "job")
    assert res.exit_code == 3
    lines = res.stdout.strip().splitlines()
    assert lines[-2].endswith("... 30 more like this")  # 20 shown, 30 summarised
    assert lines[-1] == "FAILED (50 errors): 1 ranks, 50 nodes, 0 warnings"
    line = one_line_error(run("replay", tmp_path / "job", "--hw", "dgx-a100"))
    assert line.startswith("tracekit: error: 50 problem(s) found before replay: ")


def test_no_complete_events_wording(tmp_path):
    write(tmp_path / "k.json", {"traceEvents": [{"ph": "i", "name": "x", "pid": 1, "tid": 1, "ts": 1}]})
    line = one_line_error(run("convert", "pytorch", "--kineto", tmp_path / "k.json", "-o", tmp_path / "o" / "j"))
    assert line.endswith(
        "nothing to convert: the trace has no host operators and no GPU activity (no complete events at all)"
    )
    assert not (tmp_path / "o").exists()


def test_a_rank_file_with_another_extension_is_named(tmp_path):
    (tmp_path / "twoComm.1.et").write_bytes((SAMPLES / "chakra" / "all_reduce.1.et").read_bytes())
    (tmp_path / "twoComm.2.eg").write_bytes(b"")
    line = one_line_error(run("info", f"{tmp_path}/twoComm.*"))
    assert line == (
        f"tracekit: error: {tmp_path}/twoComm.2.eg: file name ends in '.eg', not '.et' or '.et.gz' "
        f"(expected <prefix>.<rank>.et)"
    )


def test_load_validates_before_writing(tmp_path):
    doc = json.loads(run("dump", SAMPLES / "chakra" / "all_reduce.0.et").stdout)
    doc["nodes"][0]["data_deps"] = [77]
    (tmp_path / "a.0.json").write_text(json.dumps(doc))
    line = one_line_error(run("load", tmp_path / "a.0.json", "-o", tmp_path / "out" / "a.0.et"))
    assert line == (
        f"tracekit: error: {tmp_path}/a.0.json: rank 0: node 0: [dangling-dep] data dep 77 does not exist; "
        f"nothing written (--no-validate writes it anyway)"
    )
    assert sorted(os.listdir(tmp_path)) == ["a.0.json"]  # no output, no empty output folder
    assert run("load", tmp_path / "a.0.json", "-o", tmp_path / "out" / "a.0.et", "--no-validate").exit_code == 0
