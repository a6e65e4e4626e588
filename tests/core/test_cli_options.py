"""The CLI against docs/cli.md: one meaning per option name, global options anywhere, --json that parses."""

from __future__ import annotations

import re
from pathlib import Path

import click
import orjson
from click.testing import CliRunner

from tracekit.cli import cli
from tracekit.cli._options import hoist_global_flags

ROOT = Path(__file__).resolve().parents[2]
SAME_EVERYWHERE = ("--json", "--executor", "--workers", "--address")


def _table() -> dict[str, tuple[str, str]]:
    rows = re.findall(
        r"^\| `(--[a-z0-9-]+)` \| (flag|value|output) \| (.+) \|$", (ROOT / "docs" / "cli.md").read_text(), flags=re.M
    )
    return {name: (kind, meaning) for name, kind, meaning in rows}


def _commands(cmd: click.Command = cli, path: str = "tracekit"):
    yield path, cmd
    if isinstance(cmd, click.Group):
        for name, sub in cmd.commands.items():
            yield from _commands(sub, f"{path} {name}")


def _options():
    for path, cmd in _commands():
        for p in cmd.params:
            if isinstance(p, click.Option) and not p.hidden and "--help" not in p.opts:
                yield path, p


def test_every_option_is_in_the_table_with_its_kind():
    table = _table()
    assert len(table) > 80
    seen = set()
    for path, p in _options():
        for name in (o for o in p.opts if o.startswith("--")):
            seen.add(name)
            assert name in table, f"{path}: {name} is not in docs/cli.md"
            kind = table[name][0]
            is_flag = p.is_flag or p.count
            if kind == "flag":
                assert p.is_flag, f"{path} {name}: the table says flag"
            elif kind == "output":
                assert not is_flag and (name == "--output" or name.endswith("-out")), f"{path} {name}"
            else:
                assert not p.is_flag, f"{path} {name}: the table says it takes a value"
        # a written file is always -o/--output or a --*-out option
        long_names = [o for o in p.opts if o.startswith("--")]
        if any(n.endswith("-out") for n in long_names) or "--output" in long_names:
            assert all(table[n][0] == "output" for n in long_names)
    stale = set(table) - seen
    assert not stale, f"docs/cli.md lists options no command has: {sorted(stale)}"


def test_same_everywhere_options_have_one_definition():
    for name in SAME_EVERYWHERE:
        shapes = {}
        for path, p in _options():
            if name in p.opts:
                choices = tuple(getattr(p.type, "choices", ()) or ())
                shapes[path] = (p.is_flag, choices, p.default, type(p.type).__name__)
        assert len(shapes) >= 3, name
        assert len(set(shapes.values())) == 1, f"{name} differs between commands: {shapes}"


def test_executor_and_workers_the_same_in_validate_and_sweep():
    opts = {path: {p.name: p for p in cmd.params} for path, cmd in _commands()}
    for key in ("executor", "workers"):
        v, s = opts["tracekit validate"][key], opts["tracekit sweep"][key]
        assert (v.default, getattr(v.type, "choices", None)) == (s.default, getattr(s.type, "choices", None))
    assert list(opts["tracekit sweep"]["executor"].type.choices) == ["auto", "serial", "process", "ray"]


def test_transform_help_shows_output_required():
    res = CliRunner().invoke(cli, ["transform", "--help"])
    assert res.exit_code == 0
    assert "[required, unless the --pipeline file sets output]" in " ".join(res.stdout.split())


def test_global_flags_are_hoisted():
    assert hoist_global_flags(["replay", "x", "--hw", "a", "-q", "-vv", "--debug"]) == [
        "-q",
        "-vv",
        "--debug",
        "replay",
        "x",
        "--hw",
        "a",
    ]
    assert hoist_global_flags(["info", "--", "-q"]) == ["info", "--", "-q"]
    assert hoist_global_flags(["sweep", "--vary", "k=1"]) == ["sweep", "--vary", "k=1"]


def test_quiet_after_the_subcommand(samples_dir, tmp_path):
    prefix = str(samples_dir / "chakra" / "all_reduce")
    out = str(tmp_path / "t.json")
    loud = CliRunner().invoke(cli, ["timeline", prefix, "-o", out])
    assert loud.exit_code == 0 and "wrote" in loud.stderr
    quiet = CliRunner().invoke(cli, ["timeline", prefix, "-o", out, "-q"])
    assert quiet.exit_code == 0, quiet.output
    assert quiet.stderr == ""
    res = CliRunner().invoke(cli, ["replay", prefix, "--hw", "dgx-a100", "-q"])
    assert res.exit_code == 0 and "iteration time" in res.stdout and res.stderr == ""
    # --debug after the subcommand: the traceback shows (the error propagates instead of one line)
    res = CliRunner().invoke(cli, ["info", str(tmp_path / "missing"), "--debug"])
    assert res.exit_code != 0 and res.exception is not None and not isinstance(res.exception, SystemExit)


