"""Auto-fit at start (issue 19 item 2): `vramkit up` plans for the memory NVML says is free now; on a desktop
whose compositor, browser and another program hold 2.5 GiB, the optimized preset's 32K no longer fits, and up steps
down in the declared order (core/plan/autofit.py), says what changed and what it costs, and builds that;
--no-auto-fit refuses instead. (At 1 GiB held the preset fits as it ships: its token embeddings go to host RAM.)
NVML is faked at its boundary (tests/unit/nvml_scenarios.py); the planner is the real one."""
from __future__ import annotations

import re

import pytest

from tests.unit import nvml_scenarios as sc
from vramkit import catalog
from vramkit.cli import main
from vramkit.core.plan.autofit import STEP_ORDER, gpu_fits, step_down
from vramkit.core.plan.knobs import Knobs
from vramkit.core.plan.planner import Target
from vramkit.core.plan.request import PlanRequest
from vramkit.launch import steps, up
from vramkit.units import GiB

ENGINE = catalog.engine()
OPTIMIZED = catalog.preset("optimized")
M14 = catalog.model(OPTIMIZED.model)


@pytest.fixture
def desktop(monkeypatch, tmp_path):
    for k in [k for k in __import__("os").environ if k.startswith("VRAMKIT_")]:
        monkeypatch.delenv(k)
    monkeypatch.setenv("VRAMKIT_STATE_DIR", str(tmp_path))
    fake = sc.desktop_16gb_1gib_used()
    fake.gpus[0].used = int(2.5 * GiB)                   # and another program's 1.5 GiB
    return fake.install(monkeypatch)


def test_at_1_gib_held_the_preset_fits_as_it_ships_and_steps_down_with_its_embeddings_on_the_gpu(monkeypatch,
                                                                                               tmp_path):
    """The compositor and a browser's 1 GiB: the preset's moved embeddings (1.45 GiB) leave its 32K as asked; with
    them on the GPU (--kt-embed-host off) the context steps down, as it did before the move was the default."""
    monkeypatch.setenv("VRAMKIT_STATE_DIR", str(tmp_path))
    sc.desktop_16gb_1gib_used().install(monkeypatch)
    prep = up.prepare(PlanRequest(preset="optimized"), spec())
    assert prep.autofit is None and prep.autofit_refused is None and prep.resolved.plan.host_embed_bytes
    assert prep.resolved.plan.knobs.context == 32768 and gpu_fits(prep.resolved.plan)
    prep = up.prepare(PlanRequest(preset="optimized", knobs={"kt_embed_host": "off"}), spec())
    assert prep.autofit is not None and [s.knob for s in prep.autofit.steps] == ["context"]


def spec() -> steps.LaunchSpec:
    return steps.LaunchSpec(name="vramkit-optimized", runtime="native", sglang_python="/nonexistent/python",
                            dry_run=True)


def test_the_order_is_declared_and_each_step_is_re_planned():
    assert STEP_ORDER == ("kv_dtype", "context", "kt_num_gpu_experts", "mem_fraction")
    card = catalog.gpu("rtx-4080-16gb")
    # fp16 KV at 8K with 2 GiB held: fp8 KV first, then the context
    fit = step_down(M14, Target(gpu=card, other_used_bytes=2 * GiB), Knobs(**catalog.preset("baseline").knobs), ENGINE)
    assert fit is not None and [s.knob for s in fit.steps] == ["kv_dtype", "context"]
    assert gpu_fits(fit.plan) and not gpu_fits(fit.asked)
    assert fit.plan.knobs.kv_dtype == "fp8_e5m2" and fit.plan.knobs.context < 8192
    # nothing to do when it fits; nothing found when even the shortest context cannot fit
    assert step_down(M14, Target(gpu=card), Knobs(**OPTIMIZED.knobs), ENGINE) is None
    assert step_down(M14, Target(gpu=card, other_used_bytes=8 * GiB), Knobs(**OPTIMIZED.knobs), ENGINE) is None


