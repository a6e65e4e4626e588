"""Faults left by the last session's trial of issue 32, each reproduced with the trial's input.

Each test asserts the right value or the one error line (file, rank, node, bad value; options with their dashes)
and that no output file was written.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _hardkit import one_line_error, ring_job, run


@pytest.mark.parametrize("command", [("replay", "--hw", "dgx-h100"), ("validate",), ("info",)])
def test_a_comm_group_id_given_twice_is_refused_naming_the_file_and_the_id(tmp_path, command):
    """`{"1": [0, 1], "1": [2, 3]}` was read as `{"1": [2, 3]}` (JSON's last-wins)."""
    prefix = ring_job(tmp_path, 4)
    groups = tmp_path / "groups.json"
    groups.write_text('{"1": [0, 1], "2": [0, 1, 2, 3], "1": [2, 3]}')
    out = tmp_path / "r.json"
    extra = ("-o", out) if command[0] == "replay" else ()
    res = run(*command[:1], prefix, *command[1:], "--comm-groups", groups, *extra)
    assert one_line_error(res) == (
        f"tracekit: error: {groups}: comm-group id '1' appears twice in the file; give each group once"
    )
    assert not out.exists()


@pytest.mark.parametrize(
    ("args", "code", "says"),
    [
        (("generate", "llm", "--model", "gpt3-1.3b", "--dp", "0"), 1, "Invalid value for '--dp': 0 is not in the range x>=1"),
        (("generate", "llm", "--model", "gpt3-1.3b", "--layers", "-4"), 1, "Invalid value for '--layers': -4 is not in the range x>=1"),
        (("generate", "dlrm", "--ranks", "2", "--tables", "0"), 1, "Invalid value for '--tables': 0 is not in the range x>=1"),
        (("convert", "text", "{job}.0.et", "--ranks", "2", "--passes", "0"), 1, "Invalid value for '--passes': 0 is not in the range x>=1"),
        (("transform", "{job}", "--dp", "0"), 1, "Invalid value for '--dp': 0 is not in the range x>=1"),
        (("transform", "{job}", "--scale-comm", "-2"), 1, "Invalid value for '--scale-comm': -2.0 is not in the range x>0"),
        (
            ("generate", "llm", "--model", "gpt3-1.3b", "--dtype", "int3"), 2,
            "Invalid value for '--dtype': 'int3' is not one of 'fp32', 'tf32', 'bf16', 'fp16', 'fp8'",
        ),
        (
            ("generate", "dlrm", "--ranks", "2", "--dtype", "xx"), 2,
            "Invalid value for '--dtype': 'xx' is not one of 'fp32', 'tf32', 'bf16', 'fp16', 'fp8'",
        ),
    ],
)  # fmt: skip
def test_a_bad_count_or_dtype_names_the_option_with_its_dashes(tmp_path, args, code, says):
    """`--dp 0` said 'dp must be positive, got 0' and `--dtype xx` 'dtype must be one of ...': no option named."""
    job = ring_job(tmp_path, 2)
    out = tmp_path / "out" / "x"
    res = run(*(a.format(job=job) for a in args), "-o", out)
    line = one_line_error(res, code)
    assert line.split(" (see ")[0] == f"tracekit: error: {says}"
    assert not out.parent.exists()


def test_the_dtype_choices_are_the_generators_dtypes():
    from tracekit.cli._options import DTYPES
    from tracekit.workloads.units import TRAINING_DTYPES

    assert DTYPES == TRAINING_DTYPES


@pytest.mark.parametrize(
    ("jitter", "last"),
    [
        ("jitter=comm:0.1", "waited on: no rank (the members of all 3 communications arrived together)"),
        ("jitter=compute:0.1", "waited on (last to arrive, share of 3 communications): rank 0 33.3%, rank 1 33.3%, rank 2 33.3%"),
    ],
)  # fmt: skip
def test_the_samples_summary_says_who_was_waited_on_or_that_no_rank_was(tmp_path, jitter, last):
    """A comm-only jitter leaves every member arriving together: the line ended in an empty list."""
    prefix = ring_job(tmp_path, 4)
    res = run("replay", prefix, "--hw", "dgx-h100", "--perturb", jitter, "--samples", "3")
    assert res.exit_code == 0, res.stderr
    assert res.stdout.splitlines()[-1] == last


def test_a_samples_summary_of_a_job_without_communications_says_so():
    from tracekit.cli._perturb import waited_on_line

    assert waited_on_line((), 0) == "waited on: nothing (no communication with two or more members)"


def test_a_ring_at_cp_1_is_no_context_parallelism_as_in_megatron(tmp_path):
    """`--cp 1 --stack-knob cp_comm=ring` (Megatron-LM's default --cp-comm-type p2p) was refused for want of fused
    attention, though at cp=1 there is no context-parallel exchange: it now writes the allgather job's nodes."""
    from tracekit.io import read_traceset

    base = ("generate", "llm", "--model", "gpt3-1.3b", "--layers", "1", "--global-batch", "4")
    assert run(*base, "--cp", "1", "--stack-knob", "cp_comm=ring", "-o", tmp_path / "ring").exit_code == 0
    assert run(*base, "--cp", "1", "-o", tmp_path / "gather").exit_code == 0
    ring, gather = (read_traceset(tmp_path / n)[0] for n in ("ring", "gather"))
    assert len(ring.nodes) == len(gather.nodes) > 100
    assert [(n.name, n.duration_ns) for n in ring.nodes] == [(n.name, n.duration_ns) for n in gather.nodes]
    res = run(*base, "--cp", "2", "--stack-knob", "cp_comm=ring", "-o", tmp_path / "cp2")
    assert one_line_error(res) == (
        "tracekit: error: cp=2: ring context parallelism needs fused attention (its online softmax merges the "
        "steps); stack megatron-2021 runs without it here: add --stack-knob fused_attention=true or cp_comm=allgather"
    )
    assert not list(tmp_path.glob("cp2*"))


def _results(tmp_path):
    """The full (``--per-rank``) and compact results of one 4-rank replay, as (path, document) pairs."""
    prefix = ring_job(tmp_path, 4)
    out = {}
    for form, extra in (("full", ("--per-rank",)), ("compact", ())):
        path = tmp_path / f"{form}.json"
        assert run("replay", prefix, "--hw", "dgx-h100", "-o", path, *extra).exit_code == 0
        out[form] = (path, json.loads(path.read_text()))
    return out


def _first_rank(doc: dict) -> dict:
    return (doc.get("ranks") or doc["rank_classes"])[0]


BAD_RESULTS = [
    (lambda d: d.update(iteration_time_ns=-5), "iteration_time_ns: expected a duration in ns (a number >= 0), got -5"),
    (lambda d: d.update(iteration_time_ns=float("nan")), "iteration_time_ns: expected a duration in ns (a number >= 0), got nan"),
    (lambda d: d.update(iteration_time_ns="12"), "iteration_time_ns: expected a duration in ns (a number >= 0), got '12'"),
    (lambda d: _first_rank(d).update(compute_ns=-7), "{ranks}[0].compute_ns: expected a duration in ns (a number >= 0), got -7"),
    (lambda d: _first_rank(d).update(comm_wait_ns=float("inf")), "{ranks}[0].comm_wait_ns: expected a duration in ns (a number >= 0), got inf"),
    (lambda d: d["critical_path"].update(length_ns=None), "critical_path.length_ns: expected a duration in ns (a number >= 0), got null"),
    (lambda d: d["critical_path"]["steps"][0].update(end_ns=-1), "critical_path.steps[0].end_ns: expected a duration in ns (a number >= 0), got -1"),
    (lambda d: d.update(node_count=-1), "node_count: expected an integer >= 0, got -1"),
    (lambda d: d.update(compute_methods=[1]), "compute_methods: expected an object, got a list"),
    (lambda d: d.pop("provenance"), "provenance: missing"),
    (lambda d: d["provenance"].update(world_size="4"), "provenance.world_size: expected an integer >= 1, got '4'"),
]  # fmt: skip


@pytest.mark.parametrize("form", ["full", "compact"])
@pytest.mark.parametrize(("change", "says"), BAD_RESULTS)
def test_a_malformed_or_negative_result_field_is_named_by_diff_and_report(tmp_path, form, change, says):
    """diff/report printed Python's text ("ValueError(\\"could not convert string to float: 'abc'\\")", a
    traceback for a list of compute methods) and compared a negative or NaN iteration time as if it were one."""
    good, doc = _results(tmp_path)[form]
    change(doc)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))  # Python's json writes NaN and Infinity, as another tool may
    field = says.format(ranks="ranks" if form == "full" else "rank_classes")
    want = f"tracekit: error: {bad}: malformed replay result: {field}"
    assert one_line_error(run("diff", bad, good, "--html-out", tmp_path / "d.html")) == want
    assert one_line_error(run("report", bad, "-o", tmp_path / "r.html")) == want
    assert not (tmp_path / "d.html").exists() and not (tmp_path / "r.html").exists()


