"""The renderer: a plan -> SGLang 0.5.15.post1 arguments and a compose service.

Expected flag spellings come from SGLang's own parser source (srt/server_args.py) and the measured runs in
the shared GPU README; the compose expectations from issue 2 item 4. The real parser and the real Compose
binary check the same output in tests/integration (test_sglang_parser.py, test_render_compose.py).
"""
from __future__ import annotations

import json
import re
from itertools import product

import pytest
from launch_cases_once import all_launch_cases  # tests/: iter_launch_cases(), built once per run

from vramkit import catalog
from vramkit.core.plan.planner import Knobs, Target, plan
from vramkit.core.render import sglang as render
from vramkit.launch.cases import case_gpus
from vramkit.units import GiB

yaml = pytest.importorskip("yaml", reason="PyYAML parses the compose files (it comes with the embed extra)")

GPTQ14 = "qwen2.5-coder-14b-instruct-gptq-int4"
PORT = catalog.sglang().port
ENGINE = catalog.engine()
PRESETS = sorted(catalog.presets())
MODELS = sorted(catalog.models())
GPUS = sorted(g.name for g in case_gpus())


def _plan(model="qwen2.5-coder-14b-instruct-gptq-int4", gpu="rtx-5060-ti-16gb", **knobs):
    return plan(catalog.model(model), Target(gpu=catalog.gpu(gpu), host_ram_available_bytes=128 * GiB),
                Knobs(**knobs), ENGINE, with_alternatives=False)


def _argv(model=GPTQ14, gpu="rtx-5060-ti-16gb", load_format=None, **knobs) -> list[str]:
    m = catalog.model(model)
    return render.sglang_args(m, _plan(model, gpu, **knobs), model_path=m.hf_id, load_format=load_format, port=PORT)


def _flags(argv: list[str]) -> dict[str, str | bool]:
    """--flag value pairs and bare --switches; a flag given twice is an error (SGLang keeps the last silently)."""
    out: dict[str, str | bool] = {}
    i = 0
    while i < len(argv):
        flag = argv[i]
        assert flag.startswith("--"), f"stray value {flag!r} in {argv}"
        assert flag not in out, f"{flag} given twice"
        if i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            out[flag], i = argv[i + 1], i + 2
        else:
            out[flag], i = True, i + 1
    return out


def _sglang_derived_context(config: dict) -> int:
    """SGLang's get_context_length (srt/utils/hf_transformers/common.py:380), on a config dict."""
    rope = config.get("rope_scaling")
    factor = 1
    if rope:
        factor = rope.get("factor", 1)
        if "original_max_position_embeddings" in rope or rope.get("rope_type") == "llama3":
            factor = 1
    for key in ("max_sequence_length", "seq_length", "max_seq_len", "model_max_length", "max_position_embeddings"):
        if config.get(key) is not None:
            return int(factor * config[key])
    return 2048


def _config_with_override(model_name: str, flags: dict) -> dict:
    cfg = json.loads((catalog.model(model_name).config_dir / "config.json").read_text())
    if "--json-model-override-args" in flags:
        cfg.update(json.loads(flags["--json-model-override-args"]))     # ModelConfig applies it with dict.update
    return cfg


# ----------------------------------------------------------------------------------------------
# every preset x model x GPU x tp: nothing left to SGLang's probing of the card it runs on
# ----------------------------------------------------------------------------------------------
ALL_CASES = list(product(PRESETS, MODELS, GPUS, (1, 2)))


@pytest.fixture(scope="module")
def rendered_cases():
    out = []
    for preset_name, model_name, gpu_name, tp in ALL_CASES:
        preset = catalog.preset(preset_name)
        # without the hybrid MoE split (it needs a CPU side; launch/cases.py renders it per card)
        dense = {k: v for k, v in preset.knobs.items() if not k.startswith("kt_")}
        p = _plan(model_name, gpu_name, **(dense | {"tp": tp}))
        m = catalog.model(model_name)
        argv = render.sglang_args(m, p, model_path=m.hf_id, port=PORT)
        out.append(((preset_name, model_name, gpu_name, tp), p, argv))
    return out


def test_every_case_passes_the_memory_knobs_explicitly(rendered_cases):
    for case, p, argv in rendered_cases:
        f = _flags(argv)
        assert float(f["--mem-fraction-static"]) == pytest.approx(p.knobs.mem_fraction), case
        assert int(f["--chunked-prefill-size"]) == p.knobs.chunked_prefill, case
        assert int(f["--context-length"]) == p.context_len, case
        assert f["--kv-cache-dtype"] == p.knobs.kv_dtype, case
        assert f["--model-path"] == catalog.model(case[1]).hf_id, case
        # decode graphs: either a resolved batch size or explicitly off, never SGLang's per-card default
        assert ("--cuda-graph-max-bs-decode" in f) != (f.get("--cuda-graph-backend-decode") == "disabled"), case
        assert f.get("--tp-size", "1") == str(case[3]), case


