"""config/ as the one source of truth: what it holds, and how it refuses bad input."""
from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest

from vramkit import catalog
from vramkit.core.plan.planner import Knobs
from vramkit.errors import Exit, VramkitError

CACHED = (catalog.models, catalog.gpus, catalog.presets, catalog.versions, catalog.engine_constants,
          catalog.serving_families)


def _clear_caches():
    for f in CACHED:
        f.cache_clear()


@pytest.fixture
def config_dir(tmp_path, monkeypatch):
    """A private copy of config/ that the catalog reads instead of the real one."""
    d = tmp_path / "config"
    shutil.copytree(catalog.CONFIG_DIR, d)
    monkeypatch.setattr(catalog, "CONFIG_DIR", d)
    _clear_caches()
    yield d
    _clear_caches()       # the next test reads the real config/ again


def _append_to_entry(path: Path, header: str, line: str) -> None:
    text = path.read_text()
    assert header in text, header
    path.write_text(text.replace(header, f"{header}\n{line}", 1))


# ----------------------------------------------------------------------------------------------
# unknown keys are refused (a typo must not silently become a default)
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("file,header,reader", [
    ("presets.toml", "[presets.optimized]", catalog.presets),
    ("gpus.toml", '[gpus."rtx-5060-ti-16gb"]', catalog.gpus),
    ("models.toml", '[models."qwen2.5-coder-14b-instruct-gptq-int4"]', catalog.models),
])
def test_unknown_key_is_refused(config_dir, file, header, reader):
    _append_to_entry(config_dir / file, header, 'mem_fration = 0.9')
    with pytest.raises(VramkitError) as e:
        reader()
    assert "mem_fration" in e.value.what
    assert e.value.code == Exit.BAD_FILE


def test_the_copy_itself_loads(config_dir):
    # control for the tests above: the untouched copy is accepted
    assert catalog.presets() and catalog.gpus() and catalog.models()


def test_invalid_toml_is_a_bad_file(config_dir):
    (config_dir / "gpus.toml").write_text("[gpus.x\nlabel = ")
    with pytest.raises(VramkitError) as e:
        catalog.gpus()
    assert e.value.code == Exit.BAD_FILE and "gpus.toml" in e.value.what


def test_missing_toml_is_a_bad_file(config_dir):
    (config_dir / "presets.toml").unlink()
    with pytest.raises(VramkitError) as e:
        catalog.presets()
    assert e.value.code == Exit.BAD_FILE


# ----------------------------------------------------------------------------------------------
# unknown names: BAD_INPUT naming the nearest ones (issue 19: not every name)
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("lookup, typo, nearest", [
    (catalog.model, "qwen2.5-coder-7b-instruct-gptq", "qwen2.5-coder-7b-instruct"),
    (catalog.gpu, "rtx-5060ti-16gb", "rtx-5060-ti-16gb"), (catalog.preset, "optimised", "optimized")])
def test_unknown_name_suggests_the_nearest(lookup, typo, nearest):
    with pytest.raises(VramkitError) as e:
        lookup(typo)
    assert e.value.code == Exit.BAD_INPUT
    assert typo in e.value.what
    assert e.value.todo.startswith("did you mean " + nearest)
    assert "vramkit plan --list" in e.value.todo


# ----------------------------------------------------------------------------------------------
# a model folder given by path
# ----------------------------------------------------------------------------------------------
def test_model_from_a_folder(tmp_path):
    src = catalog.models()["qwen2.5-0.5b-instruct"].config_dir / "config.json"
    (tmp_path / "config.json").write_bytes(src.read_bytes())
    m = catalog.model(str(tmp_path))
    assert (m.num_layers, m.num_kv_heads, m.hidden_size) == (24, 2, 896)
    assert catalog.model(str(tmp_path / "config.json")).num_layers == 24


