"""A GGUF given as --model (issue 19 item 1): read with the gguf library; a dense Qwen2 in Q4_K/Q6_K is planned
(the layout SGLang 0.5.15.post1's GGUF loader builds, measured on the GPU host: benchmarks/results/gpu/
gguf-qwen2.json; Q8_0 refused until measured), anything else refused with the reason, exit 21.

The files are real GGUFs written by the gguf library's own writer (tiny tensors; tools/make_random_gguf.py for the
planned ones); the command is the real CLI.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from nvml_scenarios import run_cli
from repo_modules import load_module

from vramkit.errors import Exit

gguf = pytest.importorskip("gguf", reason="the gguf library reads and writes the files (make install puts it in .venv)")
np = pytest.importorskip("numpy")


def _write(path, arch: str, **tensors) -> None:
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name("tiny-coder")
    w.add_block_count(2)
    w.add_context_length(4096)
    for name, array in tensors.items():
        w.add_tensor(name.replace("__", "."), array)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def _plan(model, capsys) -> tuple[int, str]:
    code = run_cli(["plan", "--model", str(model), "--gpu", "rtx-4060-ti-16gb", "--host-ram-gib", "64"])
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return code, err


def test_a_gguf_of_unmeasured_ggml_types_is_refused_with_what_was_read(tmp_path, capsys):
    path = tmp_path / "tiny-coder-F16.gguf"
    _write(path, "qwen2", token_embd__weight=np.zeros((32, 64), np.float16),
           blk__0__attn_q__weight=np.zeros((64, 64), np.float32), blk__1__attn_q__weight=np.zeros((64, 64), np.float32))
    code, err = _plan(path, capsys)
    assert code == Exit.UNSUPPORTED_MODEL == 21
    assert "GGUF of tiny-coder (qwen2, 2 layers, 3 tensors" in err and "2 F32, 1 F16" in err
    assert "SGLang 0.5.15.post1 serves it (--load-format gguf" in err
    assert "its F16, F32 tensors are of ggml types the kit has not measured" in err
    assert "--model owner/name" in err                            # the way to a plan


def test_a_gguf_sglang_loads_but_the_kit_has_not_measured_says_which_it_plans(tmp_path, capsys):
    path = tmp_path / "tiny-llama.gguf"
    _write(path, "llama", token_embd__weight=np.zeros((8, 8), np.float32))
    code, err = _plan(path, capsys)
    assert code == Exit.UNSUPPORTED_MODEL and "SGLang 0.5.15.post1 serves it" in err
    assert "only where it has measured SGLang serving them (qwen2 (Qwen2ForCausalLM)" in err and "not 'llama'" in err


# ---- planned: a dense Qwen2, written by the kit's random-GGUF writer in llama-quantize's layouts ----------------
writer = load_module("tools/make_random_gguf.py", register=True)

TINY = {"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"], "hidden_size": 256, "intermediate_size": 512,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000,
        "max_position_embeddings": 4096, "rope_theta": 1e6, "rms_norm_eps": 1e-6}


def _tiny(tmp_path, layout: str, tie: bool) -> Path:
    folder = tmp_path / "cfg"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(TINY | {"tie_word_embeddings": tie}))
    out = tmp_path / f"tiny-{layout}.gguf"
    writer.write(folder, out, layout=layout)
    return out


def _plan_json(path, capsys, *extra: str) -> dict:
    code = run_cli(["plan", "--json", "--model", str(path), "--gpu-free-gib", "15", "--mem-fraction", "0.8",
                    "--context", "4096", "--max-running", "8", *extra])
    out = capsys.readouterr()
    assert code == 0, out.err
    return json.loads(out.out)


def test_a_q4_k_m_qwen2_gguf_is_planned_in_its_ggml_bytes_with_the_fused_rows_padded(tmp_path, capsys):
    path = _tiny(tmp_path, "Q4_K_M", tie=False)
    plan = _plan_json(path, capsys)
    q4, q6 = 256 // 256 * 144, 256 // 256 * 210                   # bytes per 256-wide row
    # llama-quantize's use_more_bits over 2 layers: layer 1's attn_v and ffn_down are Q6_K
    # GGUFLinearMethod: qkv fused after loading into (q + k + v rows) x the widest shard's row; o_proj as the file
    # has it; a uint8 type per shard; q/k/v biases in float16 (SGLang serves a GGUF in float16)
    qkv = [(256 + 128 + 128) * q4, (256 + 128 + 128) * q6]          # layer 1: q and k padded to Q6_K's row
    attention = sum(qkv) + 2 * (256 * q4) + 2 * (3 + 1) + 2 * (512 * 2)
    mlp = 2 * (1024 * q4) + 256 * (512 // 256 * 144) + 256 * (512 // 256 * 210) + 2 * (2 + 1)
    assert plan["weights_by_component"] == {"embed_tokens": 1000 * q4 + 1, "lm_head": 1000 * q6 + 1,
                                            "attention": attention, "mlp": mlp, "norms": (2 * 2 + 1) * 256 * 2}
    assert plan["weights_bytes"] >= sum(plan["weights_by_component"].values())
    assert plan["kv_bytes_per_token"] == 2 * 2 * 2 * 64 * 2          # layers x K,V x kv heads x head_dim x fp16
    assert plan["fits"] and plan["sglang_args"][:2] == ["--model-path", str(path.resolve())]
    assert any("GGUF tiny-Q4_K_M.gguf" in n and "float16" in n for n in plan["notes"])


def test_a_tied_qwen2_gguf_has_no_head_of_its_own(tmp_path, capsys):
    path = _tiny(tmp_path, "Q4_K_M", tie=True)
    plan = _plan_json(path, capsys)
    assert plan["weights_by_component"]["embed_tokens"] == 1000 * 144 + 1      # the file's rows: no pad to 64
    assert plan["weights_by_component"]["lm_head"] == 0


def test_a_q8_0_gguf_is_refused_until_measured(tmp_path, capsys):
    code, err = _plan(_tiny(tmp_path, "Q8_0", tie=True), capsys)
    assert code == Exit.UNSUPPORTED_MODEL
    assert "its Q8_0 tensors are of ggml types the kit has not measured SGLang loading" in err
    assert "(planned: Q4_K, Q6_K matrices, F32 vectors)" in err


def test_a_gguf_across_gpus_or_offloaded_is_not_planned(tmp_path, capsys):
    path = _tiny(tmp_path, "Q4_K_M", tie=True)
    code = run_cli(["plan", "--json", "--model", str(path), "--gpu-free-gib", "15", "--tp", "2"])
    plan = json.loads(capsys.readouterr().out)
    assert code != 0 and not plan["fits"]
    assert any("not tensor parallel" in r for r in plan["reasons"]), plan["reasons"]


def test_a_gguf_sglang_cannot_load_says_so(tmp_path, capsys):
    path = tmp_path / "rwkv.gguf"
    _write(path, "rwkv6", token_embd__weight=np.zeros((8, 8), np.float32))
    code, err = _plan(path, capsys)
    assert code == Exit.UNSUPPORTED_MODEL and "cannot load it" in err and "'rwkv6'" in err


def test_gguf_is_known_by_its_magic_and_a_broken_one_is_a_bad_file(tmp_path, capsys):
    renamed = tmp_path / "model.bin"
    _write(renamed, "llama", token_embd__weight=np.zeros((8, 8), np.float32))
    code, err = _plan(renamed, capsys)                         # SGLang's check_gguf_file: b"GGUF" at the start
    assert code == Exit.UNSUPPORTED_MODEL and "(llama, 2 layers" in err
    broken = tmp_path / "cut.gguf"
    broken.write_bytes(renamed.read_bytes()[:40])               # a download cut short
    code, err = _plan(broken, capsys)
    assert code == Exit.BAD_FILE and "not a readable GGUF" in err
