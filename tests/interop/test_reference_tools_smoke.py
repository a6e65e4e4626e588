"""Chakra from the package index is the release whose facts the interop tests assert, and its tools start."""

from __future__ import annotations

from reference_tools import CHAKRA_VERSION, chakra_facts, chakra_node_count, chakra_script

CONSOLE_SCRIPTS = ["chakra_converter", "chakra_jsonizer", "chakra_trace_link"]


def test_chakra_is_the_release_the_facts_were_read_with(samples_dir):
    assert chakra_node_count(samples_dir / "chakra" / "feeder.0.et") == 3_664  # 3,643 COMP + 21 COMM_COLL
    facts = chakra_facts()
    assert facts["mlc-chakra"] == CHAKRA_VERSION  # the refusals and counts asserted in tests/interop are 1.0.0's
    assert all((facts["scripts"] / name).is_file() for name in CONSOLE_SCRIPTS)


def test_chakra_converter_and_jsonizer_answer_help():
    for name in ("chakra_converter", "chakra_jsonizer"):
        proc = chakra_script(name, "--help")
        assert proc.returncode == 0 and proc.stdout.startswith("usage: "), (name, proc.stderr)
