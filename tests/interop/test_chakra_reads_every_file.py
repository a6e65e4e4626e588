"""Chakra from the package index (mlc-chakra 1.0.0) reads every ``.et`` we read and every one we write, as we do.

Chakra's own decoder (``protolib`` into its ``et_def_pb2``, in ``.venv-chakra``: tests/reference_tools.py) reads
every ``.et`` / ``.et.gz`` in ``sample_traces/``, in ``../shared/real`` (tar members included) and in the outputs of
small jobs tracekit generates, converts, transforms and exports for ASTRA-sim. Per file the metadata version and
per node id, name, type, data and control dependencies, start and duration (microseconds), inputs, outputs and every
attribute must equal what tracekit reads from the same file. ``chakra_jsonizer`` then writes each file as JSON, and
its nodes must be ours. Files go to Chakra in a few processes (tests/chakra_side.py), not one per file.
"""

from __future__ import annotations

import json
import re
import tarfile
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from reference_tools import assert_chakra_reads_as_we_do, chakra_facts, chakra_script, chakra_side
from tracekit.cli import cli
from tracekit.io import read_trace
from tracekit.model import NodeType

SMALL_LLM = "--model gpt3-1.3b --layers 2 --hidden 256 --heads 8 --seq 128 --ffn 1024 --vocab 1000".split()
ROOFLINE = ["--peak-tflops", "100", "--mem-bw-gbps", "1000"]


@pytest.fixture(autouse=True, scope="module")
def _chakra_installed():
    """Skip the module at once, before any input is prepared, when Chakra is not installed."""
    chakra_facts()


def _et_files(folder: Path) -> list[Path]:
    return sorted([*folder.rglob("*.et"), *folder.rglob("*.et.gz")])


@pytest.fixture(scope="module")
def real_et_files(real_dir, tmp_path_factory) -> list[Path]:
    """Every ``.et``/``.et.gz`` under ../shared/real, with the members of its tar files extracted."""
    files = _et_files(real_dir)
    out = tmp_path_factory.mktemp("real-tar")
    for tar_path in sorted(real_dir.rglob("*.tar")):
        with tarfile.open(tar_path) as tar:
            tar.extractall(out / tar_path.stem, filter="data")
    return files + _et_files(out)


def tk(*args: str | Path) -> None:
    result = CliRunner().invoke(cli, ["-q", *map(str, args)], catch_exceptions=False)
    assert result.exit_code == 0, result.output


@pytest.fixture(scope="module")
def generated(tmp_path_factory, test_data_dir) -> Path:
    """Small jobs tracekit writes from nothing: micro (a sub-group, a send/recv ring), an LLM (tp2 pp2), a DLRM,
    the LLM transformed (dp2, compacted, gzip-compressed) and the LLM exported for ASTRA-sim."""
    out = tmp_path_factory.mktemp("generated")
    astra = test_data_dir / "astra"
    tk("generate", "micro", "--collective", "all_reduce", "--size", "64KiB", "--ranks", "8", "--group", "0-3",
       "--compute-us", "3", "-o", out / "micro-group")  # fmt: skip
    tk("generate", "micro", "--pattern", "ring", "--size", "1MiB", "--ranks", "4", "-o", out / "micro-ring")
    tk("generate", "llm", *SMALL_LLM, *ROOFLINE, "--tp", "2", "--pp", "2", "--global-batch", "4", "-o", out / "llm")
    tk("generate", "dlrm", "--model", "dlrm-small", "--ranks", "4", "-o", out / "dlrm")
    tk("transform", out / "llm", "--dp", "2", "--compact", "--compress", "-o", out / "llm-dp2")
    spec = out / "spec.toml"
    tk("hw", "import-astra", "--system", astra / "system_ring_splits4.json", "--network",
       astra / "network_ring_4.yml", "-o", spec)  # fmt: skip
    tk("export", "astra", out / "llm", "-o", out / "astra-llm", "--hw", spec)
    return out


@pytest.fixture(scope="module")
def converted(real_dir, generated) -> Path:
    """Real inputs converted by tracekit (a text workload, a 4-rank gloo capture with Kineto), one exported."""
    out = generated.parent / "converted"
    out.mkdir(exist_ok=True)
    tk("convert", "text", real_dir / "text" / "Resnet50_DataParallel.txt", "--ranks", "4", "-o", out / "text")
    gloo = real_dir / "pytorch" / "torch-cpu-gloo" / "dist_ws4"
    tk("convert", "pytorch", "--et", gloo / "et_rank*.json", "--kineto", gloo / "kineto_rank*.json", "--workers",
       "1", "-o", out / "ws4")  # fmt: skip
    tk("export", "astra", out / "ws4", "-o", out / "astra-ws4", "--hw", generated / "spec.toml")
    return out


