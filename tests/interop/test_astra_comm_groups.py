"""Communicator groups the ASTRA-sim way: ``--comm-groups FILE`` (or ``<prefix>.comm_groups.json`` beside the set).

The recorded ``grp-*`` cases declare their groups only in ASTRA-sim's comm-group file (``groups.json``) and the
``tk-*-nometa`` exports only in ``workload.comm_groups.json`` beside the rank files; their traces carry ``pg_name``
ids and no ``process_group:init`` node.  ``validate``, ``info`` and ``replay`` refuse them without the file
("collective names undeclared process group") and accept them with it; the replayed times are ASTRA-sim
518bd51's, per rank (all 62 group cases are replayed with the file in test_astra_reference_jobs.py).
"""

from __future__ import annotations

import json

import pytest

from astra_reference import reference_case, reference_cases, workload_prefix
from cli_inprocess import run
from tracekit.sets.comm_groups import merge_declared, read_comm_groups
from tracekit.errors import ValidationError


def test_every_group_case_is_refused_without_its_file_and_valid_with_it():
    cases = reference_cases("groups")
    assert len(cases) == 62
    for case in cases[::6]:  # 11 of them through the CLI (the library path replays all 62)
        prefix = case.folder / "workload"
        refused = run("validate", prefix)
        assert refused.returncode == 3 and "collective names undeclared process group" in refused.stdout, case.name
        ok = run("validate", prefix, "--comm-groups", case.folder / "groups.json")
        assert ok.returncode == 0 and ok.stdout.startswith("OK: 8 ranks"), (case.name, ok.stdout)


@pytest.mark.parametrize(
    "name",
    ["grp-uneven-direct-Ring-all_reduce-1MiB", "grp-rowcol-direct-Ring-all_reduce-1MiB"],
)
def test_replay_with_the_comm_group_file_gives_astra_sims_times(name, tmp_path):
    case = reference_case(name)
    spec = tmp_path / "spec.toml"
    assert (
        run(
            "hw",
            "import-astra",
            "--system",
            case.folder / "system.json",
            "--network",
            case.folder / "network.yml",
            "-o",
            spec,
        ).returncode
        == 0
    )
    res = run(
        "replay",
        case.folder / "workload",
        "--hw",
        spec,
        "--comm-groups",
        case.folder / "groups.json",
        "--json",
        "--per-rank",
    )
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    ours = [r["iteration_time_ns"] for r in sorted(doc["ranks"], key=lambda r: r["rank"])]
    assert ours == case.cycles(
        "518bd51"
    )  # e.g. uneven on a ring: [11194, 11194, 10694, 10694, 11194, 11194, 21541, 21541]
    info = run("info", case.folder / "workload", "--comm-groups", case.folder / "groups.json", "--json")
    groups = json.loads(info.stdout)["process_groups"]
    assert {k: v for k, v in groups.items() if k != "0"} == json.loads((case.folder / "groups.json").read_text())


def test_the_file_beside_the_set_is_picked_up(tmp_path):
    # tracekit's export minus its METADATA nodes: groups only in workload.comm_groups.json beside the files
    case = reference_case("tk-llm-gpt3-1.3b-tp2-pp2-sp-nometa")
    prefix = workload_prefix(case)
    (prefix.parent / "workload.comm_groups.json").write_text((case.folder / "workload.comm_groups.json").read_text())
    assert run("validate", prefix).returncode == 0
    spec = tmp_path / "spec.toml"
    run(
        "hw",
        "import-astra",
        "--system",
        case.folder / "system.json",
        "--network",
        case.folder / "network.yml",
        "-o",
        spec,
    )
    doc = json.loads(run("replay", prefix, "--hw", spec, "--json", "--per-rank").stdout)
    assert [r["iteration_time_ns"] for r in sorted(doc["ranks"], key=lambda r: r["rank"])] == case.cycles("518bd51")


def test_a_bad_comm_group_file_is_named(tmp_path):
    bad = tmp_path / "g.json"
    for text, why in (
        ("[1, 2]", "must be a JSON object"),
        ('{"0": [0, 1]}', "not '0'"),
        ('{"1": [0, 0]}', "distinct non-negative ranks"),
        ('{"1": []}', "non-empty list"),
        ("{", "not valid JSON"),
    ):
        bad.write_text(text)
        with pytest.raises(ValidationError, match=why) as err:
            read_comm_groups(bad)
        assert str(bad) in str(err.value)
    assert read_comm_groups(_write(tmp_path, '{"2": [3, 1], "1": [0]}')) == {"2": (1, 3), "1": (0,)}


def test_a_group_the_traces_declare_otherwise_is_an_error():
    assert merge_declared({"1": (0, 1)}, {"1": [1, 0], "2": [2, 3]}, "g.json") == {"1": (0, 1), "2": (2, 3)}
    with pytest.raises(
        ValidationError, match=r"comm-group '1' has ranks \[0, 2\] but the traces declare it as \[0, 1\]"
    ):
        merge_declared({"1": (0, 1)}, {"1": [0, 2]}, "g.json")


def test_the_cli_names_a_conflicting_file(tmp_path):
    case = reference_case("tk-micro-all_reduce-group0246-p8-1MiB")  # declares group 1 = 0,2,4,6 in its traces
    groups = _write(tmp_path, '{"1": [0, 1, 2, 3]}')
    res = run("validate", case.folder / "workload", "--comm-groups", groups)
    assert res.returncode == 3
    assert f"[process-groups] {groups}" in res.stdout and "traces declare it as [0, 2, 4, 6]" in res.stdout


def _write(tmp_path, text: str):
    path = tmp_path / "groups.json"
    path.write_text(text)
    return path


@pytest.mark.parametrize("build", ["518bd51", "c459ab6"])
def test_the_build_option_picks_which_astra_sim_a_group_follows(build, tmp_path):
    # c459ab6 runs a sub-world group's direct all-reduce as a ring (36,829 ns), 518bd51 as configured (14,772 ns)
    case = reference_case("grp-strided-direct-Ring-all_reduce-1MiB")
    spec = tmp_path / "spec.toml"
    imported = run(
        "hw",
        "import-astra",
        "--system",
        case.folder / "system.json",
        "--network",
        case.folder / "network.yml",
        "--build",
        build,
        "-o",
        spec,
    )
    assert imported.returncode == 0 and f'build = "{build}"' in spec.read_text()
    res = run(
        "replay",
        case.folder / "workload",
        "--hw",
        spec,
        "--comm-groups",
        case.folder / "groups.json",
        "--json",
        "--per-rank",
    )
    ours = [r["iteration_time_ns"] for r in sorted(json.loads(res.stdout)["ranks"], key=lambda r: r["rank"])]
    assert ours == case.cycles(build) == [{"518bd51": 14_772, "c459ab6": 36_829}[build]] * 8
