"""``tracekit plan`` (issue 29): enumeration rules, memory pruning, bounds that never exceed a replay, the
Megatron-LM rows' published layouts found, the command line, JSON, and the page in headless Chromium.

The paper rows here run with the knobs the 2021 paper fixed (full recomputation, no sequence parallelism, no
distributed optimizer, micro-batch 1) so the module stays well under a minute; the free searches of every row
(and 39.1B, 1T, Korthikanti's 175B and 530B) are in benchmarks/bench_plan.py.
"""

from __future__ import annotations

import itertools
import re
import json

import pytest

from cli_inprocess import run
from megatron_rows import published_layout
from tracekit.errors import ConfigError
from tracekit.replayer.orchestration.planning.enumerate import KnobSpace, Layout, enumerate_layouts
from tracekit.replayer.orchestration.planning.search import PlanRequest, _memory, plan_layouts
from tracekit.replayer.simulation.specs import load_spec
from tracekit.workloads.config import LLMConfig, preset
from tracekit.workloads.memory import job_memory

PAPER_2021 = KnobSpace(recompute=("full",), sp=(False,), zero=(0,), micro_batch=(1,), vp=(1,))


def _plan(name: str, space: KnobSpace, keep: int = 3, bound_all: bool = False):
    from tracekit.cli.plan import llm_generator, resolve_model

    model_name, gpus, layout = published_layout(name)
    base, command_model = resolve_model(model_name, None, None, None)
    request = PlanRequest(base, command_model, gpus, load_spec("dgx-a100"), "dgx-a100", space, keep=keep, gap=0.0)
    return plan_layouts(request, llm_generator(), executor="process", workers=2, bound_all=bound_all), layout


@pytest.fixture(scope="module")
def plan_17b():
    return _plan("1.7B", PAPER_2021)


def test_megatron_1_7b_on_32_gpus_the_published_layout_ranks_first(plan_17b):
    result, published = plan_17b
    # Narayanan et al. 2021 Table 1: 1.7B on 32 A100 at tp 1, pp 1 (dp 32), batch 512
    assert result.best.layout == published == Layout(1, 1, 32, recompute="full")
    counts = result.counts()
    # tp 1, 2, 4 with pp 1, 2, 4, 8 and tp 8 with pp 1, 2, 4 (pp divides 32 / tp and the 24 layers)
    assert counts["enumerated"] == 15 and counts["memory"] == counts["dominated"] == 0
    assert counts["simulated"] >= 3 and counts["simulated"] + counts["bound"] == 15
    figures = result.figures(result.best)
    # the paper's 137 TFLOP/s counts recomputation (the 96 B s L h^2 formula); ours is model FLOPs (72 ...)
    assert 3.3 < figures["step_s"] < 3.7 and figures["tokens_per_s"] == pytest.approx(512 * 2048 / figures["step_s"])


def test_bounds_never_exceed_a_replayed_step_and_prune_only_slower_layouts(plan_17b):
    result, _ = plan_17b
    kth = sorted(c.simulated.step_ns for c in result.ranked)[2]
    for c in result.ranked:
        assert c.bound.step_ns <= c.simulated.step_ns, c.layout.label
        assert c.bound.step_ns >= 0.9 * c.simulated.step_ns, c.layout.label  # tight enough to prune
    for c in result.with_status("bound"):
        assert c.bound.step_ns >= kth and "3rd best simulated" in c.reason


def test_megatron_18_4b_on_256_gpus_a_layout_predicted_faster_than_the_published_one_is_found(tmp_path):
    from tracekit.cli.plan import llm_generator
    from tracekit.replayer.orchestration.planning.simulate import simulate_layout

    # Table 1: 18.4B on 256 A100 at tp 8, pp 1 (dp 32), batch 1024.  Here tp 2 with pp 2 is predicted faster:
    # at tp 8 every layer's tensor-parallel all-reduces (not overlapped in Megatron-LM 2021) cost more than the
    # pipeline bubble of pp 2 and the larger data-parallel reduction of tp 2; tp 2 pp 1 does not fit 80 GB.
    space = KnobSpace(tp=(2, 8), pp=(1, 2), recompute=("full",), sp=(False,), zero=(0,), micro_batch=(1,), vp=(1,))
    result, published = _plan("18.4B", space, keep=1, bound_all=True)
    assert published == Layout(8, 1, 32, recompute="full")
    assert result.best.layout == Layout(2, 2, 64, recompute="full")
    assert [c.layout.tp for c in result.with_status("memory")] == [2]
    own = next((c.simulated for c in result.ranked if c.layout == published), None)
    if own is None:  # pruned by its bound: replay it on its own anyway
        own = simulate_layout((llm_generator().write, published.config(result.request.base), result.request.spec))
    assert result.best.simulated.step_ns < own.step_ns
    for c in result.ranked:
        assert c.bound.step_ns <= c.simulated.step_ns, c.layout.label
    _page_draws_every_layout(result, tmp_path)


