"""Issue 20 item 7: `vramkit plan` on a malformed config.json says one line and exits 65 (BAD_FILE), never a
traceback, and a negative or zero size never plans as FITS (exit 0)."""
from __future__ import annotations

import json

import pytest

from vramkit.cli import main
from vramkit.errors import Exit

BASE = {"architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "num_attention_heads": 32,
        "num_hidden_layers": 32, "num_key_value_heads": 8, "vocab_size": 128256, "intermediate_size": 14336,
        "torch_dtype": "bfloat16", "max_position_embeddings": 8192}

MALFORMED = {
    "architectures a string": {"architectures": "LlamaForCausalLM"},
    "architectures of objects": {"architectures": [{"a": 1}]},
    "hidden_size negative": {"hidden_size": -4096},
    "hidden_size true": {"hidden_size": True},
    "no attention heads": {"num_attention_heads": 0},
    "layers negative": {"num_hidden_layers": -3},
    "no kv heads": {"num_key_value_heads": 0},
    "head_dim negative": {"head_dim": -128},
    "intermediate negative": {"intermediate_size": -5},
    "context negative": {"max_position_embeddings": -1},
    "quantization_config a list": {"quantization_config": [1]},
    "quantization_config a string": {"quantization_config": "gptq"},
    "rope_scaling a string": {"rope_scaling": "yes"},
    "rope_parameters a list": {"rope_theta": None, "rope_parameters": [1]},
    "text_config a list": {"text_config": [1]},
    "experts negative": {"architectures": ["MixtralForCausalLM"], "num_local_experts": -8,
                         "num_experts_per_tok": 2},
    "moe field missing": {"architectures": ["MixtralForCausalLM"], "num_local_experts": 8},
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_a_malformed_config_is_one_line_and_exit_65(case, tmp_path, capsys):
    (tmp_path / "config.json").write_text(json.dumps(BASE | MALFORMED[case]))
    code = main(["plan", "--model", str(tmp_path), "--gpu", "rtx-4090-24gb"])
    err = capsys.readouterr().err
    assert code == Exit.BAD_FILE, (code, err)
    assert err.startswith("vramkit: ") and err.count("\n") == 1 and "Traceback" not in err


def test_the_well_formed_base_still_plans(tmp_path, capsys):
    (tmp_path / "config.json").write_text(json.dumps(BASE))
    assert main(["plan", "--model", str(tmp_path), "--gpu", "rtx-4090-24gb", "--json"]) in (0, 10)
