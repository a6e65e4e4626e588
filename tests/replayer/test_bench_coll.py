"""bench-coll: size ranges, nccl-tests output parsing, model curves, the CLI (table, --json, HTML plot)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from browser import rendered, require_chromium
from tracekit.cli import cli
from tracekit.errors import TracekitError
from tracekit.replayer.orchestration.bench_coll import (
    format_table,
    model_curves,
    parse_nccl_tests,
    parse_size,
    size_range,
    write_plot,
)
from tracekit.replayer.simulation.specs import load_spec

# Real nccl-tests 2.x stdout (format with the root column), cut to a few rows: 2 nodes x 8 H100 on GCP A3
# Mega, from github.com/lessizzmore/create-a3mega-ztan-fork, file ztan-NCCL-test-result.
A3MEGA = (
    """\
# nThread 1 nGpus 1 minBytes 8 maxBytes 8589934592 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
# Using devices
"""
    + "".join(
        f"#  Rank {r:2d} Group  0 Pid   {6899 + r} on ztan-mig-{'235z' if r < 8 else 'gq73'} device  {r % 8} "
        f"[0000:04:00] NVIDIA H100 80GB HBM3\n"
        for r in range(16)
    )
    + """\
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
           8             2     float     sum      -1    135.8    0.00    0.00      0    123.5    0.00    0.00      0
     1048576        262144     float     sum      -1    203.2    5.16    9.68      0    207.2    5.06    9.49      0
    67108864      16777216     float     sum      -1   1261.6   53.20   99.74      0   1270.2   52.83   99.06      0
  8589934592    2147483648     float     sum      -1    47535  180.71  338.82      0    47743  179.92  337.35      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 70.742