def _page_draws_every_layout(result, folder) -> None:
    """The page in Chromium: one point per layout (the memory-pruned one at its bound) plus the chosen star."""
    from browser import rendered, require_chromium

    from tracekit.replayer.orchestration.planning.page import plotted
    from tracekit.replayer.orchestration.planning.report import write_plan

    require_chromium()
    path = write_plan(result, folder)["html"]
    page = rendered(path)
    assert len(plotted(result)) == len(result.candidates) == 4
    assert page.plots["plot0"].points == 4 + 1
    # the greyed series and the pruned layout's reason (its hover text) are in the drawn figure
    source = path.read_text()
    assert (
        "pruned: does not fit (1)" in source
        and "tp2 pp1 dp128 mb1 vp1 full nosp zero0 bf16\\u003cbr\\u003eneeds at least" in source
    )


def test_the_memory_of_the_first_and_last_stage_is_the_jobs_peak():
    model = preset("gpt3-175b")[0]
    base = LLMConfig(model, global_batch_size=1536)
    layouts = [
        Layout(8, 16, 8),
        Layout(4, 8, 32, micro_batch=2, vp=3, recompute="selective", sp=True, zero=1),
        Layout(8, 12, 8, micro_batch=1, vp=2, recompute="full", zero=3),
        Layout(2, 32, 16, vp=3, recompute="selective", sp=True, zero=2),
    ]
    for layout in layouts:
        stages = job_memory(layout.config(base))
        worst = max(stages, key=lambda s: s.device_bytes)
        assert _memory(layout.config(base), 1 << 50)[:2] == (worst.device_bytes, worst.stage), layout.label


def test_enumeration_keeps_exactly_the_layouts_the_divisibility_rules_allow():
    model = preset("gpt3-1.3b")[0]  # 24 layers, 32 heads, FFN 8192
    base = LLMConfig(model, global_batch_size=16)
    space = KnobSpace(recompute=("none",), zero=(0,), sp=(False,))
    found = enumerate_layouts(base, 8, 8, space)
    expected = set()
    for tp, pp, mb, vp in itertools.product((1, 2, 4, 8), (1, 2, 4, 8), (1, 2, 4, 8), range(1, 9)):
        if 8 % (tp * pp):
            continue
        dp = 8 // (tp * pp)
        m = 16 // (dp * mb) if 16 % (dp * mb) == 0 else 0
        # interleaving takes any number of micro-batches (Llama 3's flexible interleaving, as generate llm)
        if m and 24 % (pp * vp) == 0 and (vp == 1 or pp > 1):
            expected.add(Layout(tp, pp, dp, micro_batch=mb, vp=vp))
    # 89 when vp > 1 needed the micro-batches a multiple of pp; 19 more with m mod pp != 0 (m = 2 on pp 4 ...)
    assert set(found.layouts) == expected and len(found.layouts) == len(expected) == 108
    assert Layout(2, 2, 2, micro_batch=2, vp=2) in expected and Layout(1, 8, 1, vp=3) in expected
    assert Layout(1, 8, 1, micro_batch=4, vp=3) in expected  # 4 micro-batches on 8 stages
    assert found.rejected["global batch 16 is not divisible by dp 8 x micro-batch 4"] == 1


def test_a_gpu_count_no_layout_divides_and_a_model_that_fits_nowhere_are_one_line_each():
    from tracekit.cli.plan import llm_generator

    spec = load_spec("dgx-h100")
    base = LLMConfig(preset("gpt3-175b")[0], global_batch_size=1536)
    with pytest.raises(ConfigError) as exc:
        plan_layouts(PlanRequest(base, "gpt3-175b", 7, spec, "dgx-h100"), llm_generator())
    assert str(exc.value).startswith("no layout of gpt3-175b with global batch 1536 divides 7 GPUs")
    with pytest.raises(ConfigError) as exc:
        plan_layouts(PlanRequest(base, "gpt3-175b", 8, spec, "dgx-h100"), llm_generator())
    text = str(exc.value)
    # 175B on one node: even tp 8 with ZeRO-3 and full recomputation needs the whole model's weights per node
    assert text.startswith("gpt3-175b fits in none of the") and "GiB per rank" in text and "largest:" in text
    res = run("plan", "--model", "gpt3-175b", "--gpus", "8", "--hw", "dgx-h100", "--recompute", "some")
    assert (
        res.returncode == 2  # a bad option value is a usage error
        and res.stderr.strip()
        == "tracekit: error: --recompute 'some': choose from none, selective, full (see 'tracekit plan --help')"
    )


