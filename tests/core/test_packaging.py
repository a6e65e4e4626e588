"""The generated protobuf module is current, and `import tracekit` stays light."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_generated_module_is_current(tmp_path):
    from grpc_tools import protoc

    rc = protoc.main(
        ["protoc", f"-I{ROOT / 'schema'}", f"--python_out={tmp_path}", str(ROOT / "schema" / "et_def.proto")]
    )
    assert rc == 0
    fresh = (tmp_path / "et_def_pb2.py").read_text()
    committed = (ROOT / "tracekit" / "_proto" / "et_def_pb2.py").read_text()
    assert fresh == committed, "run `make proto` and commit tracekit/_proto/et_def_pb2.py"


def test_import_tracekit_pulls_in_no_producers_replayer_or_cli_libraries():
    code = (
        "import sys, tracekit, tracekit.io, tracekit.checks.validate, tracekit.sets.traceset; "
        "bad = [m for m in sys.modules if m.startswith(('tracekit.converters', 'tracekit.replayer', "
        "'rich', 'click'))]; print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_converters_and_replayer_install_under_tracekit():
    import tracekit.converters
    import tracekit.replayer

    assert Path(tracekit.converters.__file__).parent == ROOT / "converters"
    assert Path(tracekit.replayer.__file__).parent == ROOT / "replayer"