@pytest.mark.parametrize("content", ["{not json", '{"hidden_size": 896}', '["a list"]', ""])
def test_invalid_config_json_is_a_bad_file(tmp_path, content):
    (tmp_path / "config.json").write_text(content)
    with pytest.raises(VramkitError) as e:
        catalog.read_model_config(tmp_path)
    assert e.value.code == Exit.BAD_FILE
    assert "config.json" in e.value.what


def test_folder_without_config_json_is_a_bad_file(tmp_path):
    with pytest.raises(VramkitError) as e:
        catalog.read_model_config(tmp_path)
    assert e.value.code == Exit.BAD_FILE


def test_unreadable_config_json_is_a_bad_file(tmp_path):
    (tmp_path / "config.json").mkdir()        # exists, cannot be read as a file (works as root too)
    with pytest.raises(VramkitError) as e:
        catalog.read_model_config(tmp_path)
    assert e.value.code == Exit.BAD_FILE


# ----------------------------------------------------------------------------------------------
# the catalogued models match their Hugging Face config.json (public numbers)
# (layers, heads, kv heads, hidden, intermediate, vocab, native context, tied embeddings, dtype, quant)
# ----------------------------------------------------------------------------------------------
HF_FACTS = {
    # https://huggingface.co/Qwen/Qwen2.5-Coder-14B-Instruct-GPTQ-Int4/blob/main/config.json
    "qwen2.5-coder-14b-instruct-gptq-int4": (48, 40, 8, 5120, 13824, 152064, 32768, False, "float16", ("gptq", 4, 128)),
    # https://huggingface.co/Qwen/Qwen2.5-Coder-7B-Instruct/blob/main/config.json
    "qwen2.5-coder-7b-instruct": (28, 28, 4, 3584, 18944, 152064, 32768, False, "bfloat16", None),
    # https://huggingface.co/Qwen/Qwen2.5-Coder-7B-Instruct-GPTQ-Int4/blob/main/config.json
    "qwen2.5-coder-7b-instruct-gptq-int4": (28, 28, 4, 3584, 18944, 152064, 32768, False, "float16", ("gptq", 4, 128)),
    # https://huggingface.co/Qwen/Qwen2.5-Coder-32B-Instruct-GPTQ-Int4/blob/main/config.json
    "qwen2.5-coder-32b-instruct-gptq-int4": (64, 40, 8, 5120, 27648, 152064, 32768, False, "float16", ("gptq", 4, 128)),
    # https://huggingface.co/meta-llama/Llama-3.1-8B-Instruct/blob/main/config.json (llama3 rope, factor 8)
    "llama-3.1-8b-instruct": (32, 32, 8, 4096, 14336, 128256, 131072, False, "bfloat16", None),
    # https://huggingface.co/mistralai/Mistral-7B-Instruct-v0.3/blob/main/config.json
    "mistral-7b-instruct-v0.3": (32, 32, 8, 4096, 14336, 32768, 32768, False, "bfloat16", None),
    # https://huggingface.co/Qwen/Qwen2.5-14B-Instruct/blob/main/config.json
    "qwen2.5-14b-instruct": (48, 40, 8, 5120, 13824, 152064, 32768, False, "bfloat16", None),
    # https://huggingface.co/Qwen/Qwen2.5-0.5B-Instruct/blob/main/config.json
    "qwen2.5-0.5b-instruct": (24, 14, 2, 896, 4864, 151936, 32768, True, "bfloat16", None),
    # issue 9's families; an 11th value is an explicit head_dim. dtype is what SGLang serves: Qwen3-8B's
    # re-saved config says float32 (served float16), gpt-oss's says none (mxfp4 forces bfloat16)
    # https://huggingface.co/Qwen/Qwen3-Coder-30B-A3B-Instruct/blob/main/config.json
    "qwen3-coder-30b-a3b-instruct": (48, 32, 4, 2048, 5472, 151936, 262144, False, "bfloat16", None, 128),
    # https://huggingface.co/Qwen/Qwen3-30B-A3B-GPTQ-Int4/blob/main/config.json
    "qwen3-30b-a3b-gptq-int4": (48, 32, 4, 2048, 6144, 151936, 40960, False, "float16", ("gptq", 4, 128), 128),
    # https://huggingface.co/Qwen/Qwen1.5-MoE-A2.7B-Chat-GPTQ-Int4/blob/main/config.json
    "qwen1.5-moe-a2.7b-chat-gptq-int4": (24, 16, 16, 2048, 5632, 151936, 32768, False, "float16", ("gptq", 4, 128)),
    # https://huggingface.co/deepseek-ai/DeepSeek-V2-Lite-Chat/blob/main/config.json
    "deepseek-v2-lite-chat": (27, 16, 16, 2048, 10944, 102400, 163840, False, "bfloat16", None),
    # https://huggingface.co/openai/gpt-oss-20b/blob/main/config.json
    "gpt-oss-20b": (24, 64, 8, 2880, 2880, 201088, 131072, False, "bfloat16", ("mxfp4", 4, 32), 64),
    # https://huggingface.co/google/gemma-2-9b-it/blob/main/config.json
    "gemma-2-9b-it": (42, 16, 8, 3584, 14336, 256000, 8192, True, "bfloat16", None, 256),
    # https://huggingface.co/google/gemma-3-1b-it/blob/main/config.json (tied: Gemma3TextConfig's default)
    "gemma-3-1b-it": (26, 4, 1, 1152, 6912, 262144, 32768, True, "bfloat16", None, 256),
    # https://huggingface.co/Qwen/Qwen3-8B/blob/main/config.json
    "qwen3-8b": (36, 32, 8, 4096, 12288, 151936, 40960, False, "float16", None, 128),
    # https://huggingface.co/Qwen/Qwen3-Coder-30B-A3B-Instruct-FP8/blob/main/config.json (block FP8 128x128;
    # issue 12's moe preset)
    "qwen3-coder-30b-a3b-instruct-fp8": (48, 32, 4, 2048, 5472, 151936, 262144, False, "bfloat16", ("fp8", 8, 0), 128),
}


