"""``generate llm`` prints the peak memory per rank class and whether it fits (issue 33).

The numbers are the memory model's (tests/core/test_memory_model.py checks them against Korthikanti et al.
2022 and the ZeRO paper by hand); here the command prints and emits the same values.
"""

from __future__ import annotations

import dataclasses
import json
import re

import pytest
from cli_inprocess import run

S, H, V, T = 2048, 12288, 51200, 8
SBH = S * H
GIB = 1 << 30


def _gib(nbytes: float) -> str:
    return f"{nbytes / GIB:,.1f}"


@pytest.mark.parametrize(
    "recompute, sp, layer_bytes",
    [
        ("none", [], 23 * SBH),
        ("selective", [], 13 * SBH),
        ("full", [], 2 * SBH),
        ("selective", ["--sp"], SBH * 34 // T),
    ],
)
def test_generate_llm_prints_korthikanti_activations_of_a_gpt3_175b_layer_at_tp8(tmp_path, recompute, sp, layer_bytes):
    # one GPT-3 175B layer on tp 8, one micro-batch: the layer (Table 2), the embedding's dropout mask (sbh, or
    # sbh/t under sp) and the output layer (4 sbh (/t) + fp32 logits 4 s V / t), section 4.4
    args = ["--model", "gpt3-175b", "--layers", "1", "--tp", "8", "--global-batch", "1", "--recompute", recompute]
    res = run("generate", "llm", *args, *sp, "--classes", "--json", "-o", tmp_path / "g")
    assert res.returncode == 0, res.stderr
    memory = json.loads(res.stdout)["memory"]
    (row,) = memory["classes"]
    div = T if sp else 1
    expected = layer_bytes + SBH // div + 4 * SBH // div + 4 * S * V // T
    assert row["terms"]["activations"] == expected
    assert row["ranks"] == 8 and row["layers"] == 1 and memory["fits"] is None
    table = run("generate", "llm", *args, *sp, "--classes", "--memory", "-o", tmp_path / "h")
    assert table.returncode == 0, table.stderr
    line = next(ln for ln in table.stdout.splitlines() if ln.startswith("│     0 │"))
    assert _gib(expected) in line.split("│")[8]


def test_gpt3_175b_on_one_gpu_is_reported_oom_by_how_much(tmp_path):
    res = run(
        "generate", "llm", "--model", "gpt3-175b", "--global-batch", "1", "--hw", "dgx-a100", "-o", tmp_path / "g"
    )
    assert res.returncode == 0, res.stderr
    verdict = res.stdout.strip().splitlines()[-1]
    m = re.fullmatch(
        r"memory: OOM on a100-80gb \(80\.0 GiB\): peak ([\d,.]+) GiB per rank \(stage 0\) is ([\d,.]+) GiB more "
        r"than the device holds; 1 of 1 rank classes do not fit",
        verdict,
    )
    assert m, verdict
    peak, short = (float(g.replace(",", "")) for g in m.groups())
    assert short == pytest.approx(peak - 80, abs=0.05)
    assert short > 16 * 174.6e9 / GIB - 80  # the model states alone: 16 bytes x 174.6B parameters


def test_llama3_405b_on_16384_h100_prints_every_rank_class_and_its_headroom(tmp_path):
    # Llama 3 405B (Dubey et al. 2024, section 3.3: TP 8, PP 16, DP 128 on 16,384 H100 80GB) with sequence
    # parallelism, selective recompute and the distributed optimizer, with its real 126 layers: the generator's
    # split (pipeline_split.chunk_layers) takes one layer off the first and the last stage, 7 + 14 x 8 + 7, and
    # the memory model reads the same split (tests/core/test_memory_model.py has the stage-0 bytes by hand).
    args = ["--model", "llama3-405b", "--tp", "8", "--pp", "16", "--dp", "128", "--sp"]
    args += ["--recompute", "selective", "--zero", "1", "--hw", "dgx-h100", "--classes"]
    res = run("generate", "llm", *args, "-o", tmp_path / "l")
    assert res.returncode == 0, res.stderr
    rows = [ln.split("│")[1:-1] for ln in res.stdout.splitlines() if re.match(r"│ +\d+ │", ln)]
    assert [int(r[0]) for r in rows] == list(range(16))
    assert [int(r[2]) for r in rows] == [7] + [8] * 14 + [7]
    assert all(r[1].strip() == "1,024" for r in rows)
    assert [float(r[3]) for r in rows] == [16 - s for s in range(16)]  # 1F1B: stage s holds 16 - s micro-batches
    peaks = [float(r[9].replace(",", "")) for r in rows]
    headroom = [r[10].strip() for r in rows]
    # stage 0 by hand (test_llama3_405b_stage0_bytes_by_hand): 79,167,897,241 B = 73.73 GiB, 6.27 GiB free;
    # stage 1 (8 layers, 15 micro-batches) is the largest: 84,219,448,115 B = 78.44 GiB, 1.56 GiB free
    assert (peaks[0], headroom[0], peaks[1], headroom[1]) == (73.7, "6.3", 78.4, "1.6")
    assert peaks[1:] == sorted(peaks[1:], reverse=True)  # falls with the micro-batches in flight
    assert peaks[0] < peaks[1]  # one layer fewer outweighs one micro-batch more
    for peak, room in zip(peaks, headroom):
        expected = 80.0 - peak
        got = float(room.replace("OOM", "").replace(",", ""))
        assert got == pytest.approx(expected, abs=0.11), (peak, room)
        assert room.startswith("OOM") == (expected < 0)
    assert res.stdout.splitlines()[-1] == (
        "memory: fits on h100-sxm (80.0 GiB): peak 78.4 GiB per rank (stage 1), at least 1.6 GiB free on every rank"
    )


@pytest.mark.parametrize("zero", [0, 1, 2, 3])
def test_generate_llm_prints_the_zero_papers_model_states(tmp_path, zero):
    # Rajbhandari et al. 2020, Figure 1 with K = 12 (bf16 parameters and gradients): (2 + 2 + 12) Psi unsharded;
    # stage 1 divides 12 Psi by N_d, stage 2 also 2 Psi of gradients, stage 3 also 2 Psi of parameters
    from tracekit.workloads.config import preset
    from tracekit.workloads.params import model_params

    args = ["--model", "gpt3-1.3b", "--layers", "2", "--dp", "4", "--global-batch", "4", "--zero", str(zero)]
    res = run("generate", "llm", *args, "--json", "-o", tmp_path / "g")
    assert res.returncode == 0, res.stderr
    (row,) = json.loads(res.stdout)["memory"]["classes"]
    psi = model_params(dataclasses.replace(preset("gpt3-1.3b")[0], num_layers=2))
    shard = -(-psi // 4)
    expected = {
        "params": 2 * (shard if zero == 3 else psi),
        "grads": 2 * (shard if zero >= 2 else psi),
        "optimizer": 12 * (shard if zero >= 1 else psi),
    }
    assert {k: row["terms"][k] for k in expected} == expected