"""
)

# Older format (no root column, "error" column), 2x A100-SXM4-40GB: NVIDIA/nccl issue #583.
OLD_FORMAT = """\
nThread 1 nGpus 2 minBytes 32 maxBytes 1073741824 step: 2(factor) warmup iters: 5 iters: 20 validation: 1
                                                       out-of-place                       in-place
       size         count      type   redop     time   algbw   busbw  error     time   algbw   busbw  error
        (B)    (elements)                       (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
          32             8     float     sum    10.14    0.00    0.00  0e+00    10.21    0.00    0.00  0e+00
          64            16     float     sum    10.14    0.01    0.01  0e+00    10.31    0.01    0.01  0e+00
"""


def test_sizes():
    assert parse_size("8B") == 8 and parse_size("64K") == 65536 and parse_size("8GiB") == 8 << 30
    assert size_range("8B:64B") == [8, 16, 32, 64]
    assert size_range("1MiB:1GiB:32") == [1 << 20, 1 << 25, 1 << 30]
    assert size_range("8,1M") == [8, 1 << 20]
    with pytest.raises(TracekitError, match="bad size '8XB'"):
        parse_size("8XB")
    with pytest.raises(TracekitError, match="bad size range '1G:8B'"):
        size_range("1G:8B")


def test_parse_real_output():
    run = parse_nccl_tests(A3MEGA, path="a3mega.txt")
    assert run.ranks == 16 and run.collective is None
    assert [(r.size_bytes, r.time_us, r.algbw_gbps, r.busbw_gbps) for r in run.rows] == [
        (8, 135.8, 0.0, 0.0),
        (1048576, 203.2, 5.16, 9.68),
        (67108864, 1261.6, 53.20, 99.74),
        (8589934592, 47535.0, 180.71, 338.82),
    ]
    assert run.rows[0].source == "nccl-tests:a3mega.txt"
    with pytest.raises(TracekitError, match="a3.txt: the file is an nccl-tests all_gather run, not all_reduce"):
        parse_nccl_tests("# Collective test starting: all_gather_perf\n" + A3MEGA, path="a3.txt")
    old = parse_nccl_tests(OLD_FORMAT, ranks=2, collective="all_reduce")
    assert [(r.size_bytes, r.time_us) for r in old.rows] == [(32, 10.14), (64, 10.14)]


def test_parse_errors_name_the_file_and_line():
    with pytest.raises(TracekitError, match="run.txt: no nccl-tests data rows"):
        parse_nccl_tests("# nothing here\n", path="run.txt")
    with pytest.raises(TracekitError, match="run.txt: rank count unknown"):
        parse_nccl_tests(OLD_FORMAT, path="run.txt")
    bad = OLD_FORMAT.replace("10.14    0.01    0.01", "10.14    x.01    0.01")
    with pytest.raises(TracekitError, match=r"run.txt: line 6: not an nccl-tests data row"):
        parse_nccl_tests(bad, path="run.txt", ranks=2)


def test_model_curves_busbw_definitions():
    rows = model_curves(load_spec("dgx-a100"), "all_gather", [8], ["alpha_beta"], [8 << 20])
    (row,) = rows
    # alpha-beta ring all-gather of 1 MiB per rank (8 MiB output): 7 x 700 ns + 7/8 x 8 MiB / 300 GB/s.
    time_ns = 7 * 700 + 7 / 8 * (8 << 20) / 300
    assert row.time_us == pytest.approx(time_ns / 1000)
    assert row.busbw_gbps == pytest.approx((8 << 20) / time_ns * 7 / 8)
    assert "size (B)" in format_table(rows)


def test_cli_json_and_html(tmp_path):
    out = tmp_path / "run.txt"
    out.write_text(A3MEGA)
    html = tmp_path / "bench.html"
    res = CliRunner().invoke(
        cli,
        [
            "-q",
            "bench-coll",
            "--hw",
            "dgx-h100",
            "--ranks",
            "8,16",
            "--sizes",
            "1MiB:8GiB:8192",
            "--model",
            "nccl",
            "--nccl-tests",
            str(out),
            "--json",
            "-o",
            str(html),
        ],
    )
    assert res.exit_code == 0, res.output
    rows = json.loads(res.stdout)
    assert [(r["source"], r["ranks"], r["size_bytes"]) for r in rows] == [
        ("nccl", 8, 1 << 20),
        ("nccl", 8, 8 << 30),
        ("nccl", 16, 1 << 20),
        ("nccl", 16, 8 << 30),
        ("nccl-tests:run.txt", 16, 8),
        ("nccl-tests:run.txt", 16, 1 << 20),
        ("nccl-tests:run.txt", 16, 64 << 20),
        ("nccl-tests:run.txt", 16, 8 << 30),
    ]
    assert rows[1]["algorithm"] == "nccl:nvls/Simple"
    text = html.read_text()
    assert text.count('data-key="row.') == 3 * len(rows) and "Plotly.newPlot" in text


def test_cli_bad_input_is_one_line(tmp_path):
    res = CliRunner().invoke(cli, ["bench-coll", "--hw", "dgx-a100", "--sizes", "1G:8B"])
    assert res.exit_code == 1 and "bad size range" in res.stderr and "Traceback" not in res.stderr
    res = CliRunner().invoke(cli, ["bench-coll", "--hw", "dgx-a100", "-o", str(tmp_path / "x.svg")])
    assert res.exit_code == 1 and "must end in .html or .png" in res.stderr


def test_rendered_page_and_png(tmp_path):
    """In headless Chromium (skipped without it): one plot drawn with every point, and a PNG written."""
    require_chromium()

    rows = model_curves(load_spec("dgx-h100"), "all_reduce", [8, 16], ["nccl"], size_range("8B:8GiB:1024"))
    page = rendered(write_plot(rows, tmp_path / "b.html", title="t"))
    assert page.body_attrs.get("data-plots-rendered") == "1"
    assert page.plots["plot0"].points == 2 * len(rows)  # busbw and time panels
    png = write_plot(rows, tmp_path / "b.png", title="t")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_mpirun_tagged_output_and_one_gpu_runs_parse():
    """Open MPI's --tag-output prefixes every line with ``[job,rank]<stdout>:``; a 1-GPU run lists one device."""
    from tracekit.replayer.orchestration.bench_coll import parse_nccl_tests

    tagged = "\n".join(
        [
            "[1,0]<stdout>:#   Rank  0 Pid  65741 on node-000000 device  0 [0x00] A100-SXM4-40GB",
            "[1,0]<stdout>:#   Rank  1 Pid  65742 on node-000000 device  1 [0x00] A100-SXM4-40GB",
            "[1,0]<stdout>:     1048576        262144     float     sum    100.1   10.47   19.64    N/A    99.93   10.49"
            "   19.67    N/A",
        ]
    )
    run = parse_nccl_tests(tagged)
    assert run.ranks == 2 and [(r.size_bytes, r.time_us) for r in run.rows] == [(1048576, 100.1)]
    one = (
        "#   Rank  0 Pid 1 on h device  0 [0x00] A100\n  1024  256  float  sum  4.49  0.00  0.00  0  4.4  0.00  0.00  0"
    )
    assert parse_nccl_tests(one).ranks == 1