# flags the seed documents used that SGLang 0.5.15.post1 does not have, or deprecated spellings
# (shared GPU README: "--cuda-graph-max-bs is deprecated: --cuda-graph-max-bs-decode")
NOT_SGLANG = {"--kv-offload", "--enable-paging", "--cuda-graph-max-bs", "--disable-cuda-graph", "--rope-scaling"}


def test_no_case_renders_a_flag_sglang_lacks(rendered_cases):
    for case, _, argv in rendered_cases:
        assert not NOT_SGLANG & set(argv), case


def test_no_case_asks_for_more_context_than_sglang_derives(rendered_cases):
    # model_config.py:680: context_length > derived -> refused ("... is greater than the derived context_length")
    for case, _, argv in rendered_cases:
        f = _flags(argv)
        derived = _sglang_derived_context(_config_with_override(case[1], f))
        assert int(f["--context-length"]) <= derived, case


def test_the_case_cards_cover_every_compute_capability_on_each_side_of_20_gib():
    # a card is left out of the matrix only where one alike in compute capability and SGLang's 20 GiB line renders
    key = lambda g: (g.memory_total_bytes >= 20 * GiB, g.compute_capability)  # noqa: E731
    covered = {key(g) for g in case_gpus()}
    assert covered == {key(g) for g in catalog.gpus().values()}
    assert len(case_gpus()) == len(covered) < len(catalog.gpus())
    assert {"rtx-5060-ti-16gb", "rtx-4080-16gb", "h100-80gb"} <= set(GPUS)     # the first user's card, the host's


def test_the_parser_test_sees_every_case():
    # tests/integration/test_sglang_parser.py feeds launch.cases.iter_launch_cases() to SGLang's parser: it
    # must cover every preset x model x GPU at tp 1 and 2, or a rendered launch escapes the real-parser check
    ids = {c.case_id for c in all_launch_cases()}
    expected = {f"{p}-{m}-{g}-tp{t}" for p, m, g, t in ALL_CASES}
    # plus each preset as the GPU hosts launched it (dummy weights and their extra flags; tp 2: the dense 7B)
    expected |= {f"{p}-gpu-host-dummy" for p in catalog.presets()}
    expected |= {f"{p}-gpu-host-dummy-tp2-qwen2.5-coder-7b-instruct" for p in catalog.presets()}
    # plus the hybrid MoE presets with every --kt-* flag resolved: each card, and as the H100 host ran them
    kt = [p for p in catalog.presets().values() if p.knobs.get("kt_method")]
    # (a card that holds every expert of the preset's 29 GiB FP8 checkpoint beside its pool, the 80 GB one, gets it
    # planned without the hybrid mode: no --kt-* flag)
    expected |= {f"{p.name}-{'all-gpu' if catalog.gpu(g).memory_total_bytes > 40 * GiB else 'hybrid'}-{g}"
                 for p in kt for g in GPUS}
    expected |= {f"{p.name}-gpu-host-{m}" for p in kt for m in ("FP8", "AMXINT4", "AMXINT8", "LLAMAFILE_Q8_0")}
    # and the GPTQ-Int4 checkpoint split per layer, which renders --quantization moe_wna16 beside the --kt-* flags
    expected |= {f"{p.name}-gpu-host-AMXINT8-gptq" for p in kt}
    # and its own int4 values repacked for the CPU (RAWINT4), whole layers on marlin: no --quantization flag
    expected |= {f"{p.name}-gpu-host-RAWINT4-gptq" for p in kt}
    # and the preset with a placement file (`vramkit kt-placement`: SGLang's --init-expert-location)
    expected |= {f"{p.name}-gpu-host-AMXINT8-placement" for p in kt}
    assert kt and ids == expected
    gptq = next(c for c in all_launch_cases() if c.case_id.endswith("-gpu-host-AMXINT8-gptq"))
    assert gptq.argv[gptq.argv.index("--quantization") + 1] == "moe_wna16" and "--kt-method" in gptq.argv
    raw4 = next(c for c in all_launch_cases() if c.case_id.endswith("-gpu-host-RAWINT4-gptq"))
    assert raw4.argv[raw4.argv.index("--kt-method") + 1] == "RAWINT4" and "--quantization" not in raw4.argv


