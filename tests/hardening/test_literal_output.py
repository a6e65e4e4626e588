"""Issue 32, kind 4: every string read from a file reaches a terminal or a log line literally.

The trial put terminal escape sequences into node names, process-group names, YAML keys and file names; `replay`,
`analyze`, `hw import-astra` and `info` sent them raw (a name could clear the screen, recolour the rest of the
output or fake a line of ours). One sanitizer (:func:`tracekit.fmt.literal`) sits in the CLI's consoles, its error,
warning and log lines: each control character shows as its escape.
"""

from __future__ import annotations

import logging
from pathlib import Path

from _hardkit import one_line_error, ring_job, run

from tracekit.fmt import literal

# ESC [2J clears the screen, ESC ]0; sets the window title, CSI 0x9b is the one-byte C1 form, U+202E reverses text
EVIL = "ev\x1b[2J\x1b]0;pwned\x07il\x9b31m\u202e\nrank 0: OK"
SHOWN = "ev\\x1b[2J\\x1b]0;pwned\\x07il\\x9b31m\\u202e\\nrank 0: OK"
RAW = ("\x1b", "\x07", "\x9b", "\u202e")


def _clean(text: str) -> None:
    for ch in RAW:
        assert ch not in text, (ch, text)


def test_literal_escapes_every_control_character_and_nothing_else():
    assert literal(EVIL) == SHOWN
    assert literal("plain name / 1,024 µs [bold]") == "plain name / 1,024 µs [bold]"
    assert literal("a\tb\r\x00\x7f") == "a\\tb\\r\\x00\\x7f"
    assert literal("two\nlines\x1b", keep_newlines=True) == "two\nlines\\x1b"


def test_a_node_name_with_escapes_is_printed_literally_by_replay_and_info(tmp_path):
    prefix = ring_job(tmp_path, name=EVIL)
    res = run("replay", prefix, "--hw", "dgx-a100", "--collective-model", "alpha_beta")
    assert res.exit_code == 0, res.stderr
    _clean(res.stdout + res.stderr)
    # the critical path's longest step is the compute node: its name is shown, cut to 60 characters, escaped
    assert "ev\\x1b[2J\\x1b]0;pwned\\x07il\\x9b31m" in res.stdout
    info = run("info", prefix)
    assert info.exit_code == 0, info.stderr
    _clean(info.stdout + info.stderr)


def test_a_file_name_with_escapes_is_printed_literally_in_the_error_line(tmp_path):
    bad = tmp_path / f"{EVIL.splitlines()[0]}.0.et"
    bad.write_bytes(b"\x00garbage")
    line = one_line_error(run("info", bad))
    _clean(line)
    assert "\\x1b[2J\\x1b]0;pwned\\x07il\\x9b31m\\u202e.0.et" in line


def test_a_yaml_key_with_escapes_is_printed_literally_by_hw_import_astra(tmp_path):
    data = Path(__file__).parents[1] / "data" / "astra"
    network = tmp_path / "net.yml"
    network.write_text((data / "Ring.yml").read_text() + '\n"x\\e[2Jy\\x9b": 1\n', encoding="utf-8")
    res = run("hw", "import-astra", "--system", data / "Ring.json", "--network", network, "-o", tmp_path / "s.toml")
    assert res.exit_code == 0, res.stderr
    _clean(res.stderr)
    assert "x\\x1b[2Jy\\x9b" in res.stderr


def test_a_log_line_is_printed_literally():
    from tracekit.cli._common import LogLineFormatter

    record = logging.LogRecord("tracekit.x", logging.WARNING, __file__, 1, "node %s skipped", (EVIL,), None)
    assert LogLineFormatter().format(record) == f"tracekit: warning: node {SHOWN} skipped"
