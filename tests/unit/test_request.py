"""The one request (core/plan/request.py): frozen, typed, and the same whoever builds it (issue 17 item 1)."""
from __future__ import annotations

import argparse
import dataclasses

import pytest

from vramkit.commands.plan import add_plan_arguments, request_from_args
from vramkit.core.plan.request import PlanRequest, request_from_text
from vramkit.errors import Exit, VramkitError


def _cli(*argv: str) -> PlanRequest:
    p = argparse.ArgumentParser()
    add_plan_arguments(p)
    return request_from_args(p.parse_args(list(argv)))


def test_the_cli_and_a_form_build_the_same_typed_request(monkeypatch):
    monkeypatch.delenv("VRAMKIT_KT_WEIGHT_PATH", raising=False)
    cli = _cli("--preset", "optimized", "--gpu", "rtx-4090-24gb", "--gpu-free-gib", "14.5", "--gpu-pcie", "4x16",
               "--context", "8192", "--kv-dtype", "fp8_e5m2")
    form = request_from_text({"preset": "optimized", "gpu": "rtx-4090-24gb", "gpu_free_gib": "14.5",
                              "gpu_pcie": "4x16", "context": "8192", "kv_dtype": "fp8_e5m2", "model": ""})
    assert cli == form
    assert cli.gpu_free_gib == 14.5 and cli.gpu_pcie == (4, 16) and dict(cli.knobs) == {"context": 8192,
                                                                                         "kv_dtype": "fp8_e5m2"}


def test_the_request_cannot_change_after_it_is_built():
    r = request_from_text({"context": "4096"})
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.gpu = "auto"  # type: ignore[misc]
    with pytest.raises(TypeError):
        r.knobs["context"] = 1  # type: ignore[index]


@pytest.mark.parametrize("values, says", [
    ({"gpu_free_gib": "lots"}, "--gpu-free-gib 'lots' is not a number"),
    ({"gpu_pcie": "4"}, "--gpu-pcie '4' is not a PCIe link"),
    ({"host_read_gbs": "20000"}, "--host-read-gbs"),
    ({"context": "8kb"}, "--context '8kb' is not a whole number"),
    ({"colour": "red"}, "unknown plan field 'colour'"),
])
def test_a_bad_value_is_one_line_and_exit_64(values, says):
    with pytest.raises(VramkitError) as e:
        request_from_text(values)
    assert e.value.code == Exit.BAD_INPUT and says in e.value.what


@pytest.mark.parametrize("model", ["qwen2.5-coder-14b-instruct-gptq-int4", "qwen3-coder-30b-a3b-instruct-fp8"])
def test_a_plans_knobs_hold_values_not_auto(model):
    """Issue 17 item 3: `vramkit plan --json` showed kt_num_gpu_experts "auto"; the plan's knobs are resolved."""
    from vramkit.catalog import model as catalogued
    from vramkit.launch.resolve import resolve
    r = resolve(request_from_text({"model": model, "gpu": "rtx-4090-24gb", "host_ram_gib": "64",
                                   "cpu_offload_gib": "auto"}))
    knobs = dataclasses.asdict(r.plan.knobs)
    # kv_dtype "auto" is SGLang's own value (the model's dtype), rendered as --kv-cache-dtype auto
    assert [k for k, v in knobs.items() if v == "auto"] in ([], ["kv_dtype"])
    # None there is "no hybrid mode" and "no GPTQ/AWQ experts, so no MoE kernel to pick"
    assert [k for k, v in knobs.items() if v is None] == ["moe_kernel", "kt_method"]
    spec = catalogued(model)
    assert knobs["kt_num_gpu_experts"] == (spec.moe.num_experts if spec.moe else 0) and knobs["kt_cpuinfer"] == 0
