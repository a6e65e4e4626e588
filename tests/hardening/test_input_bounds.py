"""Issue 32, kind 3: bounds on every input, checked before the work starts; bad values are one error line.

The trial read `/dev/zero` as an nccl-tests file (17 GB before it was stopped), grew a YAML alias bomb to 6.4 GB
in `hw import-astra`, and got tracebacks or absurd numbers from a pipeline marker `{0}`, `bandwidth_gbps = 1e-300`,
NaN `--compute-us`, `--peak-tflops 1e-300` and a class-manifest slot that is not an integer.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from _hardkit import one_line_error, ring_job, run

ASTRA = Path(__file__).parents[1] / "data" / "astra"
BOMB = """topology: [ Ring ]
npus_count: [ 4 ]
bandwidth: [ 50.0 ]
latency: [ 500.0 ]
a: &a ["x", "x", "x", "x", "x", "x", "x", "x", "x"]
b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]
"""


@pytest.mark.parametrize(
    "args",
    [
        ("bench-coll", "--hw", "dgx-a100", "--nccl-tests", "/dev/zero", "-o", "out.html"),
        ("hw", "import-astra", "--system", "/dev/zero", "--network", ASTRA / "Ring.yml", "-o", "out"),
        ("convert", "text", "/dev/urandom", "--ranks", "2", "-o", "out"),
    ],
)
def test_a_character_device_is_refused_as_an_input(args, tmp_path):
    args = tuple(tmp_path / a if a in ("out", "out.html") else a for a in args)
    line = one_line_error(run(*args))
    device = next(a for a in args if str(a).startswith("/dev/"))
    assert line == f"tracekit: error: {device}: is a character device, not a file; give an input file"
    assert list(tmp_path.iterdir()) == []


def test_a_raw_input_over_the_cap_is_refused_before_it_is_read(tmp_path, monkeypatch):
    from tracekit.io import read_input_bytes

    big = tmp_path / "w.txt"
    big.write_bytes(b"0" * 2000)
    monkeypatch.setenv("TRACEKIT_MAX_DECOMPRESSED_BYTES", "1000")
    line = one_line_error(run("convert", "text", big, "--ranks", "2", "-o", tmp_path / "out"))
    assert line == (
        f"tracekit: error: {big}: holds more than 1,000 bytes (limit: set TRACEKIT_MAX_DECOMPRESSED_BYTES to raise it)"
    )
    fifo = tmp_path / "fifo"  # a FIFO has no size up front: it is read up to the cap
    os.mkfifo(fifo)
    import threading

    def feed() -> None:
        with open(fifo, "wb") as fh:
            fh.write(b"1" * 5000)

    feeder = threading.Thread(target=feed)
    feeder.start()
    with pytest.raises(Exception, match="holds more than 1,000 bytes"):
        read_input_bytes(fifo)
    feeder.join()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo", "w.txt"]


def test_reading_a_small_input_does_not_allocate_the_cap(tmp_path):
    """A 2 KiB spec or config read under the default 4 GiB cap: ``fh.read(cap + 1)`` made Python allocate 4 GiB up
    front for every such read (a MemoryError under ``ulimit -v``); now the blocks follow the file's size."""
    import tracemalloc

    from tracekit.io import read_input_bytes
    from tracekit.replayer.simulation.specs import load_spec

    small = tmp_path / "small.toml"
    small.write_bytes(b"x" * 2048)
    tracemalloc.start()
    try:
        assert read_input_bytes(small) == b"x" * 2048
        load_spec("dgx-h100")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 * 2**20, f"peak {peak:,} bytes"  # was 4,308,091,634 bytes for load_spec alone


def test_a_yaml_alias_is_refused_by_hw_import_astra(tmp_path):
    network = tmp_path / "bomb.yml"
    network.write_text(BOMB)
    line = one_line_error(
        run("hw", "import-astra", "--system", ASTRA / "Ring.json", "--network", network, "-o", tmp_path / "s.toml")
    )
    assert line == (
        f"tracekit: error: {network}: not valid YAML at line 6, column 8: YAML aliases (*name) are not accepted "
        "in an ASTRA-sim config"
    )
    assert not (tmp_path / "s.toml").exists()


def test_a_spec_rate_of_1e_minus_300_is_refused_with_its_key(tmp_path):
    spec = tmp_path / "tiny.toml"
    res = run("hw", "show", "dgx-h100", "--toml")
    spec.write_text(res.stdout.replace("bandwidth_gbps = 450.0", "bandwidth_gbps = 1e-300", 1))
    line = one_line_error(run("replay", ring_job(tmp_path), "--hw", spec, "-o", tmp_path / "r.json"))
    assert line.startswith(f"tracekit: error: {spec}: ") and "bandwidth_gbps" in line
    assert line.endswith("must be at least 1e-06, got 1e-300")
    assert not (tmp_path / "r.json").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            (
                "generate",
                "micro",
                "--collective",
                "all_reduce",
                "--size",
                "1MiB",
                "--ranks",
                "2",
                "--compute-us",
                "nan",
            ),
            "Invalid value for '--compute-us': 'nan' is not a finite number (see '",
        ),
        (
            ("generate", "llm", "--model", "gpt3-1.3b", "--layers", "2", "--tp", "2", "--global-batch", "4")
            + ("--peak-tflops", "1e-300", "--mem-bw-gbps", "100"),
            "Invalid value for '--peak-tflops': 1e-300 is not in the range 1e-06<=x<=1000000.0 (see '",
        ),
    ],
)
def test_a_non_finite_or_absurd_float_option_is_one_line(args, message, tmp_path):
    assert one_line_error(run(*args, "-o", tmp_path / "g")).startswith(f"tracekit: error: {message}")
    assert list(tmp_path.iterdir()) == []