def test_validate_stream_refuses_comm_groups_it_would_not_read(tmp_path):
    """`validate --stream --comm-groups FILE` printed OK whatever FILE held: the streaming pass has no group checks."""
    prefix = ring_job(tmp_path, 4)
    groups = tmp_path / "groups.json"
    groups.write_text(json.dumps({"1": [0, 1]}))
    res = run("validate", prefix, "--stream", "--comm-groups", groups)
    assert one_line_error(res, exit_code=2).split(" (see ")[0] == (
        f"tracekit: error: --comm-groups {groups}: validate --stream checks each rank file alone, without process "
        "groups; drop --stream to check the groups"
    )
    res = run("validate", prefix, "--stream")
    assert res.exit_code == 0 and res.stdout.strip().splitlines()[-1] == "OK: 4 ranks, 12 nodes, 0 warnings"


NET = "topology: [ Ring ]\nnpus_count: [ {n} ]\nbandwidth: [ {bw} ]\nlatency: [ {lat} ]\n"
ASTRA_BOUNDS = [
    ({"n": 100000000}, {}, "n.yml: key npus_count[0]: must be an integer from 1 to 16,777,216, got 100,000,000"),
    ({"bw": "1.0e-300"}, {}, "n.yml: key bandwidth[0]: must be a number from 1e-06 to 1e18 (GB/s), got 1e-300"),
    ({"bw": "1e3"}, {}, "n.yml: key bandwidth[0]: must be a number from 1e-06 to 1e18 (GB/s), got the text '1e3' (YAML reads a number without a dot as text: write 1.0e+03)"),
    ({"lat": "-1"}, {}, "n.yml: key latency[0]: must be a number from 0 to 1e18 (ns), got -1"),
    ({}, {"local-mem-bw": 1e-300}, "s.json: key local-mem-bw: must be a number from 1e-06 to 1e18 (GB/s), got 1e-300"),
    ({}, {"endpoint-delay": -3}, "s.json: key endpoint-delay: must be an integer from 0 to 1e18 (ns), got -3"),
    ({}, {"preferred-dataset-splits": 10**8}, "s.json: key preferred-dataset-splits: must be an integer from 1 to 65,536, got 100,000,000"),
    ({}, {"active-chunks-per-dimension": 0}, "s.json: key active-chunks-per-dimension: must be an integer from 1 to 65,536, got 0"),
    ({}, {"peak-perf": 1e-300}, "s.json: key peak-perf: must be a number 0 or from 1e-06 to 1e18 (TFLOP/s), got 1e-300"),
]  # fmt: skip


