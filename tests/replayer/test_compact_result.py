"""The compact replay result (issue 34 item 3): a folded job's ``replay -o`` lists rank classes and the collective
table; ``--per-rank`` writes every rank and collective instance; ``report`` and ``diff`` read both forms."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

import orjson
import pytest
from click.testing import CliRunner

from tracekit.cli import cli
from tracekit.converters.generators import LLMConfig, ParallelSpec, Roofline, llm_preset
from tracekit.converters.generators.llm import write_llm
from tracekit.errors import ReplayError
from tracekit.replayer.reporting.diff import diff_results
from tracekit.replayer.reporting.report import load_result, summary_values
from tracekit.replayer.results.compact import rank_spans
from tracekit.replayer.results.result import ReplayResult

ROOF = Roofline(989e12 * 0.7, 3.35e12 * 0.8)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    """A 16-rank job (tp 2 x pp 2 x dp 4, two rank classes) replayed once as each form: ``(compact, full)`` paths."""
    base = tmp_path_factory.mktemp("compact")
    model, _ = llm_preset("gpt3-1.3b")
    config = LLMConfig(
        replace(model, num_layers=4), ParallelSpec(dp=4, tp=2, pp=2), global_batch_size=16, micro_batch_size=1
    )
    write_llm(config, base / "job", ROOF, classes=True)
    out = {}
    for form, extra in (("compact", []), ("full", ["--per-rank"])):
        path = base / f"{form}.json"
        res = CliRunner().invoke(cli, ["replay", str(base / "job"), "--hw", "dgx-h100", "-o", str(path), *extra])
        assert res.exit_code == 0, res.output
        out[form] = path
    return out["compact"], out["full"]


def test_rank_spans_closed_form():
    assert rank_spans([5, 0, 2, 1, 7, 6]) == [(0, 2), (5, 7)]
    assert rank_spans([]) == []


def test_folded_job_writes_rank_classes_and_the_collective_table(results):
    compact, full = results
    c, f = orjson.loads(compact.read_bytes()), orjson.loads(full.read_bytes())
    assert (c["format_version"], c["form"], f["format_version"]) == (2, "classes", 1)
    assert "ranks" not in c and "collectives" not in c and "schedule" not in c
    # two classes (one per pipeline stage), each the 8 ranks of its stage as one range
    assert [cl["ranks"] for cl in c["rank_classes"]] == [[[0, 7]], [[8, 15]]]
    assert len(f["ranks"]) == 16
    for cl in c["rank_classes"]:
        for a, b in cl["ranks"]:
            for r in f["ranks"][a : b + 1]:
                assert {k: r[k] for k in cl if k != "ranks"} == {k: v for k, v in cl.items() if k != "ranks"}
    # the table has one row per (kind, bytes, group, size, algorithm); counts and total times from every instance
    groups: dict[tuple, list[int]] = defaultdict(list)
    for inst in f["collectives"]:
        key = (inst["kind"], inst["comm_bytes"], inst["pg_name"], len(inst["ranks"]), inst["algorithm"])
        groups[key].append(inst["time_ns"])
    table = {
        (g["kind"], g["comm_bytes"], g["pg_name"], g["group_size"], g["algorithm"]): g for g in c["collective_table"]
    }
    assert len(f["collectives"]) == 416 and len(table) == len(groups) == 36
    assert {k: (g["count"], g["total_time_ns"]) for k, g in table.items()} == {
        k: (len(v), sum(v)) for k, v in groups.items()
    }
    assert c["critical_path"] == f["critical_path"] and c["iteration_time_ns"] == f["iteration_time_ns"]
    assert len(orjson.dumps(c["rank_classes"])) == 333  # exact bytes: 2 rows of 7 figures with one range each
    assert compact.stat().st_size * 3 < full.stat().st_size  # the rest is mostly the critical path


def test_compact_reads_back_with_every_rank(results):
    compact, full = results
    a, b = load_result(compact), load_result(full)
    assert a.ranks == b.ranks and a.iteration_time_ns == b.iteration_time_ns
    assert a.critical_path == b.critical_path and a.node_count == b.node_count
    assert a.collectives == () and a.collective_summary() == b.collective_summary()
    assert summary_values(a) == summary_values(b)  # the report's summary: collectives 352, send/recv pairs 64
    assert [v[2] for v in summary_values(a) if v[1] in ("collectives", "send_recv_pairs")] == [352, 64]


def test_diff_and_report_read_both_forms(results, tmp_path):
    compact, full = results
    a, b = load_result(compact), load_result(full)
    d = diff_results(a, b)
    assert not any(c.changed for c in d.categories)
    assert (d.collectives_matched, d.a_only_collectives, d.b_only_collectives) == (36, 0, 0)  # table rows matched
    assert diff_results(b, b).collectives_matched == 416  # two full results still match instance by instance
    for path in (compact, full):
        res = CliRunner().invoke(cli, ["-q", "report", str(path), "-o", str(tmp_path / f"{path.stem}.html")])
        assert res.exit_code == 0, res.output
    res = CliRunner().invoke(cli, ["diff", str(compact), str(full), "--json"])
    assert res.exit_code == 0, res.output
    assert orjson.loads(res.stdout)["collectives_matched"] == 36


def test_malformed_compact_result_is_one_error(results):
    doc = orjson.loads(results[0].read_bytes())
    doc["rank_classes"][1]["ranks"] = [[8, 14]]  # rank 15 missing
    with pytest.raises(ReplayError, match=r"rank_classes do not list ranks 0-15 once each"):
        ReplayResult.from_dict(doc)


def test_sweep_row_is_the_same_from_either_form(results):
    """A sweep reduces a result to its row from the rank figures and the critical path, which both forms hold."""
    from types import SimpleNamespace

    from tracekit.replayer.orchestration.sweep import row_from_result

    case = SimpleNamespace(index=0, params=(), spec=SimpleNamespace(name="dgx-h100"))
    a, b = (row_from_result(case, load_result(p)) for p in results)  # type: ignore[arg-type]
    assert a == b and a.iteration_time_ns == load_result(results[1]).iteration_time_ns
