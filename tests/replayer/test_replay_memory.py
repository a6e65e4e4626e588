"""``tracekit replay`` reports a generated job's peak memory per rank class (issue 33): printed, in the JSON
result, in the HTML report; the values are the memory model's (tests/core/test_memory_model.py)."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest
from cli_inprocess import run

from tracekit.replayer.results.result import ReplayResult
from tracekit.workloads.config import LLMConfig, ParallelSpec, preset
from tracekit.workloads.memory import memory_report

GIB = 1 << 30


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """GPT-3 175B's width, 8 layers over 2 pipeline stages: about 7.3B parameters per rank, 116 GB of model
    states: out of memory on an 80 GB A100."""
    base = tmp_path_factory.mktemp("memjob")
    args = ["--model", "gpt3-175b", "--layers", "8", "--pp", "2", "--global-batch", "4", "--classes"]
    res = run("generate", "llm", *args, "-o", base / "job")
    assert res.returncode == 0, res.stderr
    config = LLMConfig(replace(preset("gpt3-175b")[0], num_layers=8), ParallelSpec(pp=2), global_batch_size=4)
    return base, config


def test_replay_prints_json_and_html_carry_the_memory(job):
    base, config = job
    res = run("replay", base / "job", "--hw", "dgx-a100", "-o", base / "r.json", "--html-out", base / "r.html")
    assert res.returncode == 0, res.stderr
    expected = memory_report(config, 80 * GIB)
    assert expected["fits"] is False
    verdict = res.stdout.strip().splitlines()[-1]
    worst = max(expected["classes"], key=lambda r: r["device_bytes"])
    assert verdict == (
        f"memory: OOM on a100-80gb (80.0 GiB): peak {worst['device_bytes'] / GIB:,.1f} GiB per rank (stage "
        f"{worst['stage']}) is {-worst['headroom_bytes'] / GIB:,.1f} GiB more than the device holds; 2 of 2 rank "
        "classes do not fit"
    )
    rows = [ln for ln in res.stdout.splitlines() if re.match(r"│ +[01] │ +1 │ +4 │", ln)]
    assert len(rows) == 2 and all("OOM -" in ln for ln in rows)
    doc = json.loads((base / "r.json").read_text())
    assert doc["memory"]["classes"] == expected["classes"] and doc["memory"]["device"] == "a100-80gb"
    assert ReplayResult.from_dict(doc).memory == doc["memory"]  # round trip
    page = (base / "r.html").read_text()
    for row in expected["classes"]:
        assert f'data-key="memory.{row["stage"]}.device_bytes" data-value="{row["device_bytes"]}"' in page
    assert "Out of memory: 2 of 2 rank classes exceed the 80.0 GiB of a100-80gb." in page


def test_replay_json_on_stdout_and_a_bigger_device(job):
    base, config = job
    res = run("replay", base / "job", "--hw", "h200", "--json")
    assert res.returncode == 0, res.stderr
    memory = json.loads(res.stdout)["memory"]
    assert memory["device"] == "h200" and memory["device_memory_bytes"] == 151397597184  # devices.toml
    assert memory["classes"] == memory_report(config, 151397597184)["classes"]


def test_a_capture_has_no_memory_model(tmp_path):
    res = run("generate", "dlrm", "--ranks", "2", "-o", tmp_path / "d")
    assert res.returncode == 0, res.stderr
    out = run("replay", tmp_path / "d", "--hw", "dgx-a100", "--json")
    assert out.returncode == 0, out.stderr
    assert "memory" not in json.loads(out.stdout)