def test_the_chosen_command_line_regenerates_the_layout_the_plan_timed(tmp_path):
    out = tmp_path / "plan"
    args = ["plan", "--model", "megatron-1.7B", "--gpus", "32", "--hw", "dgx-a100", "--tp", "1", "--pp", "1"]
    res = run(
        *args,
        "--recompute",
        "full",
        "--no-sp",
        "--zero",
        "0,1",
        "--micro-batch",
        "1",
        "--json",
        "-o",
        out,
        "--executor",
        "serial",
    )
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc == json.loads((out / "plan.json").read_text()) and (out / "plan.html").exists()
    # ZeRO-1 adds the parameter all-gather after the optimizer: its bound is within the 5 % gap of ZeRO-0's time
    assert doc["counts"] == {"enumerated": 2, "simulated": 1, "bound": 1, "memory": 0, "dominated": 0}
    assert doc["best"]["zero"] == 1 and doc["candidates"][1]["reason"].startswith("bound ")
    command = doc["generate_command"].split()
    assert command[:3] == ["tracekit", "generate", "llm"] and "--classes" in command
    prefix = tmp_path / "best"
    command[command.index("-o") + 1] = str(prefix)
    assert run(*command[1:]).returncode == 0
    replayed = json.loads(run("replay", prefix, "--hw", "dgx-a100", "--json").stdout)
    assert replayed["iteration_time_ns"] == round(doc["best"]["step_s"] * 1e9)


def test_the_plan_page_draws_every_layout_in_chromium(plan_17b, tmp_path):
    from browser import rendered, require_chromium

    from tracekit.replayer.orchestration.planning.page import plotted
    from tracekit.replayer.orchestration.planning.report import write_plan

    require_chromium()
    result, _ = plan_17b
    paths = write_plan(result, tmp_path)
    page = rendered(paths["html"])
    assert page.body_attrs.get("data-plots-rendered") == "1"
    # every layout tried is a point (15 here: simulated and pruned by bound), plus the chosen layout's star
    assert len(plotted(result)) == len(result.candidates) == 15
    assert page.plots["plot0"].points == 15 + 1
    for i, c in enumerate(result.ranked):
        value, text = page.values[f"plan.{i}.step_s"]
        assert float(value) == c.simulated.step_ns / 1e9 and text == f"{c.simulated.step_ns / 1e9:.3f}"
    assert "pruned: bound" in page.text and result.best.layout.label in page.text


def test_two_specs_are_compared_and_ranked_by_cost_when_each_has_a_price(tmp_path):
    from tracekit.replayer.simulation.specs import preset_path

    specs = {}
    for name, price in (("dgx-a100", 1.5), ("dgx-h100", 4.0)):
        specs[name] = tmp_path / f"{name}.toml"
        specs[name].write_text(f"price_per_gpu_hour_usd = {price}\n" + preset_path(name).read_text())
    args = ["plan", "--model", "megatron-1.7B", "--gpus", "32", "--hw", specs["dgx-a100"], "--hw", specs["dgx-h100"]]
    args += ["--tp", "1", "--pp", "1", "--recompute", "full", "--no-sp", "--zero", "0", "--micro-batch", "1"]
    res = run(*args, "--executor", "serial", "-o", tmp_path / "cmp")
    assert res.returncode == 0, res.stderr
    docs = {n: json.loads((tmp_path / "cmp" / n / "plan.json").read_text())["best"] for n in specs}
    a100, h100 = docs["dgx-a100"], docs["dgx-h100"]
    for doc, price in ((a100, 1.5), (h100, 4.0)):
        assert doc["usd_per_step"] == pytest.approx(doc["step_s"] * 32 * price / 3600, rel=1e-12)
    assert h100["step_s"] < a100["step_s"]  # the same layout runs faster on H100 ...
    lines = [line for line in res.stdout.splitlines() if ": tp1 pp1 dp32" in line]
    cheaper_first = sorted((a100, h100), key=lambda d: d["usd_per_step"])
    assert [line.split(".toml:")[0].rsplit("/", 1)[-1] for line in lines] == [
        "dgx-a100" if d is a100 else "dgx-h100" for d in cheaper_first
    ]
    assert res.stdout.rstrip().endswith("ranked by cost")
    specs["dgx-a100"].write_text("price_per_gpu_hour_usd = -1\n" + preset_path("dgx-a100").read_text())
    bad = run(*args)
    assert bad.returncode == 1
    assert bad.stderr.strip() == (
        f"tracekit: error: {specs['dgx-a100']}: key price_per_gpu_hour_usd: must be a positive number of USD, got -1"
    )


