"""The benchmark proxy's dummy weights (issue 18): the pinned SGLang's `--load-format dummy` fill, as pinned and with
the kit's adapter seeding each parameter by its name (VRAMKIT_DUMMY_SEED_BY_NAME), run by SGLang's own code in the
shared checker (.venv-sglang)."""
from __future__ import annotations

from pathlib import Path

from vramkit.adapters import sglang_check

ADAPTER = Path(__file__).resolve().parents[2] / "services" / "sglang-kt" / "kt_compat" / "vramkit_kt_compat.py"
# Qwen3-MoE's per-layer router and norm names (model/layers.N/...), one shape for all: as in the model, where every
# layer's gate is [128, 2048] and both norms [2048]
NAMES = ("model.layers.0.mlp.gate.weight", "model.layers.1.mlp.gate.weight", "model.layers.47.mlp.gate.weight",
         "model.layers.0.input_layernorm.weight")


def test_pinned_dummy_weights_repeat_across_layers_and_the_adapter_seeds_them_apart():
    d = sglang_check.dummy_weights(ADAPTER, NAMES, (16, 32))
    # as pinned: one seed for every parameter, so every same-shaped parameter holds the same values
    assert all(fp == d["pinned"][0] for fp in d["pinned"])
    # seeded by name: each its own values, the same again on a second fill, inside SGLang's range
    sums = [fp[0] for fp in d["by_name"]]
    assert len(set(sums)) == len(NAMES) and d["by_name"] != d["pinned"]
    assert d["by_name_again"] == d["by_name"]
    assert -1e-3 <= d["low"] < 0 < d["high"] <= 1e-3