def test_traces_takes_the_files_a_shell_glob_expands_to(samples_dir):
    files = sorted(str(p) for p in (samples_dir / "chakra").glob("all_reduce.*.et"))
    assert len(files) >= 2
    res = CliRunner().invoke(cli, ["validate", *files, "--json"])
    assert res.exit_code == 0, res.output
    assert orjson.loads(res.stdout)["ranks"] == len(files)
    res = CliRunner().invoke(cli, ["info", *files, "--json"])
    assert res.exit_code == 0 and orjson.loads(res.stdout)["ranks"] == len(files)


def test_old_replay_json_file_is_refused_with_the_fix(samples_dir, tmp_path):
    res = CliRunner().invoke(
        cli,
        ["replay", str(samples_dir / "chakra" / "all_reduce"), "--hw", "dgx-a100", "--json", str(tmp_path / "r.json")],
    )
    assert res.exit_code == 1 and f"-o {tmp_path / 'r.json'}" in res.stderr


def _json_commands(samples_dir: Path, tmp_path: Path) -> list[list[str]]:
    ar = str(samples_dir / "chakra" / "all_reduce")
    text = str(ROOT / "tests" / "data" / "Resnet50_DataParallel.txt")
    r = str(tmp_path / "r.json")
    return [
        ["info", ar],
        ["validate", ar],
        ["replay", ar, "--hw", "dgx-a100", "-o", r, "--with-schedule"],
        ["report", r, "-o", str(tmp_path / "r.html")],
        ["diff", r, r],
        ["timeline", ar, "-o", str(tmp_path / "t")],
        ["hw", "list"],
        ["hw", "show", "dgx-h100"],
        [
            "hw",
            "import-astra",
            "--system",
            str(ROOT / "tests/data/astra/system_ring_splits1.json"),
            "--network",
            str(ROOT / "tests/data/astra/network_ring_4.yml"),
        ],
        ["convert", "text", text, "--ranks", "2", "-o", str(tmp_path / "resnet")],
        [
            "convert",
            "pytorch",
            "--et",
            str(samples_dir / "pytorch/dist_ws2/et_rank*.json"),
            "--kineto",
            str(samples_dir / "pytorch/dist_ws2/kineto_rank*.json"),
            "-o",
            str(tmp_path / "ws2"),
            "--executor",
            "serial",
        ],
        ["check-replay", str(tmp_path / "ws2"), "--hw", "dgx-a100"],
        [
            "generate",
            "micro",
            "--collective",
            "all_reduce",
            "--size",
            "1MiB",
            "--ranks",
            "2",
            "-o",
            str(tmp_path / "ar"),
        ],
        ["generate", "micro", "--list-shapes"],
        ["generate", "dlrm", "--model", "dlrm-small", "--ranks", "2", "-o", str(tmp_path / "dlrm")],
        [
            "generate",
            "llm",
            "--model",
            "gpt3-1.3b",
            "--layers",
            "1",
            "--ranks",
            "2",
            "--global-batch",
            "2",
            "-o",
            str(tmp_path / "llm"),
        ],
        ["transform", ar, "-o", str(tmp_path / "ar2"), "--scale-compute", "0.5"],
        [
            "sweep",
            ar,
            "--hw",
            "dgx-a100",
            "--vary",
            "network[0].bandwidth_gbps=100,200",
            "--executor",
            "serial",
            "-o",
            str(tmp_path / "sweep"),
        ],
        ["load", str(tmp_path / "d.json"), "-o", str(tmp_path / "l.0.et")],
        ["bench-coll", "--hw", "dgx-a100", "--ranks", "8", "--sizes", "1MiB,8MiB"],
        [
            "generate",
            "llm",
            "--model",
            "gpt3-1.3b",
            "--layers",
            "2",
            "--tp",
            "1",
            "--pp",
            "2",
            "--ranks",
            "4",
            "--global-batch",
            "4",
            "--classes",
            "-o",
            str(tmp_path / "cls"),
        ],
        ["expand", str(tmp_path / "cls"), "-o", str(tmp_path / "cls_ranks")],
        ["plan", "--model", "gpt3-1.3b", "--gpus", "2", "--hw", "dgx-a100", "--global-batch", "2", "--seq", "256"]
        + [
            "--tp",
            "1",
            "--pp",
            "1",
            "--recompute",
            "none",
            "--zero",
            "0",
            "--micro-batch",
            "1",
            "--executor",
            "serial",
        ],
    ]


def test_json_output_of_every_data_command_parses(samples_dir, tmp_path):
    CliRunner().invoke(cli, ["dump", str(samples_dir / "chakra" / "all_reduce.0.et"), "-o", str(tmp_path / "d.json")])
    covered = set()
    for args in _json_commands(samples_dir, tmp_path):
        res = CliRunner().invoke(cli, [*args, "--json", "-q"])
        assert res.exit_code == 0, (args, res.output)
        doc = orjson.loads(res.stdout)
        assert doc, args
        covered.add(" ".join(a for a in args[:2] if not a.startswith(("/", "-"))))
    # every command that has --json was run above (analyze has its own test with real Kineto files)
    with_json = {path.removeprefix("tracekit ") for path, p in _options() if "--json" in p.opts}
    missing = {c for c in with_json if not any(cov.startswith(c) for cov in covered)} - {"analyze"}
    assert not missing, missing
