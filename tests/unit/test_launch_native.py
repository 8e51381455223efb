"""RUNTIME=native's interpreter and its SGLang check, what --model-path plans, and the DRY_RUN knob.

Issue 10: the native start ran `.venv/bin/python -m sglang.launch_server`, which never has SGLang (exit 15,
an empty reason); `MODEL_PATH=<folder>` planned the preset's model while launching the folder; `DRY_RUN=yes`
started for real. The SGLang probe here is the real adapter on real interpreters: .venv's (no SGLang, by
design); tests/integration/test_native_start.py runs it on .venv-sglang's (SGLang 0.5.15.post1, CPU torch).
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import pytest

from vramkit import catalog
from vramkit.adapters import native_python
from vramkit.commands.plan import add_plan_arguments, request_from_args
from vramkit.errors import Exit, VramkitError
from vramkit.launch import checks as launch_checks
from vramkit.launch import steps
from vramkit.launch.env import env_flag
from vramkit.launch.resolve import resolve

REPO = Path(__file__).resolve().parents[2]
KIT_PY = REPO / ".venv" / "bin" / "python"
SMALL = "config/models/qwen2.5-0.5b-instruct"


# ---- which interpreter ---------------------------------------------------------------------------------------

def test_default_is_setup_gpus_venv():
    assert native_python.native_python() == (str(REPO / ".venv-gpu" / "bin" / "python"),
                                             "default: make setup-gpu's .venv-gpu")


def test_flag_wins_over_env_and_a_bare_name_is_found_on_path():
    assert native_python.native_python(None, "/opt/sglang/bin/python") == ("/opt/sglang/bin/python",
                                                                          native_python.ENV_SERVER_PYTHON)
    assert native_python.native_python("/srv/py/bin/python", "/opt/sglang/bin/python")[0] == "/srv/py/bin/python"
    path, _ = native_python.native_python(None, "python3")
    assert os.path.isabs(path) and Path(path).name.startswith("python3") and Path(path).exists()


def test_a_venv_python_symlink_is_kept_not_followed(tmp_path):
    """Following the symlink would run the base interpreter, outside the venv and its SGLang."""
    link = tmp_path / "venv" / "bin" / "python"
    link.parent.mkdir(parents=True)
    link.symlink_to(sys.executable)
    assert native_python.native_python(str(link))[0] == str(link)


def test_the_spec_carries_the_choice(monkeypatch):
    from vramkit.commands.launch import launch_spec as _spec
    monkeypatch.setenv("VRAMKIT_SERVER_PYTHON", str(KIT_PY))
    for name in ("VRAMKIT_DRY_RUN", "DRY_RUN"):
        monkeypatch.delenv(name, raising=False)
    args = argparse.Namespace(extra_args=None, sglang_python=None, name=None, preset="baseline", runtime="native",
                              port=None, model_path=None, load_format=None, timeout_s=None, dry_run=False,
                              gpu_ids=None)
    spec = _spec(args)
    assert spec.sglang_python == str(KIT_PY) and spec.sglang_python_from == native_python.ENV_SERVER_PYTHON


# ---- can it import SGLang (the real probe) -------------------------------------------------------------------

def _resolved(*argv):
    p = argparse.ArgumentParser()
    add_plan_arguments(p)
    return resolve(request_from_args(p.parse_args([*argv, "--host-ram-gib", "64"])))


def _native_checks(python: str, probe=native_python.probe_sglang):
    spec = steps.LaunchSpec(name="t", runtime="native", sglang_python=python, sglang_python_from="test")
    return {c.name: c for c in launch_checks.preflight(
        _resolved("--preset", "baseline"), spec, gpu_present=True, docker_check=None, host_ram=lambda: 64 << 30,
        memlock=lambda: (None, None), port_free=lambda h, p: True, sglang_import=probe)}


@pytest.mark.skipif(not KIT_PY.exists(), reason=".venv missing")
def test_the_kits_own_venv_is_refused_with_the_fix_and_exit_23():
    checks = _native_checks(str(KIT_PY))
    c = checks["sglang"]
    assert (c.ok, c.fatal, c.code) == (False, True, Exit.NO_SGLANG) and int(Exit.NO_SGLANG) == 23
    assert "cannot import SGLang (ModuleNotFoundError: No module named 'sglang')" in c.detail
    assert c.detail.endswith("-> " + native_python.FIX) and "make setup-gpu" in c.detail
    first_failed = [x for x in checks.values() if not x.ok and x.fatal][0]
    assert first_failed.name == "sglang"


def test_a_missing_interpreter_is_refused(tmp_path):
    c = _native_checks(str(tmp_path / ".venv-gpu" / "bin" / "python"))["sglang"]
    assert not c.ok and "cannot import SGLang (no such file)" in c.detail and c.code == Exit.NO_SGLANG


def test_another_sglang_release_only_warns():
    other = native_python.Probe(True, "0.5.9", "")
    checks = _native_checks("/any/python", probe=lambda py: other)
    assert checks["sglang"].ok
    w = checks["sglang-pin"]
    assert (w.ok, w.fatal) == (False, False) and "not the pinned" in w.detail


@pytest.mark.parametrize("isa", ["avx2", "avx512"])
def test_the_moe_preset_needs_the_planned_kt_kernel_release_beside_sglang(isa):
    """The hybrid MoE mode starts only with the kt-kernel release its plan is for (this CPU's, config/versions.toml):
    none -> exit 23 naming make setup-kt-native; another (0.5.1 on an AVX2-only CPU dies with SIGILL) -> exit 22."""
    v = catalog.versions()
    want = v.kt_kernel_for(isa)
    other = v.kt_kernel_pip if isa == "avx2" else v.kt_kernel_avx2_pip
    spec = steps.LaunchSpec(name="t", runtime="native", sglang_python="/srv/py", sglang_python_from="test")
    resolved = _resolved("--preset", "moe", "--gpu", "rtx-5060-ti-16gb", "--cpu-isa", isa, "--host-read-gbs", "60")
    assert resolved.hybrid.plan.kt_kernel == want

    def check(kt):
        return {c.name: c for c in launch_checks.preflight(
            resolved, spec, gpu_present=True, docker_check=None, host_ram=lambda: 64 << 30,
            memlock=lambda: (None, None), port_free=lambda h, p: True,
            sglang_import=lambda py: native_python.Probe(True, v.sglang_pip, "", kt))}["kt-kernel"]
    none, wrong, right = check(None), check(other), check(want)
    assert (none.ok, none.code) == (False, Exit.NO_SGLANG) and "make setup-kt-native" in none.detail
    assert (wrong.ok, wrong.code) == (False, Exit.HOST_CPU) and f"kt-kernel {other} is installed" in wrong.detail
    assert right.ok and want in right.detail


def test_docker_runtime_does_not_probe():
    spec = steps.LaunchSpec(name="t", runtime="docker")
    names = [c.name for c in launch_checks.preflight(
        _resolved("--preset", "baseline"), spec, gpu_present=True, docker_check=lambda: None,
        host_ram=lambda: 64 << 30, memlock=lambda: (None, None), port_free=lambda h, p: True,
        sglang_import=lambda py: pytest.fail("docker runtime probed the native Python"))]
    assert "sglang" not in names


# ---- what --model-path plans ---------------------------------------------------------------------------------

def test_no_model_path_keeps_the_model():
    assert steps.model_to_plan(None, None) is None
    assert steps.model_to_plan("qwen2.5-coder-7b-instruct", None) == "qwen2.5-coder-7b-instruct"


def test_a_folder_is_planned_not_the_presets_model():
    assert steps.model_to_plan(None, SMALL) == SMALL
    r = _resolved("--preset", "optimized", "--model", steps.model_to_plan(None, SMALL))
    assert r.model.num_layers == 24 and r.model.hidden_size == 896          # Qwen2.5-0.5B, not the 14B


def test_a_folder_and_the_same_model_by_name_agree():
    assert steps.model_to_plan("qwen2.5-0.5b-instruct", SMALL) == SMALL


def test_a_folder_and_a_different_model_are_refused():
    with pytest.raises(VramkitError) as e:
        steps.model_to_plan("qwen2.5-coder-14b-instruct-gptq-int4", SMALL)
    assert e.value.code == Exit.BAD_INPUT and "are different models" in e.value.what
    assert any(f in e.value.what for f in ("num_layers", "hidden_size", "head_dim"))


def test_a_catalogued_hf_id_plans_that_model():
    m = catalog.model("qwen2.5-coder-7b-instruct")
    assert steps.model_to_plan(None, m.hf_id) == "qwen2.5-coder-7b-instruct"
    with pytest.raises(VramkitError):
        steps.model_to_plan("qwen2.5-0.5b-instruct", m.hf_id)


def test_an_unknown_hf_id_needs_model(tmp_path):
    with pytest.raises(VramkitError) as e:
        steps.model_to_plan(None, "someone/unknown-model")
    assert e.value.code == Exit.BAD_INPUT and "--model" in e.value.todo
    assert steps.model_to_plan("qwen2.5-coder-7b-instruct", "someone/my-finetune") == "qwen2.5-coder-7b-instruct"
    with pytest.raises(VramkitError) as e:
        steps.model_to_plan(None, str(tmp_path))                             # a folder without config.json
    assert "without config.json" in e.value.what


# ---- DRY_RUN ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("value, dry", [("1", True), ("true", True), ("yes", True), ("TRUE", True), ("Yes", True),
                                        ("", False), ("0", False), ("false", False), ("no", False), ("NO", False)])
def test_dry_run_accepts_yes_and_no(value, dry):
    assert env_flag("DRY_RUN", {"VRAMKIT_DRY_RUN": value}) is dry


@pytest.mark.parametrize("value", ["y", "maybe", "2", "on", "ture"])
def test_dry_run_refuses_anything_else(value):
    with pytest.raises(VramkitError) as e:
        env_flag("DRY_RUN", {"VRAMKIT_DRY_RUN": value})
    assert e.value.code == Exit.BAD_INPUT and "nothing started" in e.value.what
    assert e.value.what.startswith(f"VRAMKIT_DRY_RUN (make: DRY_RUN) is {value!r}")


def test_dry_run_unset_is_no():
    assert env_flag("DRY_RUN", {}) is False