@pytest.mark.parametrize(("net", "system", "says"), ASTRA_BOUNDS)
def test_hw_import_astra_prints_every_range_one_way(tmp_path, test_data_dir, net, system, says):
    """Bounds were printed as '1e+18' and '1.67772e+07'; a local-mem-bw of 1e-300 was written into a spec that
    then failed to load, and 10^8 dataset splits into one whose replay ran for hours (0.13 ms per chunk)."""
    (tmp_path / "n.yml").write_text(NET.format(**{"n": 8, "bw": "50.0", "lat": "500.0", **net}))
    doc = json.loads((test_data_dir / "astra" / "system_ring_splits1.json").read_text())
    (tmp_path / "s.json").write_text(json.dumps({**doc, **system}))
    out = tmp_path / "o.toml"
    res = run("hw", "import-astra", "--system", tmp_path / "s.json", "--network", tmp_path / "n.yml", "-o", out)
    assert one_line_error(res) == f"tracekit: error: {tmp_path}/{says}"
    assert not out.exists()


def test_a_spec_file_with_more_dataset_splits_than_the_limit_is_refused(tmp_path, test_data_dir):
    """The spec loader took any split count; `replay` of 10^8 splits would have run for hours."""
    astra = test_data_dir / "astra"
    spec = tmp_path / "ring.toml"
    res = run(
        "hw",
        "import-astra",
        "--system",
        astra / "system_ring_splits1.json",
        "--network",
        astra / "network_ring_8.yml",
        "-o",
        spec,
    )
    assert res.exit_code == 0, res.stderr
    spec.write_text(spec.read_text().replace("preferred_dataset_splits = 1", "preferred_dataset_splits = 100000000"))
    line = one_line_error(run("hw", "show", spec))
    assert (
        line == f"tracekit: error: {spec}: key astra.preferred_dataset_splits: must be at most 65,536, got 100,000,000"
    )