# ----------------------------------------------------------------------------------------------
# single knobs
# ----------------------------------------------------------------------------------------------
def test_graphs_off_renders_the_decode_backend_disabled():
    argv = _argv(cuda_graph_max_bs=0, mem_fraction=0.8)
    i = argv.index("--cuda-graph-backend-decode")
    assert argv[i + 1] == "disabled"                 # server_args.py:1410, choices full|breakable|tc_piecewise|disabled
    assert "--disable-cuda-graph" not in argv        # the legacy global switch
    assert "--cuda-graph-max-bs-decode" not in argv


def test_graphs_on_renders_the_batch_size():
    f = _flags(_argv(cuda_graph_max_bs=8, mem_fraction=0.8))
    assert f["--cuda-graph-max-bs-decode"] == "8"
    assert "--cuda-graph-backend-decode" not in f


def test_hierarchical_cache_flags():
    f = _flags(_argv(kv_dtype="fp8_e5m2", mem_fraction=0.8, hicache_gb=16))
    assert f["--enable-hierarchical-cache"] is True
    assert f["--hicache-size"] == "16"               # server_args.py:1996: int, gigabytes
    off = _flags(_argv(kv_dtype="fp8_e5m2", mem_fraction=0.8))
    assert not {"--enable-hierarchical-cache", "--hicache-size", "--hicache-ratio"} & set(off)


@pytest.mark.parametrize("offload", [3, "auto"])
def test_weight_offload_is_a_whole_number_of_gb(offload):
    # server_args.py:2209 cpu_offload_gb: int
    f = _flags(_argv(gpu="rtx-4090-24gb", **(catalog.preset("128k").knobs | {"cpu_offload_gib": offload})))
    assert re.fullmatch(r"[1-9][0-9]*", f["--cpu-offload-gb"]), f["--cpu-offload-gb"]
    if offload == 3:
        assert f["--cpu-offload-gb"] == "3"


def test_no_offload_renders_no_offload_flag():
    assert "--cpu-offload-gb" not in _argv(mem_fraction=0.8, cpu_offload_gib=0)


def test_dummy_load_format_skips_the_tokenizer():
    f = _flags(_argv(load_format="dummy", mem_fraction=0.8))
    assert f["--load-format"] == "dummy"
    assert f["--skip-tokenizer-init"] is True        # shared README: no tokenizer offline with dummy weights
    real = _flags(_argv(mem_fraction=0.8))
    assert "--skip-tokenizer-init" not in real and "--load-format" not in real


def test_tp2_renders_tp_size():
    assert _flags(_argv(mem_fraction=0.8, tp=2))["--tp-size"] == "2"


# ----------------------------------------------------------------------------------------------
# YaRN in the form SGLang 0.5.15.post1 accepts (shared GPU README, measured): rope dict with rope_theta,
# plus max_position_embeddings; never original_max_position_embeddings with --context-length alone
# ----------------------------------------------------------------------------------------------
def test_yarn_131072_on_a_32768_qwen():
    f = _flags(_argv(context=131_072, kv_dtype="fp8_e5m2", mem_fraction=0.8))
    assert f["--context-length"] == "131072"
    override = json.loads(f["--json-model-override-args"])
    assert override == {
        "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768,
                         "rope_theta": 1_000_000.0},          # the model config.json's rope_theta
        "max_position_embeddings": 131_072,
    }
    assert _sglang_derived_context(_config_with_override(GPTQ14, f)) == 131_072


