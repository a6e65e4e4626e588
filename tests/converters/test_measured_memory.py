"""Measured memory of a real CPU capture against the memory model (issue 33).

The capture: ``tests/data/memory/kineto_rank0.json.gz``, written by ``tests/data/memory/gpt_cpu_step.py`` with
``tracekit.capture`` (torch 2.13.0+cpu, one thread): the second training step (Adam) of a 4-layer GPT,
hidden 256, 4 heads, sequence 256, vocabulary 1024, micro-batch 4, fp32, with the profiler's allocation
events and the capture's CPU baseline (README there).  The memory model predicts its peak from the same
shape (:func:`tracekit.workloads.memory.stage_memory`, dropout masks as PyTorch eager keeps them on CPU).
"""

from __future__ import annotations

import ast
import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_inprocess import run

from tracekit.converters.pytorch.kineto_memory import BEFORE_CAPTURE, memory_peaks, peaks_from_metadata
from tracekit.converters.pytorch.kineto_reader import read_kineto
from tracekit.workloads.activations import CPU_EAGER_MASK_BYTES
from tracekit.workloads.config import LLMConfig, ParallelSpec, preset
from tracekit.workloads.memory import stage_memory
from tracekit.workloads.params import model_params

DATA = Path(__file__).resolve().parents[1] / "data" / "memory"
CAPTURE = DATA / "kineto_rank0.json.gz"
SCRIPT = DATA / "gpt_cpu_step.py"
MEASURED_PEAK = 197_509_368  # bytes: the bundled capture's baseline + largest 'Total Allocated'


def _shape() -> dict:
    """The capture script's SHAPE literal (read without importing torch)."""
    tree = ast.parse(SCRIPT.read_text())
    node = next(n for n in tree.body if isinstance(n, ast.Assign) and n.targets[0].id == "SHAPE")
    return ast.literal_eval(node.value)


def _config() -> LLMConfig:
    s = _shape()
    model = dataclasses.replace(
        preset("gpt3-1.3b")[0],
        num_layers=s["layers"],
        hidden_size=s["hidden"],
        num_heads=s["heads"],
        seq_length=s["seq"],
        vocab_size=s["vocab"],
    )
    return LLMConfig(model, ParallelSpec(), global_batch_size=s["batch"], micro_batch_size=s["batch"], dtype="fp32")


def _peak(path: Path):
    kt = read_kineto(path)
    (peak,) = memory_peaks(kt.memory_events, kt.of_category("cpu_op"), kt.memory_baseline)
    return peak


def test_the_capture_baseline_is_the_model_states_and_the_step_inputs():
    peak = _peak(CAPTURE)
    psi = model_params(_config().model)
    assert psi == 3_487_232  # the script's model: 12 h^2 + 13 h per layer, (V + s) h embeddings, final norm
    s = _shape()
    # fp32 parameters, gradients, Adam's two moments (16 bytes per parameter); the causal mask buffer (bool s x s);
    # the token ids and targets (int64 b x s); Adam's 'step' counter per parameter tensor (52 fp32 scalars)
    inputs = s["seq"] ** 2 + 2 * 8 * s["batch"] * s["seq"] + 52 * 4
    assert peak.baseline_bytes == 16 * psi + inputs == 55_877_840
    assert peak.held_by[0] == (BEFORE_CAPTURE, peak.baseline_bytes)
    assert sum(n for _, n in peak.held_by) == peak.peak_allocated_bytes == MEASURED_PEAK
    assert peak.device == "cpu" and peak.during == "aten::_log_softmax_backward_data"


def test_predicted_peak_within_10_percent_of_the_measured_one():
    predicted = stage_memory(_config(), 0, mask_bytes=CPU_EAGER_MASK_BYTES).peak_allocated_bytes
    error = (predicted - MEASURED_PEAK) / MEASURED_PEAK
    assert abs(error) <= 0.10 and round(error * 100, 1) == -4.3
    # What the model leaves out, all of it small tensors and transients alive at the peak (the first op of the
    # backward): the gradients of the log-probabilities and of the logits (2 x tokens x V fp32), the baseline's
    # mask buffer, token ids and Adam step counters (test above), and LayerNorm's saved mean and rstd (2 fp32 per
    # token for each of the 9 norms); 40 bytes of scalars (the loss and its gradient) remain.
    s = _shape()
    tokens = s["batch"] * s["seq"]
    explained = 2 * tokens * s["vocab"] * 4 + (55_877_840 - 16 * 3_487_232) + 9 * 2 * tokens * 4
    assert 0 <= MEASURED_PEAK - predicted - explained <= 64


def test_conversion_keeps_the_peak_and_analyze_reports_it(tmp_path):
    from tracekit.converters.pytorch.kineto_convert import convert_kineto
    from tracekit.io import read_traceset, write_traceset

    job = convert_kineto([CAPTURE])
    md = {a.name: a.value for a in job[0].metadata.attrs}
    assert md["memory_peak_allocated_bytes"] == MEASURED_PEAK
    write_traceset(job, tmp_path / "job")
    back = read_traceset(tmp_path / "job")
    assert peaks_from_metadata(back[0].metadata) == (_peak(CAPTURE),)
    res = run("analyze", tmp_path / "job", "--json")
    assert res.returncode == 0, res.stderr
    (rank,) = json.loads(res.stdout)["ranks"]
    (mem,) = rank["memory"]
    assert mem["peak_allocated_bytes"] == MEASURED_PEAK and mem["held_by"][0] == [BEFORE_CAPTURE, 55_877_840]
    table = run("analyze", CAPTURE)
    assert table.returncode == 0, table.stderr
    line = next(ln for ln in table.stdout.splitlines() if "│ cpu" in ln)
    assert "188.36 MiB" in line and "53.29 MiB" in line and "aten::_log_softmax_backward_data" in line


def test_a_bad_memory_event_names_its_index(tmp_path):
    from tracekit.converters.pytorch.kineto_reader import parse_kineto
    from tracekit.errors import TraceFormatError

    doc = {
        "traceEvents": [
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 0, "dur": 5},
            {"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": 1, "args": {"Bytes": "many"}},
        ]
    }
    with pytest.raises(TraceFormatError, match=r"traceEvents\[1\] \('\[memory\]'\): args 'Bytes' must be an integer"):
        parse_kineto(doc)


@pytest.mark.slow
def test_a_live_capture_matches_the_bundled_one(tmp_path):
    # the bundled file's provenance: rerun its script; the allocations are deterministic (one thread, fixed seed)
    pytest.importorskip("torch", reason="a live capture needs torch")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path)], capture_output=True, text=True, timeout=600, env=env
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    live, bundled = _peak(tmp_path / "kineto_rank0.json"), _peak(CAPTURE)
    assert live.peak_allocated_bytes == bundled.peak_allocated_bytes == MEASURED_PEAK
    assert live.held_by == bundled.held_by
