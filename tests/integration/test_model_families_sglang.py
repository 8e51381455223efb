"""Every catalogued model's KV pool shape, as SGLang 0.5.15.post1's own ModelConfig and ServerArgs read it.

The planner parses config.json itself (vramkit/hf_config.py); here SGLang parses the same file (in
.venv-sglang, on a CPU, offline) and the pool configurator's cell-size formula
(model_executor/pool_configurator.py) is evaluated on SGLang's values: the planner must agree on the
context length, the served dtype, the attention kind (MLA or not), the hybrid sliding-window split and
Gemma's disabled hybrid pool.
"""
from __future__ import annotations

import pytest

from vramkit import catalog
from vramkit.adapters import sglang_check
from vramkit.adapters.sglang_check import LaunchCase
from vramkit.core.plan.planner import context_and_yarn, kv_layout

pytestmark = pytest.mark.sglang
MLA = 1                      # sglang.srt.configs.model_config.AttentionArch.MLA


@pytest.fixture(scope="module")
def resolved():
    if not sglang_check.checker_python().exists():
        pytest.fail(f"the SGLang checking environment is missing ({sglang_check.checker_python()}): "
                    "run make setup-sglang-check", pytrace=False)
    cases = [LaunchCase(name, ["--model-path", m.hf_id or str(m.config_dir)], m.config_dir)
             for name, m in catalog.models().items()]
    return {r.case_id: r for r in sglang_check.check_launches(cases)}


@pytest.mark.parametrize("name", sorted(catalog.models()))
def test_planner_reads_the_config_as_sglang_does(resolved, name):
    r = resolved[name]
    assert r.ok, r.error
    s = r.resolved
    m = catalog.model(name)
    assert s["context_len"] == context_and_yarn(m, 1)[0]
    assert s["model_dtype"] == f"torch.{m.dtype}"
    assert (s["attention_arch"] == MLA) == (m.mla is not None)
    elem = 2
    layers = s["num_hidden_layers"]
    if m.mla is not None:
        cell = (s["kv_lora_rank"] + s["qk_rope_head_dim"]) * layers * elem
    elif s["is_hybrid_swa"]:
        per_layer = s["num_key_value_heads_per_rank"] * (s["head_dim"] + s["v_head_dim"]) * elem
        cell = per_layer * s["full_layers"] + s["swa_full_tokens_ratio"] * per_layer * s["swa_layers"]
    else:
        cell = s["num_key_value_heads_per_rank"] * (s["head_dim"] + s["v_head_dim"]) * layers * elem
    assert kv_layout(m, "auto").cell == pytest.approx(cell), name
    hybrid_in_planner = m.sliding is not None and m.sliding.hybrid_pool
    assert s["is_hybrid_swa"] == hybrid_in_planner
    if m.sliding is not None and not m.sliding.hybrid_pool:
        assert s["disable_hybrid_swa_memory"], "SGLang should log 'Disable hybrid SWA memory' for " + name
