"""Serving settings (issue 21): declared once per family in config/models.toml, rendered into every launch, chosen
for a folder model by its architecture only where one family claims it, and never guessed."""
from __future__ import annotations

import json
import shutil

import pytest

from vramkit import catalog
from vramkit.core.plan.knobs import SGLANG_FLAGS, Serving
from vramkit.core.plan.request import PlanRequest
from vramkit.core.render.sglang import sglang_args
from vramkit.errors import Exit, VramkitError
from vramkit.launch.resolve import plan_args, plan_json, resolve


def _flag(argv: list[str], flag: str) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv else None


def _args(preset: str, model: str | None = None) -> list[str]:
    return plan_args(resolve(PlanRequest(preset=preset, model=model, gpu="rtx-4080-16gb", host_ram_gib=64)))


def test_optimized_preset_renders_the_qwen_parser_and_a_short_name():
    argv = _args("optimized")
    # "qwen", not the "qwen25": SGLang 0.5.15.post1 renames qwen25 to qwen with a deprecation warning
    # (server_args.py _handle_deprecated_args); both name the same Qwen25Detector
    assert _flag(argv, "--tool-call-parser") == "qwen"
    assert _flag(argv, "--served-model-name") == "qwen2.5-coder-14b"
    assert "--reasoning-parser" not in argv          # Qwen2.5-Coder does not think


def test_moe_preset_renders_qwen3_coder():
    argv = _args("moe")
    assert _flag(argv, "--tool-call-parser") == "qwen3_coder"
    assert _flag(argv, "--served-model-name") == "qwen3-coder-30b-fp8"


def test_a_thinking_model_gets_its_reasoning_parser():
    argv = _args("baseline", "qwen3-8b")
    assert (_flag(argv, "--tool-call-parser"), _flag(argv, "--reasoning-parser")) == ("qwen", "qwen3")


def test_a_model_without_a_documented_format_gets_only_its_name():
    argv = _args("baseline", "gemma-2-9b-it")
    assert _flag(argv, "--served-model-name") == "gemma-2-9b"
    assert "--tool-call-parser" not in argv and "--reasoning-parser" not in argv


def test_the_plan_says_which_settings_it_chose_and_why():
    d = plan_json(resolve(PlanRequest(preset="optimized", gpu="rtx-4080-16gb", host_ram_gib=64)))
    assert d["serving"]["family"] == "qwen2.5"
    assert "server_args.py" in d["serving"]["source"] and "deprecat" in d["serving"]["source"]


def _folder(tmp_path, catalogued: str, name: str, **over) -> str:
    cfg = json.loads((catalog.models()[catalogued].config_dir / "config.json").read_text()) | over
    d = tmp_path / name
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    return str(d)


def test_a_folder_of_a_known_family_gets_its_settings_from_the_architecture(tmp_path):
    m = catalog.model(_folder(tmp_path, "qwen2.5-coder-7b-instruct", "my-qwen"))
    assert m.serving.tool_call_parser == "qwen" and m.serving.family == "qwen2.5"
    assert m.serving.served_model_name == "my-qwen"
    assert "Qwen2ForCausalLM" in m.serving.source


def test_a_catalogued_config_folder_gets_the_catalogued_settings():
    m = catalog.model(str(catalog.models()["qwen2.5-coder-14b-instruct-gptq-int4"].config_dir))
    assert m.serving.served_model_name == "qwen2.5-coder-14b" and m.serving.tool_call_parser == "qwen"


@pytest.mark.parametrize("catalogued, arch", [
    ("qwen3-coder-30b-a3b-instruct", "Qwen3MoeForCausalLM"),     # Qwen3-Coder (XML) or Qwen3-30B-A3B (JSON)
    ("llama-3.1-8b-instruct", "LlamaForCausalLM"),               # Llama 3.1, Llama 2, CodeLlama, fine-tunes
    ("mistral-7b-instruct-v0.3", "MistralForCausalLM"),          # v0.3 has tool calls, v0.1/v0.2 do not
])
def test_the_plan_refuses_to_guess_a_parser_for_a_family_it_does_not_know(tmp_path, catalogued, arch):
    folder = _folder(tmp_path, catalogued, "unknown-finetune")
    r = resolve(PlanRequest(model=folder, gpu="h100-80gb", host_ram_gib=64, knobs=(("context", 4096),)))
    argv = plan_args(r)
    assert "--tool-call-parser" not in argv and "--reasoning-parser" not in argv
    assert _flag(argv, "--served-model-name") == "unknown-finetune"
    assert r.plan.serving.family is None
    assert arch in r.plan.serving.source and "does not guess" in r.plan.serving.source


def test_serving_renders_its_flags_from_the_one_spelling():
    s = Serving(served_model_name="m", tool_call_parser="qwen", reasoning_parser="qwen3", chat_template="t.jinja")
    assert s.args() == [SGLANG_FLAGS["served_model_name"], "m", SGLANG_FLAGS["tool_call_parser"], "qwen",
                        SGLANG_FLAGS["reasoning_parser"], "qwen3", SGLANG_FLAGS["chat_template"], "t.jinja"]


def test_every_compose_file_carries_the_serving_flags():
    root = catalog.CONFIG_DIR.parent
    for name, parser in (("qwen-optimized", "qwen"), ("qwen", "qwen"), ("qwen-moe", "qwen3_coder")):
        text = (root / f"docker-compose.{name}.yml").read_text()
        assert '"--tool-call-parser"\n      - "' + parser + '"' in text, name
        assert '"--served-model-name"' in text


@pytest.fixture
def config_copy(tmp_path, monkeypatch):
    d = tmp_path / "config"
    shutil.copytree(catalog.CONFIG_DIR, d)
    monkeypatch.setattr(catalog, "CONFIG_DIR", d)
    catalog.models.cache_clear()
    catalog.serving_families.cache_clear()
    yield d
    catalog.models.cache_clear()
    catalog.serving_families.cache_clear()


@pytest.mark.parametrize("old, new, says", [
    ('serving = "qwen2.5"\nserved_name = "qwen2.5-coder-14b"', 'serving = "qwen9"\nserved_name = "qwen2.5-coder-14b"',
     "qwen9"),
    ('served_name = "qwen2.5-coder-14b"', 'served_name = "a:b"', "colon"),
    ('architectures = ["Qwen3ForCausalLM"]', 'architectures = ["Qwen2ForCausalLM"]', "claimed by"),
    ('tool_call_parser = "qwen3_coder"', 'tool_call_parser = "qwen3_coder"\nparser = "x"', "parser"),
])
def test_a_bad_serving_declaration_is_one_line(config_copy, old, new, says):
    path = config_copy / "models.toml"
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    with pytest.raises(VramkitError) as e:
        catalog.models()
    assert e.value.code == Exit.BAD_FILE and says in e.value.what


def test_every_declared_flag_renders_through_sglang_args():
    m = catalog.models()["qwen3-8b"]
    p = resolve(PlanRequest(model="qwen3-8b", gpu="h100-80gb", host_ram_gib=64)).plan
    argv = sglang_args(m, p, model_path=m.hf_id, port=1)
    assert argv[argv.index("--served-model-name") + 1] == "qwen3-8b"