def test_chakra_decodes_every_bundled_sample_as_we_do(samples_dir):
    counts = assert_chakra_reads_as_we_do(_et_files(samples_dir))
    assert counts == {
        **{f"all_reduce.{r}.et": 1 for r in range(4)},
        **{f"custom_allreduce.{r}.et": 35 for r in range(2)},
        "feeder.0.et": 3_664,  # shared/real/README.md: 3,643 COMP + 21 COMM_COLL
    }


@pytest.mark.realdata
def test_chakra_decodes_every_shared_real_file_as_we_do(real_et_files):
    counts = assert_chakra_reads_as_we_do(real_et_files)
    # shared/real/README.md: ASTRA-sim's 4-rank and 64-rank one-collective sets, its custom all-reduce (35 nodes
    # per rank), Chakra's own converter output (14,391 nodes) and its feeder test trace (3,664)
    assert len(counts) == 4 + 2 + 64 + 1 + 1
    assert sum(counts[f"one_comm_coll_node_allreduce.{r}.et"] for r in range(64)) == 64
    assert [counts[f"custom_allreduce.{r}.et"] for r in range(2)] == [35, 35]
    assert counts["resnet.0.et"] == 14_391 and counts["chakra.0.et"] == 3_664


def test_chakra_decodes_what_we_generate_transform_and_export_as_we_do(generated):
    files = _et_files(generated)
    counts = assert_chakra_reads_as_we_do(files)
    assert Counter(name.split(".")[0] for name in counts) == {
        "micro-group": 8,
        "micro-ring": 4,
        "llm": 4,
        "llm-dp2": 8,
        "dlrm": 4,
        "workload": 4,  # export astra of the LLM
    }
    assert sum(name.endswith(".et.gz") for name in counts) == 8
    # the sub-group's members hold its declaration, compute and all-reduce; the other four ranks only compute
    assert [counts[f"micro-group.{r}.et"] for r in range(8)] == [3] * 4 + [1] * 4


@pytest.mark.realdata
def test_chakra_decodes_what_we_convert_from_real_inputs_as_we_do(converted):
    files = _et_files(converted)
    counts = assert_chakra_reads_as_we_do(files)
    # tests/converters/REAL_TRACES.md: dist_ws4 is 360 nodes per rank; Resnet50 DATA 215 nodes per rank
    assert counts == {
        **{f"text.{r}.et": 215 for r in range(4)},
        **{f"ws4.{r}.et": 360 for r in range(4)},
        # export astra writes for ASTRA-sim master (518bd51) by default, which aborts on METADATA nodes: the one
        # process_group:init node per rank is removed (its deps bridged)
        **{f"workload.{r}.et": 359 for r in range(4)},
    }
    # the capture's sub-microsecond times are in tracekit's extra fields, which Chakra skips (floors agree above)
    assert any(n.duration_ns % 1000 for n in read_trace(converted / "ws4.0.et").nodes)


def _jsonized_nodes(path: Path) -> list[dict]:
    """``chakra_jsonizer`` output: the metadata's JSON object, then one per node, written back to back."""
    text, docs = path.read_text(), []
    decoder, space = json.JSONDecoder(), re.compile(r"\s*")
    pos = space.match(text, 0).end()
    while pos < len(text):
        doc, pos = decoder.raw_decode(text, pos)
        docs.append(doc)
        pos = space.match(text, pos).end()
    return docs[1:]


# the fields compared, with the value protobuf's JSON form means when it leaves one out (the field's default)
JSONIZED_FIELDS = [("id", "0"), ("name", ""), ("type", "INVALID_NODE"), ("dataDeps", []), ("durationMicros", "0")]


def _as_jsonizer_writes(trace_path: Path) -> list[list]:
    # protobuf's JSON form: uint64 as strings, enums by name, fields left out when they hold the default
    return [
        [str(n.id), n.name, NodeType(n.type).name, [str(d) for d in n.data_deps], str(n.duration_ns // 1000)]
        for n in read_trace(trace_path).nodes
    ]


@pytest.mark.realdata
def test_chakra_jsonizer_writes_every_file_with_our_nodes(samples_dir, real_et_files, generated, converted, tmp_path):
    files = [*_et_files(samples_dir), *real_et_files, *_et_files(generated), *_et_files(converted)]
    assert chakra_side("jsonize", tmp_path, *files) == [{"ok": True}] * len(files)
    for i, path in enumerate(files):
        docs = _jsonized_nodes(tmp_path / f"{i}.json")
        theirs = [[d.get(field, default) for field, default in JSONIZED_FIELDS] for d in docs]
        assert theirs == _as_jsonizer_writes(path), path
    # the console script itself, on one file, writes the same bytes as its main called in the batch
    proc = chakra_script("chakra_jsonizer", "--input_filename", files[0], "--output_filename", tmp_path / "one.json")
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "one.json").read_bytes() == (tmp_path / "0.json").read_bytes()