def test_every_catalogued_model_has_checked_facts():
    assert set(catalog.models()) == set(HF_FACTS)


@pytest.mark.parametrize("name", sorted(HF_FACTS))
def test_model_matches_hugging_face(name):
    m = catalog.models()[name]
    layers, heads, kv, hidden, inter, vocab, ctx, tied, dtype, quant, *head_dim = HF_FACTS[name]
    assert (m.num_layers, m.num_heads, m.num_kv_heads, m.hidden_size, m.intermediate_size, m.vocab_size) == \
        (layers, heads, kv, hidden, inter, vocab)
    assert (m.max_position_embeddings, m.tie_word_embeddings, m.dtype) == (ctx, tied, dtype)
    assert m.head_dim == (head_dim[0] if head_dim else hidden // heads)   # explicit where the config gives one
    got_q = (m.quantization.method, m.quantization.bits, m.quantization.group_size) if m.quantization else None
    assert got_q == quant
    assert (m.config_dir / "config.json").is_file()
    assert m.hf_id.count("/") == 1


def test_qwen_rope_theta_and_llama_rope_scaling():
    assert catalog.models()["qwen2.5-coder-14b-instruct-gptq-int4"].rope_theta == 1_000_000.0
    llama = catalog.models()["llama-3.1-8b-instruct"]
    assert llama.rope_theta == 500_000.0 and llama.rope_scaling["rope_type"] == "llama3"


def test_the_issue_models_are_there():
    # issue 2 item 2: the 14B GPTQ first, the Coder 7B, a 4-bit Coder 32B, Llama 3.1 8B, two more shapes
    names = set(catalog.models())
    assert {"qwen2.5-coder-14b-instruct-gptq-int4", "qwen2.5-coder-7b-instruct", "llama-3.1-8b-instruct"} <= names
    assert any("32b" in n and catalog.models()[n].quantization and catalog.models()[n].quantization.bits == 4
               for n in names)
    assert len(names) >= 6


# ----------------------------------------------------------------------------------------------
# GPUs and presets
# ----------------------------------------------------------------------------------------------
def test_the_issue_gpus_are_there():
    g = catalog.gpus()
    assert {"rtx-5060-ti-16gb", "rtx-4080-16gb", "rtx-4090-24gb", "rtx-3090-24gb", "rtx-5090-32gb",
            "h100-80gb"} <= set(g)
    t = g["rtx-5060-ti-16gb"]
    assert (t.pcie_gen, t.pcie_lanes) == (5, 8)                     # issue 2: "the 5060 Ti is PCIe 5.0 x8"
    assert g["h100-80gb"].memory_total_bytes == 81559 << 20         # read on the test host (nvidia-smi)
    assert g["h200-141gb"].memory_total_bytes == 143771 << 20       # the test host since 2026-11-28 (nvidia-smi)
    for gpu in g.values():
        assert gpu.bandwidth_bytes_s > gpu.pcie_bytes_s > 0
        assert 7 << 30 < gpu.memory_total_bytes < 150 << 30


def test_every_common_card_is_there_with_its_spec_page():
    # issue 19 item 3: the RTX 30/40/50 series from 8 to 32 GB and the common workstation cards
    g = catalog.gpus()
    assert len(g) >= 24
    assert {"rtx-4060-ti-16gb", "rtx-4070-ti-super-16gb", "rtx-5070-ti-16gb", "rtx-5080-16gb", "rtx-3060-12gb",
            "rtx-4060-8gb", "rtx-a4000-16gb", "rtx-a6000-48gb", "rtx-4000-ada-20gb", "rtx-6000-ada-48gb",
            "l4-24gb"} <= set(g)
    for gpu in g.values():
        assert gpu.source.startswith("https://"), gpu.name
        assert gpu.sm_count and gpu.compute_capability in {(8, 6), (8, 9), (9, 0), (12, 0)}, gpu.name
    assert (g["rtx-4060-ti-16gb"].pcie_gen, g["rtx-4060-ti-16gb"].pcie_lanes) == (4, 8)   # wired x8


@pytest.mark.parametrize("key, value", [("source", '"nvidia.com"'), ("memory_basis", '"guessed"')])
def test_a_card_without_its_source_or_with_an_unknown_basis_is_refused(config_dir, key, value):
    text = (config_dir / "gpus.toml").read_text()
    head, rest = text.split('[gpus."rtx-4080-16gb"]', 1)
    entry, tail = rest.split("\n\n", 1)
    entry = "\n".join(line if not line.startswith(key + " =") else f"{key} = {value}" for line in entry.split("\n"))
    (config_dir / "gpus.toml").write_text(head + '[gpus."rtx-4080-16gb"]' + entry + "\n\n" + tail)
    with pytest.raises(VramkitError) as e:
        catalog.gpus()
    assert e.value.code == Exit.BAD_FILE and "rtx-4080-16gb" in e.value.what


@pytest.mark.parametrize("typed", ["RTX-4090-24GB", "Rtx-4090-24gb", "rtx-4090-24gb"])
def test_gpu_names_match_case_insensitively(typed):
    assert catalog.gpu(typed).name == "rtx-4090-24gb"


def test_an_unknown_name_is_answered_with_the_nearest_names_not_the_whole_list():
    with pytest.raises(VramkitError) as e:
        catalog.gpu("rtx-4060ti-16gb")
    assert e.value.code == Exit.BAD_INPUT
    assert "did you mean rtx-4060-ti-16gb" in e.value.todo
    assert "h100-80gb" not in e.value.todo and "rtx-a6000-48gb" not in e.value.todo
    with pytest.raises(VramkitError) as e:
        catalog.gpu("geforce")                 # nothing near: where the list is, not 38 names
    assert "vramkit plan --list" in e.value.todo and "rtx" not in e.value.todo


def test_gpu_by_nvml_name():
    assert catalog.gpu_by_nvml_name("NVIDIA H100 80GB HBM3").name == "h100-80gb"
    assert catalog.gpu_by_nvml_name("NVIDIA Nonexistent") is None


def test_presets_are_the_issue_three_and_every_key_is_a_planner_knob():
    p = catalog.presets()
    assert {"baseline", "optimized", "128k"} <= set(p)
    knob_fields = {f.name for f in dataclasses.fields(Knobs)}
    assert catalog.PRESET_KEYS - {"description", "model"} <= knob_fields
    for preset in p.values():
        Knobs(**preset.knobs)                                       # would raise on a key the planner lacks
        assert preset.model in catalog.models(), preset.name
    assert p["128k"].knobs["context"] == 131_072


def test_versions_pin_one_release():
    v = catalog.versions()
    assert v.sglang_pip == "0.5.15.post1"
    assert v.sglang_image.split(":")[1].startswith("v" + v.sglang_pip)


@pytest.mark.parametrize("name, extra, says", [
    ("engine.toml", "cuda_context_mb = 686\n", "unknown key"),
    ("engine.toml", None, "pre_kv_mib is missing"),
    ("versions.toml", "torch_pip = \"2.11.0\"\n", "unknown key"),
    ("sglang.toml", "host_port = 8000\n", "unknown key"),
])
def test_engine_and_versions_refuse_unknown_and_missing_keys(tmp_path, monkeypatch, name, extra, says):
    cfg = tmp_path / "config"
    shutil.copytree(catalog.CONFIG_DIR, cfg)
    text = (cfg / name).read_text()
    (cfg / name).write_text(text + extra if extra else text.replace("pre_kv_mib = 17\n", ""))
    monkeypatch.setattr(catalog, "CONFIG_DIR", cfg)
    for f in (catalog.engine_constants, catalog.versions, catalog.sglang):
        f.cache_clear()
    try:
        with pytest.raises(VramkitError) as e:
            {"engine.toml": catalog.engine_constants, "versions.toml": catalog.versions,
             "sglang.toml": catalog.sglang}[name]()
        assert e.value.code == Exit.BAD_FILE and name in e.value.what and says in e.value.what
    finally:
        for f in (catalog.engine_constants, catalog.versions, catalog.sglang):
            f.cache_clear()


def test_torch_pin_is_config_versions_everywhere():
    """config/versions.toml torch_cpu is the pin; scripts/install_cpu_torch.sh reads it for mk/core.mk and
    scripts/setup_sglang_check.sh, the embed image (built without config/ in its context) repeats it, and must agree."""
    root = catalog.CONFIG_DIR.parent
    pin = catalog.versions().torch_cpu
    assert f'"torch=={pin}"' in (root / "services/embed/Dockerfile").read_text()
    assert 'v["torch_cpu"]' in (root / "scripts/install_cpu_torch.sh").read_text()
    assert "scripts/install_cpu_torch.sh $(VENV)" in (root / "mk/core.mk").read_text()
    assert 'scripts/install_cpu_torch.sh "$venv"' in (root / "scripts/setup_sglang_check.sh").read_text()


def test_sglang_facts_are_read_once():
    s = catalog.sglang()
    assert s.port == 30000                                        # SGLang's default --port
    assert s.gpu_host_extra_args[:2] == ("--attention-backend", "triton")


@pytest.mark.parametrize("name, key", [("models.toml", "models"), ("gpus.toml", "gpus"), ("presets.toml", "presets")])
def test_catalog_files_refuse_unknown_top_level_tables(tmp_path, monkeypatch, name, key):
    cfg = tmp_path / "config"
    shutil.copytree(catalog.CONFIG_DIR, cfg)
    (cfg / name).write_text((cfg / name).read_text() + "\n[extras.x]\nvalue = 1\n")
    monkeypatch.setattr(catalog, "CONFIG_DIR", cfg)
    loader = {"models": catalog.models, "gpus": catalog.gpus, "presets": catalog.presets}[key]
    loader.cache_clear()
    try:
        with pytest.raises(VramkitError) as e:
            loader()
        assert e.value.code == Exit.BAD_FILE and name in e.value.what and "extras" in e.value.what
    finally:
        loader.cache_clear()