def _class_set_of(tmp_path, world: int):
    """A 2-class LLM set (tp 8, pp 2) whose manifest is widened to ``world`` ranks, half per pipeline stage
    (each member keeps its class's first values: the summary reads only the representatives)."""
    small = tmp_path / "small" / "j"
    res = run(
        "generate", "llm", "--model", "gpt3-1.3b", "--layers", "2", "--tp", "8", "--pp", "2", "--ranks", "64",
        "--global-batch", "4", "--classes", "-o", small,
    )  # fmt: skip
    assert res.exit_code == 0, res.stderr
    doc = json.loads(small.with_name("j.classes.json").read_text())
    half = world // 2
    for k, c in enumerate(doc["classes"]):
        c["ranks"], c["values"] = list(range(k * half, (k + 1) * half)), [c["values"][0]] * half
        c["file"] = f"../small/{c['file']}"
    doc["world_size"] = world
    big = tmp_path / "big"
    big.mkdir()
    for c in doc["classes"]:
        (big / Path(c["file"]).name).write_bytes((big / c["file"]).read_bytes())
        c["file"] = Path(c["file"]).name
    (big / "j.classes.json").write_text(json.dumps(doc))
    return big / "j"


def test_info_of_a_class_set_costs_its_classes_not_its_ranks(tmp_path, monkeypatch):
    """`info` of a 1,048,576-rank class set made one summary and one table key per rank (15.1 s CPU, 91.6 s wall
    under load; now 5.2 s / 31.9 s, the rest reading the 62 MB manifest: benchmarks/bench_info_classes.py)."""
    from tracekit.checks.member_summaries import MemberSummaries

    prefix = _class_set_of(tmp_path, 1 << 14)
    small = json.loads(run("info", tmp_path / "small" / "j", "--json").stdout)["per_rank"]  # 64 ranks, 2 classes
    stage_nodes = (small[0]["nodes"], small[32]["nodes"])

    def no_walk(self):
        raise AssertionError("info walked every rank's summary")

    monkeypatch.setattr(MemberSummaries, "__iter__", no_walk)
    res = run("info", prefix)
    assert res.exit_code == 0, res.stderr
    lines = res.stdout.splitlines()
    assert f"16384 rank(s), {8192 * sum(stage_nodes):,} nodes (2 distinct)" in lines[0]
    assert sum("0-8191" in line for line in lines) == 4 and sum("8192-16383" in line for line in lines) == 4
    one = json.loads(run("info", prefix, "--rank", "10000", "--json").stdout)
    assert [(s["rank"], s["nodes"]) for s in one["per_rank"]] == [(10000, stage_nodes[1])]
    monkeypatch.undo()
    every = json.loads(run("info", prefix, "--json").stdout)["per_rank"]
    assert len(every) == 16384 and every[16383]["path"].endswith("j.classes.json#rank16383")