def test_the_memory_cap_is_a_share_of_the_device_memory_and_bad_fractions_are_refused():
    from tracekit.cli.plan import llm_generator, resolve_model

    base, name = resolve_model("megatron-1.7B", None, None, None)
    space = KnobSpace(tp=(1,), pp=(1,), recompute=("full",), sp=(False,), zero=(0,), micro_batch=(1,), vp=(1,))
    # tp1 pp1 dp32 with full recomputation: model states 26.9 GiB (16 bytes per parameter, 1.65 B parameters,
    # margin, runtime), peak 28.1 GiB; 34 % of the A100's 80 GiB is 27.2 GiB (states fit, the walk does not),
    # 30 % is 24.0 GiB (the states alone do not: refused without walking the schedule)
    for fraction, text in (
        (0.34, "needs 28.1 GiB on stage 0 > 27.2 GiB (largest: optimizer 18.5)"),
        (0.30, "needs at least 26.9 GiB on stage 0 > 24.0 GiB (largest: model states 26.9)"),
    ):
        request = PlanRequest(base, name, 32, load_spec("dgx-a100"), "dgx-a100", space, max_memory_fraction=fraction)
        with pytest.raises(ConfigError) as exc:
            plan_layouts(request, llm_generator())
        cap = text.split("> ")[1].split(" GiB")[0]
        assert str(exc.value) == (
            f"megatron-1.7B fits in none of the 1 layouts of 32 GPUs on a100-80gb ({cap} GiB per rank): the smallest "
            f"peak, tp1 pp1 dp32 mb1 vp1 full nosp zero0 bf16, {text}"
        )
    for key, value, text in (("max_memory_fraction", 1.5, "--max-memory-fraction must be in (0, 1], got 1.5"),
                             ("gap", 1.0, "--gap must be in [0, 1), got 1.0")):  # fmt: skip
        with pytest.raises(ConfigError, match=re.escape(text)):
            plan_layouts(
                PlanRequest(base, name, 32, load_spec("dgx-a100"), "dgx-a100", **{key: value}), llm_generator()
            )


def _failing_write(config, spec, prefix) -> None:
    raise ConfigError("no space left for the class set")


def test_a_failing_simulation_names_its_layout():
    from tracekit.cli.plan import llm_generator, resolve_model
    from tracekit.replayer.orchestration.planning.search import Generator

    base, name = resolve_model("megatron-1.7B", None, None, None)
    space = KnobSpace(tp=(1,), pp=(1,), recompute=("full",), sp=(False,), zero=(0,), micro_batch=(1,), vp=(1,))
    request = PlanRequest(base, name, 32, load_spec("dgx-a100"), "dgx-a100", space)
    with pytest.raises(ConfigError) as exc:
        plan_layouts(request, Generator(llm_generator().blocks, _failing_write), executor="serial")
    assert str(exc.value) == (
        "plan: simulating tp1 pp1 dp32 mb1 vp1 full nosp zero0 bf16 failed: no space left for the class set"
    )


@pytest.mark.parametrize(
    ("global_batch", "layout", "share"),
    [
        # m = 3 < pp 8: each chunk change waits pp - m passes; the bound is one micro-batch's chain through the
        # 8 stages (0.62 of the replay with the ideal (p - 1) / v bubble alone)
        (12, Layout(1, 8, 4, vp=3, recompute="full"), 0.8),
        (4, Layout(1, 8, 4, vp=3, recompute="full"), 0.9),  # m = 1: the replay is that chain (+ hops, launches)
        (48, Layout(1, 4, 8, vp=2, recompute="full"), 0.95),  # m = 6, not a multiple of pp 4: groups of N = 6
    ],
)
def test_the_bound_of_a_flexibly_interleaved_layout_stays_below_its_replay(global_batch, layout, share):
    from tracekit.cli.plan import llm_generator, resolve_model
    from tracekit.replayer.orchestration.planning.bounds import BoundModel
    from tracekit.replayer.orchestration.planning.simulate import simulate_layout

    base, _ = resolve_model("megatron-1.7B", global_batch, None, None)
    spec, generator = load_spec("dgx-a100"), llm_generator()
    assert layout in enumerate_layouts(base, 32, 8, KnobSpace(tp=(1,), recompute=("full",), sp=(False,))).layouts
    bound = BoundModel(base, spec, generator.blocks).bound(layout)
    replayed = simulate_layout((generator.write, layout.config(base), spec))
    # the replay's bubble for m < p is ((p - 1) + (v - 1)(p - m)) (t_f + t_b) / v (closed form in
    # tests/converters/test_flexible_interleaving.py), at least the one-micro-batch chain p (t_f + t_b)
    assert share * replayed.step_ns < bound.step_ns <= replayed.step_ns