def test_a_pipeline_marker_with_another_field_is_one_line(tmp_path):
    line = one_line_error(run("transform", ring_job(tmp_path), "--keep-iteration", "0", "-o", tmp_path / "x"))
    assert "ProfilerStep#N" in line  # the default marker, named with N (was format(), a traceback on '{0}')
    from tracekit.errors import ConfigError
    from tracekit.transforms.select import KeepIteration

    with pytest.raises(ConfigError) as exc:
        KeepIteration(0, "{0}#{n}")
    assert str(exc.value) == "marker '{0}#{n}': {n} is the only field it may hold (write {{ and }} for braces)"


@pytest.mark.parametrize("value", ["x", {"a": 1}, 1e30, 2**63])
def test_a_class_manifest_slot_value_of_the_wrong_kind_is_one_line(value, tmp_path):
    prefix = tmp_path / "cl"
    gen = run(
        "generate",
        "llm",
        "--model",
        "gpt3-1.3b",
        "--layers",
        "2",
        "--tp",
        "2",
        "--global-batch",
        "4",
        "--classes",
        "-o",
        prefix,
    )
    assert gen.exit_code == 0, gen.stderr
    manifest = tmp_path / "cl.classes.json"
    doc = json.loads(manifest.read_text())
    doc["classes"][0]["slots"] = [["pg_name", "int64_val", value]]
    doc["classes"][0]["values"] = [[value] for _ in doc["classes"][0]["ranks"]]
    manifest.write_text(json.dumps(doc))
    line = one_line_error(run("info", manifest))
    assert line.startswith(f"tracekit: error: {manifest}: bad rank-class manifest: class 0: slot 'pg_name': ")
    assert line.endswith("is not an integer" if not isinstance(value, int) else "is out of the range of int64")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("generate", "llm", "--model", "gpt3-1.3b", "--global-batch", "1000000000"),
            "--global-batch 1,000,000,000 (1,000,000,000 micro-batches of 24 layers per stage) would make at least "
            "48,000,000,000 nodes per rank",
        ),
        (
            ("convert", "text", Path(__file__).parents[2] / "sample_traces" / "text" / "Resnet50_DataParallel.txt")
            + ("--ranks", "2", "--passes", "100000000"),
            "--passes 100,000,000 of 54 layers would make at least 10,800,000,000 nodes per rank",
        ),
    ],
)
def test_a_count_option_beyond_the_node_budget_is_refused_before_any_work(args, message, tmp_path):
    # the trial's --global-batch 1e9 ran 104 s into a MemoryError; --passes had no bound at all
    line = one_line_error(run(*args, "-o", tmp_path / "g"))
    assert line == (
        f"tracekit: error: {message}; tracekit builds at most 16,777,216 (about 8-16 GB of memory while they are built)"
    )
    assert list(tmp_path.iterdir()) == []


@pytest.mark.realdata
def test_a_huge_nccl_tests_size_is_one_line(real_dir, tmp_path):
    log = real_dir / "nccl-tests" / "echo-azure-nd-a100-v4" / "nccl_8.log"
    lines = log.read_text().splitlines()
    row = next(i for i, line in enumerate(lines) if line.split()[:1] == ["8"])
    lines[row] = lines[row].replace("8", "9" * 26, 1)
    bad = tmp_path / "huge.log"
    bad.write_text("\n".join(lines) + "\n")
    line = one_line_error(
        run("bench-coll", "--hw", "dgx-a100", "--ranks", "8", "--nccl-tests", bad, "-o", tmp_path / "b.html")
    )
    assert line.startswith(
        f"tracekit: error: {bad}: line {row + 1}: size {int('9' * 26):,} B or a time or bandwidth is out of range"
    )  # was a traceback (orjson: Integer exceeds 64-bit range)
    assert not (tmp_path / "b.html").exists()


def test_a_process_group_rank_out_of_range_is_one_line(tmp_path):
    # the trial's `process_group:init` with rank 99999999999 ended in a MemoryError traceback (range(world_size))
    capture = Path(__file__).parents[2] / "sample_traces" / "pytorch" / "dist_ws2"
    for r in (0, 1):
        doc = json.loads((capture / f"et_rank{r}.json").read_text())
        init = next(n for n in doc["nodes"] if n["name"] == "## process_group:init ##")
        init["inputs"]["values"][0] = init["inputs"]["values"][0].replace('"ranks": []', '"ranks": [0, 99999999999]', 1)
        (tmp_path / f"et_rank{r}.json").write_text(json.dumps(doc))
    line = one_line_error(
        run("convert", "pytorch", "--et", f"{tmp_path}/et_rank*.json", "-o", tmp_path / "out" / "job")
    )
    # both files hold it; the workers convert them side by side and the first to fail is reported
    assert line in {
        f"tracekit: error: {tmp_path}/et_rank{r}.json: rank {r}: node 3: process group '0': rank 99999999999 is out "
        "of range (0 to 1,048,575); a job of that many ranks cannot be held"
        for r in (0, 1)
    }
    assert not (tmp_path / "out").exists()