@pytest.mark.parametrize(
    ("command", "head", "says"),
    [
        (("info",), b"", "rank 0: empty node record (zero length) (at byte 1)"),
        (("validate", "--stream"), b"", "rank 0: empty node record (zero length) (at byte 1)"),
        (("replay", "--hw", "dgx-h100"), b"", "empty node record (zero length) (at byte 1)"),
        (("info",), b"\x00\x80\x80\x80\x80\x04", "rank 0: record of 1073741824 bytes runs past the end of the file (33554426 bytes left) (at byte 1); not a Chakra execution trace?"),
        (("validate", "--stream"), b"\x00\x80\x80\x80\x80\x04", "rank 0: record of 1073741824 bytes runs past the end of the file (at byte 1); not a Chakra execution trace?"),
    ],
)  # fmt: skip
def test_a_large_file_of_zero_bytes_fails_at_its_first_record_without_being_read_whole(tmp_path, command, head, says):
    """32 MiB of zero bytes named .et were read whole (1.5 GB in the trial: 1.5-3 GB of memory) before the error
    at byte 1; the first 64 KiB are framed first now, and the streaming reader's slow path reads what it checks."""
    import subprocess
    import sys

    path = tmp_path / "zero.0.et"
    with open(path, "wb") as fh:
        fh.write(head)
        fh.truncate(32 << 20)  # a sparse file of 32 MiB: zeros after ``head``
    script = """
import sys
from tracekit.cli import main
try:
    main()
finally:
    hwm = [line for line in open("/proc/self/status") if line.startswith("VmHWM:")]  # this exec's peak, kB
    print("@rss", hwm[0].split()[1], file=sys.stderr)
"""
    proc = subprocess.run(
        [sys.executable, "-c", script, *command[:1], str(path), *command[1:]], capture_output=True, text=True
    )
    lines = proc.stderr.strip().splitlines()
    rss_kb = int(lines[-1].split()[1])
    assert proc.returncode == 1 and lines[:-1] == [f"tracekit: error: {path}: {says}"]
    assert rss_kb < 32 * 1024 + 32 * 1024, rss_kb  # the CLI's own ~45 MB, not the file's 32 MiB more


@pytest.fixture(scope="module")
def timed_runs(tmp_path_factory):
    """One generated 2-rank job replayed three ways: measured and roofline on dgx-h100, measured on dgx-a100."""
    base = tmp_path_factory.mktemp("timed")
    job = base / "j"
    res = run(
        "-q", "generate", "llm", "--model", "gpt3-1.3b", "--layers", "1", "--tp", "2", "--ranks", "2",
        "--global-batch", "2", "--hw", "dgx-a100", "-o", job,
    )  # fmt: skip
    assert res.exit_code == 0, res.stderr
    out = {}
    for name, hw, compute in (
        ("m", "dgx-h100", "measured"),
        ("r", "dgx-h100", "roofline"),
        ("a", "dgx-a100", "measured"),
    ):
        out[name] = base / f"{name}.json"
        assert run("-q", "replay", job, "--hw", hw, "--compute", compute, "-o", out[name]).exit_code == 0
    return out