def test_the_refused_yarn_form_would_be_caught():
    # the seed's form: derived context stays 32768 (factor dropped), so --context-length 131072 is refused
    refused = {"--json-model-override-args": json.dumps({"rope_scaling": {
        "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}), "--context-length": "131072"}
    assert _sglang_derived_context(_config_with_override(GPTQ14, refused)) == 32_768 < 131_072


def test_native_context_renders_no_override():
    assert "--json-model-override-args" not in _argv(context=32_768, mem_fraction=0.8)
    assert "--json-model-override-args" not in _argv(model="llama-3.1-8b-instruct", context=131_072, mem_fraction=0.8)


# ----------------------------------------------------------------------------------------------
# compose
# ----------------------------------------------------------------------------------------------
def _compose_files() -> dict:
    from vramkit.launch import compose_files as launch
    return {p.name: text for p, text in launch.compose_files().items()}


def _compose(tp=1, **knobs) -> str:
    m = catalog.model(GPTQ14)
    p = _plan(GPTQ14, "rtx-5060-ti-16gb", **(knobs | {"tp": tp}))
    argv = render.sglang_args(m, p, model_path=m.hf_id, host="0.0.0.0", port=PORT)
    return render.compose_yaml(project="vramkit-test", preset="custom", model=m, gpu_name="rtx-5060-ti-16gb", p=p,
                               image=catalog.versions().sglang_image, argv=argv, gpu_ids=list(range(tp)),
                               source_note="test", port=PORT)


def _all_compose_texts() -> dict[str, str]:
    return _compose_files() | {"tp2": _compose(tp=2, mem_fraction=0.8, kv_dtype="fp8_e5m2"),
                               "offload": _compose(mem_fraction=0.8, cpu_offload_gib=2)}


COMPOSE_TEXTS = _all_compose_texts()


def test_compose_files_cover_the_three_presets():
    assert {"docker-compose.qwen.yml", "docker-compose.qwen-optimized.yml",
            "docker-compose.qwen-128k.yml"} <= set(COMPOSE_TEXTS)


def _duration_s(s: str) -> int:
    return sum(int(n) * {"h": 3600, "m": 60, "s": 1}[u] for n, u in re.findall(r"(\d+)([hms])", s))


@pytest.mark.parametrize("name", sorted(COMPOSE_TEXTS))
def test_compose_service(name):
    text = COMPOSE_TEXTS[name]
    svc = yaml.safe_load(text)["services"]["sglang"]
    cmd = svc["command"]
    assert cmd[:3] == ["python3", "-m", "sglang.launch_server"]
    f = _flags(cmd[3:])
    tp = int(f.get("--tp-size", "1"))

    devices = svc["deploy"]["resources"]["reservations"]["devices"]
    assert len(devices) == 1 and devices[0]["driver"] == "nvidia" and "gpu" in devices[0]["capabilities"]
    assert len(devices[0]["device_ids"]) == tp
    assert svc["ipc"] == "host"
    assert svc["ulimits"]["memlock"] == -1
    hc = svc["healthcheck"]
    assert _duration_s(hc["start_period"]) >= 600      # GPTQ's first start: 378 s of kernel compile (measured)
    assert "/health" in " ".join(hc["test"])
    # ports on loopback only, mapped to the port SGLang listens on, which must be all interfaces in the container
    assert svc["ports"] and all(str(p).startswith("127.0.0.1:") for p in svc["ports"])
    assert all(str(p).rsplit(":", 1)[1] == f["--port"] for p in svc["ports"])
    assert f["--host"] == "0.0.0.0", "bound to the container's loopback, the published port reaches nothing"
    restart = str(svc.get("restart", "no"))
    assert restart in ("always", "unless-stopped") or restart.startswith("on-failure"), restart
    assert svc["environment"]["HF_TOKEN"].startswith("${HF_TOKEN"), "the token comes from the environment"
    assert not re.search(r"hf_[A-Za-z0-9]{20,}", text), "a literal Hugging Face token in a compose file"
    assert svc["cpuset"] == "${VRAMKIT_SGLANG_CPUSET:-}"
    if "--kt-method" in f:      # the hybrid MoE image: built from its Dockerfile, KT's experts mounted read-only
        assert svc["image"] == catalog.versions().sglang_kt_image and svc["build"] == "services/sglang-kt"
        assert any(str(v).endswith(":/kt-weights:ro") for v in svc["volumes"]) and f["--kt-weight-path"] == "/kt-weights"
    else:
        assert svc["image"] == catalog.versions().sglang_image
    assert "v" + catalog.versions().sglang_pip in svc["image"], "image and pip pin name the same release"


@pytest.mark.parametrize("name", sorted(COMPOSE_TEXTS))
def test_compose_odd_settings_carry_a_reason(name):
    lines = COMPOSE_TEXTS[name].splitlines()
    for key in ("ipc:", "memlock:", "cpuset:", "start_period:", "restart:", "HF_TOKEN:", '- "127.0.0.1:'):
        hits = [ln for ln in lines if ln.strip().startswith(key)]
        assert hits and all("#" in ln for ln in hits), f"{key} without a one-line reason in {name}"


def test_compose_command_round_trips_the_yarn_json():
    # the JSON override is the one argument with quotes in it: YAML must give it back byte for byte
    text = COMPOSE_TEXTS["docker-compose.qwen-128k.yml"]
    cmd = yaml.safe_load(text)["services"]["sglang"]["command"]
    f = _flags(cmd[3:])
    assert json.loads(f["--json-model-override-args"])["rope_scaling"]["rope_type"] == "yarn"


def test_compose_tp2_reserves_two_gpus():
    svc = yaml.safe_load(COMPOSE_TEXTS["tp2"])["services"]["sglang"]
    assert svc["deploy"]["resources"]["reservations"]["devices"][0]["device_ids"] == ["0", "1"]
    assert _flags(svc["command"][3:])["--tp-size"] == "2"