def test_a_fixed_gpu_expert_count_steps_down_for_a_moe():
    from vramkit.launch.hybrid import REFERENCE_HOST
    moe = catalog.preset("moe")
    target = Target(gpu=catalog.gpu("rtx-4080-16gb"), other_used_bytes=1 * GiB, host=REFERENCE_HOST,
                    host_ram_available_bytes=64 * GiB)
    fit = step_down(catalog.model(moe.model), target, Knobs(**(moe.knobs | {"kt_num_gpu_experts": 60})), ENGINE)
    assert fit is not None and [s.knob for s in fit.steps] == ["kt_num_gpu_experts"]
    assert fit.plan.knobs.kt_num_gpu_experts < 60 and "tok/s" in fit.steps[0].cost


def test_up_on_a_desktop_with_2_5_gib_used_starts_a_stepped_down_optimized_preset(desktop, capsys):
    prep = up.prepare(PlanRequest(preset="optimized"), spec())
    assert prep.autofit is not None and prep.autofit_refused is None
    assert [s.knob for s in prep.autofit.steps] == ["context"]
    ctx = prep.autofit.plan.knobs.context
    assert 16384 < ctx < 32768
    assert prep.resolved.plan.knobs.context == ctx and gpu_fits(prep.resolved.plan)
    assert next(c for c in prep.checks if c.name == "fit").ok           # what starts fits
    argv = prep.native
    assert argv[argv.index("--context-length") + 1] == str(ctx)
    assert argv[argv.index("--kv-cache-dtype") + 1] == "fp8_e5m2"

    code = main(["up", "--preset", "optimized", "--runtime", "native", "--dry-run"])
    out = capsys.readouterr().out
    assert code == 0
    assert "auto-fit" in out and "does not fit the" in out
    assert re.search(rf"--context 32,768 -> {ctx:,}: requests of more than {ctx:,} tokens", out)
    assert "longest prompt < 32,768 asked" in out and "NVML" in out
    # SGLang refuses a prompt of max_req_input_len tokens and serves one token less (measured on the GPU host with
    # this preset stepped down: benchmarks/results/gpu/agents-gptq.json): "< N" and "N or more" name that N
    assert f"asked -> < {prep.autofit.plan.max_request_tokens:,};" in out
    asked = prep.autofit.asked
    assert any(f"refuses prompts of {asked.max_request_tokens:,} tokens or more" in r for r in asked.reasons)
    assert f"--context-length {ctx}" in out


def test_no_auto_fit_refuses_instead(desktop, capsys):
    prep = up.prepare(PlanRequest(preset="optimized"), spec(), auto_fit=False)
    assert prep.autofit is None and "--no-auto-fit" in (prep.autofit_refused or "")
    assert "fit" in [c.name for c in prep.failed()]
    code = main(["up", "--preset", "optimized", "--runtime", "native", "--dry-run", "--no-auto-fit"])
    out = capsys.readouterr().out
    assert code == 0 and "auto-fit" not in out and "would stop at" in out and "fit" in out


def test_when_nothing_fits_the_refusal_says_auto_fit_tried(monkeypatch, tmp_path):
    monkeypatch.setenv("VRAMKIT_STATE_DIR", str(tmp_path))
    fake = sc.desktop_16gb_1gib_used()
    fake.gpus[0].used = 9 * GiB                          # 9 GiB held: the 14B's weights leave no KV room
    fake.install(monkeypatch)
    prep = up.prepare(PlanRequest(preset="optimized"), spec())
    assert prep.autofit is None and "nothing in the order" in (prep.autofit_refused or "")
    prep.checks = [c for c in prep.checks if c.name == "fit"]
    with pytest.raises(Exception) as e:
        up.refuse_failed(prep)
    assert "auto-fit: nothing in the order kv_dtype, context" in str(e.value.line()) and e.value.code == 10


def test_a_fraction_that_leaves_no_room_for_activations_steps_down_to_the_measured_ceiling():
    """The context cannot help when the activations lack room: the fraction steps down, to at most 0.90 (the
    highest measured to start on the emulated 16 GB card)."""
    k = Knobs(**(OPTIMIZED.knobs | {"mem_fraction": 0.95, "hicache_gb": 0}))
    fit = step_down(M14, Target(gpu=catalog.gpu("rtx-4080-16gb")), k, ENGINE)
    assert fit is not None and [s.knob for s in fit.steps] == ["mem_fraction"]
    assert fit.plan.knobs.mem_fraction == 0.9 and fit.plan.knobs.context == 32768
    assert "left free after start-up for activations" in fit.steps[0].cost