@pytest.mark.parametrize(
    ("a", "b", "says"),
    [
        ("m", "r", "compute measured vs roofline"),
        ("m", "a", "hardware dgx-h100 vs dgx-a100"),
        ("r", "a", "compute roofline vs measured; hardware dgx-h100 vs dgx-a100"),
    ],
)
def test_diff_warns_when_the_runs_were_timed_differently(timed_runs, a, b, says):
    """A diff of a measured and a projected (or roofline) replay said nothing: its change is mostly the method's."""
    res = run("diff", timed_runs[a], timed_runs[b])
    assert res.exit_code == 0, res.stderr
    assert res.stderr.splitlines() == [
        f"tracekit: warning: {timed_runs[a]} and {timed_runs[b]} were timed differently ({says}): the diff "
        "includes that change"
    ]
    same = run("diff", timed_runs[a], timed_runs[a])
    assert same.exit_code == 0 and same.stderr == ""


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("sweep", "{job}", "--hw", "dgx-a100", "-o", "{job}"), "-o {job}: a folder of that name would hide the trace set {job} (job.0.et ...) from every command that reads the prefix; choose another output folder"),
        (("export", "astra", "{job}", "--hw", "dgx-a100", "-o", "{job}/"), "-o {job}/: a folder of that name would hide the trace set {job} (job.0.et ...) from every command that reads the prefix; choose another output folder"),
        (("replay", "{job}", "--hw", "dgx-a100", "-o", "{job}"), "{job}: is the prefix of an input trace set (job.0.et ...): a file of that name would hide the set from every command that reads the prefix; choose another output path"),
        (("replay", "{job}", "--hw", "dgx-a100", "--timeline-out", "{job}"), "{job}: is the prefix of an input trace set (job.0.et ...): a file of that name would hide the set from every command that reads the prefix; choose another output path"),
    ],
)  # fmt: skip
def test_an_output_named_like_the_input_prefix_is_refused(tmp_path, args, says):
    """`sweep job -o job` made a folder `job`: every later `tracekit replay job` said "no trace files match"."""
    job = ring_job(tmp_path, 4)
    before = sorted(p.name for p in tmp_path.iterdir())
    line = one_line_error(run(*(a.format(job=job) for a in args)))
    assert line == f"tracekit: error: {says.format(job=job)}"
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert run("info", job).exit_code == 0


@pytest.mark.parametrize(
    ("hw", "says"),
    [
        ("specs", "specs: is a directory, not a hardware spec (a preset name or a TOML file)"),
        ("dgx-a100,dgx-h100", "no hardware preset named 'dgx-a100,dgx-h100'; presets: azure-nd-a100-v4, dgx-a100, dgx-h100, h200; a list is not one spec (sweep takes --hw once per spec: --hw A --hw B)"),
    ],
)  # fmt: skip
def test_a_hardware_argument_that_is_a_folder_or_a_list_says_so(tmp_path, monkeypatch, hw, says):
    """`--hw specs` (a folder) said "no hardware preset named 'specs'"; `--hw a,b` gave no hint that sweep repeats
    --hw."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "specs").mkdir()
    job = ring_job(tmp_path, 2)
    line = one_line_error(run("sweep", job, "--hw", hw, "-o", tmp_path / "s"))
    assert line == f"tracekit: error: {says}"
    assert not (tmp_path / "s").exists()


def test_a_prefix_reads_its_own_rank_files_not_those_of_the_set_named_after_it(tmp_path):
    """`transform job -o job.0` wrote job.0.<r>.et; then every command on `job` failed with "two files for rank 2:
    job.0.2.et and job.2.et" (the prefix glob job.*.et took job.0.2.et as rank 2)."""
    job = ring_job(tmp_path, 4)
    res = run("transform", job, "--scale-compute", "2", "-o", f"{job}.0")
    assert res.exit_code == 0, res.stderr
    for prefix, compute in ((job, "1.000 us"), (f"{job}.0", "2.000 us")):
        res = run("info", prefix)
        assert res.exit_code == 0, res.stderr
        assert "4 rank(s), 12 nodes (1 distinct)" in res.stdout and compute in res.stdout
    assert run("validate", job).stdout.strip().splitlines()[-1] == "OK: 4 ranks, 12 nodes, 0 warnings"
    assert run("replay", job, "--hw", "dgx-h100").exit_code == 0


def test_keep_ranks_with_a_range_past_the_rank_limit_is_one_line(tmp_path):
    """`transform --keep-ranks 0-99999999999` built a list of 10^11 ranks: MemoryError and a traceback."""
    job = ring_job(tmp_path, 4)
    line = one_line_error(run("transform", job, "--keep-ranks", "0-99999999999", "-o", tmp_path / "k"))
    assert line == (
        "tracekit: error: bad rank list '0-99999999999': rank 99,999,999,999 is out of range (tracekit handles ranks "
        "0 to 1,048,575)"
    )
    assert not list(tmp_path.glob("k*"))


def test_bench_coll_sizes_past_a_chakra_comm_size_are_refused_naming_the_option():
    """`--sizes 99999999999999999999T` printed a row of 1.1e32 bytes taking 6.4e26 us; 1TB was 'not a size'."""
    line = one_line_error(run("bench-coll", "--hw", "dgx-a100", "--ranks", "8", "--sizes", "99999999999999999999T"))
    assert line == (
        "tracekit: error: --sizes 99999999999999999999T: size '99999999999999999999T' is "
        "109,951,162,777,599,999,998,900,488,372,224 bytes; a Chakra comm_size holds at most 2^63-1 bytes"
    )
    res = run("bench-coll", "--hw", "dgx-a100", "--ranks", "8", "--sizes", "1TB")
    assert res.exit_code == 0 and res.stdout.splitlines()[-1].split()[0] == "1099511627776"


@pytest.mark.parametrize(
    ("size", "says"),
    [
        ("99999999999999999999TiB", "--size 99999999999999999999TiB: 109,951,162,777,599,999,998,900,488,372,224 bytes; a Chakra comm_size holds at most 2^63-1 bytes"),
        ("1EiB", "--size 1EiB: unknown size unit 'EiB' in '1EiB'; use B, KB, MB, GB, TB (10^3n) or KiB, MiB, GiB, TiB (2^10n)"),
    ],
)  # fmt: skip
def test_generate_micro_size_errors_name_the_option(tmp_path, size, says):
    """A size past int64 was blamed on "node 'ALL_REDUCE_0': comm size ..." and named no option."""
    out = tmp_path / "m"
    line = one_line_error(
        run("generate", "micro", "--collective", "all_reduce", "--size", size, "--ranks", "2", "-o", out)
    )
    assert line == f"tracekit: error: {says}"
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--perturb", "slow=0:1e308"), "--perturb slow=0:1e308: slow rank 0: needs a rank >= 0 and a factor in (0, 1,000,000], got 1e+308"),
        (("--perturb", "delay=0:1e300s"), "--perturb delay=0:1e300s: delayed node 0: needs a node >= 0 and a delay of 0 to 9,007,199,254,740,992 ns, got inf"),
        (("--compute-scale", "0"), "Invalid value for '--compute-scale' / '--scale-compute': 0.0 is not in the range x>0"),
    ],
)  # fmt: skip
def test_a_perturbation_or_scale_out_of_range_is_one_line(tmp_path, args, says):
    """`--perturb slow=0:1e308` ended in OverflowError (a traceback); `--compute-scale 0` named no option."""
    job = ring_job(tmp_path, 4)
    line = one_line_error(run("replay", job, "--hw", "dgx-a100", *args, "-o", tmp_path / "r.json"))
    assert line.split(" (see ")[0] == f"tracekit: error: {says}"
    assert not (tmp_path / "r.json").exists()


@pytest.mark.parametrize("name", ["", "..", "a/b", ".x"])
def test_export_astra_refuses_a_name_that_leaves_the_folder(tmp_path, name):
    """`export astra -o ex --name ''` wrote ex.<r>.et beside the folder; `--name ..` wrote hidden ex/...<r>.et."""
    job = ring_job(tmp_path, 4)
    before = sorted(p.name for p in tmp_path.iterdir())
    res = run("export", "astra", job, "--hw", "dgx-a100", "-o", tmp_path / "ex", "--name", name)
    assert one_line_error(res, exit_code=2).split(" (see ")[0] == (
        f"tracekit: error: --name {name!r}: must be a plain file name (not empty, no '/', not starting with '.') so "
        "the traces land in the output folder as visible files"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == before
