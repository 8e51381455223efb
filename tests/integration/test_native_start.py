"""`vramkit up --runtime native` and `make start-qwen*` for real on this machine (no GPU): the interpreter
check, the MODEL_PATH recipe's plan, and DRY_RUN's values. Issue 10, items 5 and 6.

`--assume-gpu` (hidden, for tests) stands in for a GPU where the point is what happens after the GPU check.
Every run gets its own state folder and a free port; nothing may be left behind.
"""
from __future__ import annotations

import os
import re
import socket
import subprocess
from pathlib import Path

import psutil
import pytest

from vramkit import catalog
from vramkit.errors import Exit
from vramkit.launch import reference

REPO = Path(__file__).resolve().parents[2]
PY = REPO / ".venv" / "bin" / "python"
CHECKER_PY = REPO / ".venv-sglang" / "bin" / "python"
SMALL = "config/models/qwen2.5-0.5b-instruct"
KNOBS = ("RUNTIME", "MODEL", "CARD", "PORT", "DRY_RUN", "LOAD_FORMAT", "MODEL_PATH", "TIMEOUT", "UP_ARGS",
         "SGLANG_EXTRA_ARGS", "GPUS", "SGLANG_PYTHON", "SERVER_PYTHON", "GPU_VENV", "VRAMKIT_RUNTIME", "VRAMKIT_PORT",
         "VRAMKIT_DRY_RUN", "VRAMKIT_LOAD_FORMAT", "VRAMKIT_MODEL_PATH", "VRAMKIT_TIMEOUT", "VRAMKIT_GPUS",
         "VRAMKIT_SGLANG_EXTRA_ARGS", "VRAMKIT_SERVER_PYTHON")

pytestmark = pytest.mark.skipif(not PY.exists(), reason=".venv/bin/python missing: run `make install`")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def env(tmp_path):
    # MAKELEVEL/MAKEFLAGS: run make as a user does, also from inside `make test` (no "make[1]:" lines)
    e = {k: v for k, v in os.environ.items() if k not in KNOBS and k not in ("MAKELEVEL", "MAKEFLAGS", "MFLAGS")}
    e["VRAMKIT_STATE_DIR"] = str(tmp_path / "state")
    e["PORT"] = e["VRAMKIT_PORT"] = str(_free_port())   # make's PORT, and the CLI's own name (no warning)
    # planned for the reference desktop's RAM: how much a busy test machine has free must not decide the plan
    e["UP_ARGS"] = f"--host-ram-gib {reference.HOST_RAM_GIB:g}"
    return e


def run(cmd, env, **extra) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=REPO, env={**env, **extra}, capture_output=True, text=True, timeout=180)


def up(env, *argv, **extra) -> subprocess.CompletedProcess:
    return run([str(PY), "-m", "vramkit", "up", *argv, *env["UP_ARGS"].split()], env, **extra)


def nothing_left(env) -> None:
    state = Path(env["VRAMKIT_STATE_DIR"])
    assert not state.exists() or not any(state.iterdir()), sorted(p.name for p in state.iterdir())
    port = f"--port {env['PORT']}"
    assert not [p.pid for p in psutil.process_iter(["cmdline"])
                if "sglang.launch_server" in " ".join(p.info["cmdline"] or ()) and port in " ".join(p.info["cmdline"])]


def the_command(stdout: str) -> str:
    lines = [ln for ln in stdout.splitlines() if " -m sglang.launch_server " in ln]
    assert len(lines) == 1, stdout[-2000:]
    return lines[0]


# ---- the interpreter and its SGLang ----------------------------------------------------------------------------

def test_a_python_without_sglang_is_refused_before_anything_starts(env):
    """Before: .venv's python started, died with "No module named 'sglang'" in the log, exit 15, empty reason."""
    r = up(env, "--preset", "baseline", "--runtime", "native", "--assume-gpu", "--gpu", "rtx-4080-16gb",
           VRAMKIT_SERVER_PYTHON=str(PY))
    assert r.returncode == Exit.NO_SGLANG == 23, r.stdout[-1500:] + r.stderr
    assert "Traceback" not in r.stdout + r.stderr
    line = r.stderr.strip().splitlines()[-1]
    assert line.startswith(f"vramkit: not starting: sglang: {PY} (VRAMKIT_SERVER_PYTHON) cannot import SGLang "
                           "(ModuleNotFoundError: No module named 'sglang') -> make setup-gpu")
    assert "started pid" not in r.stdout
    nothing_left(env)


def test_without_setup_gpu_the_default_venv_is_named(env):
    r = up(env, "--preset", "baseline", "--runtime", "native", "--assume-gpu", "--gpu", "rtx-4080-16gb")
    assert r.returncode == 23
    assert f"{REPO}/.venv-gpu/bin/python (default: make setup-gpu's .venv-gpu) cannot import SGLang (no such file)" \
        in r.stderr
    nothing_left(env)


@pytest.mark.sglang
@pytest.mark.skipif(not CHECKER_PY.exists(), reason=".venv-sglang missing: make setup-sglang-check")
def test_a_python_with_the_pinned_sglang_passes_the_check(env):
    """The real SGLang 0.5.15.post1 (the checker's CPU build) imports: the check passes; DRY_RUN shows the command."""
    r = up(env, "--preset", "baseline", "--runtime", "native", "--assume-gpu", "--gpu", "rtx-4080-16gb",
           VRAMKIT_SERVER_PYTHON=str(CHECKER_PY), VRAMKIT_DRY_RUN="yes")
    assert r.returncode == 0, r.stderr
    flat = " ".join(r.stdout.split())
    assert f"ok sglang sglang {catalog.versions().sglang_pip} in {CHECKER_PY} (VRAMKIT_SERVER_PYTHON)" in flat
    assert the_command(r.stdout).startswith(f"{CHECKER_PY} -m sglang.launch_server ")
    nothing_left(env)


def test_make_passes_server_python(env, tmp_path):
    r = run(["make", "start-qwen", "RUNTIME=native", "DRY_RUN=1", f"SERVER_PYTHON={tmp_path}/py/bin/python"], env)
    assert r.returncode == 0, r.stderr
    assert the_command(r.stdout).startswith(f"{tmp_path}/py/bin/python -m sglang.launch_server ")
    r = run(["make", "start-qwen", "RUNTIME=native", "DRY_RUN=1"], env)
    assert the_command(r.stdout).startswith(f"{REPO}/.venv-gpu/bin/python -m sglang.launch_server ")
    nothing_left(env)


# ---- the MODEL_PATH recipe plans what it launches --------------------------------------------------------------

def test_model_path_recipe_plans_the_folders_model(env):
    """The README's recipe: before, the plan (and the recorded VRAM budget) was the preset's 14B."""
    r = run(["make", "start-qwen-optimized"], env, LOAD_FORMAT="dummy", MODEL_PATH=SMALL, RUNTIME="native",
            DRY_RUN="1")
    assert r.returncode == 0, r.stderr
    plan = r.stdout.split("DRY RUN")[0]
    assert plan.lstrip().startswith("qwen2.5-0.5b-instruct on "), plan[:300]     # the plan table's title
    assert "14b" not in plan.lower()
    cmd = the_command(r.stdout)
    assert f"--model-path {REPO / SMALL} " in cmd   # a folder renders as its absolute path
    assert "--load-format dummy" in cmd
    nothing_left(env)


def test_model_path_and_a_different_model_are_refused(env):
    r = up(env, "--preset", "optimized", "--runtime", "native", "--model", "qwen2.5-coder-14b-instruct-gptq-int4",
           VRAMKIT_MODEL_PATH=SMALL)
    assert r.returncode == Exit.BAD_INPUT
    assert r.stderr.strip().startswith("vramkit: --model qwen2.5-coder-14b-instruct-gptq-int4 and --model-path ")
    assert len(r.stderr.strip().splitlines()) == 1
    nothing_left(env)


# ---- DRY_RUN ---------------------------------------------------------------------------------------------------

# every spelling is tests/unit/test_launch_native.py's (env_flag); here one of each kind, through make and vramkit up
@pytest.mark.parametrize("value", ["TRUE"])
def test_dry_run_yes_and_true_start_nothing(env, value):
    """Before: only DRY_RUN=1 was a dry run; DRY_RUN=yes started for real."""
    r = run(["make", "start-qwen-optimized", "RUNTIME=native"], env, DRY_RUN=value)
    assert r.returncode == 0, r.stderr
    assert "DRY RUN: nothing started" in r.stdout and "vram-safe" not in r.stdout + r.stderr
    nothing_left(env)


@pytest.mark.parametrize("value", ["maybe"])
def test_dry_run_other_values_are_refused_in_one_line(env, value):
    r = up(env, "--preset", "optimized", "--runtime", "native", VRAMKIT_DRY_RUN=value)
    assert r.returncode == Exit.BAD_INPUT == 64
    assert r.stdout == ""                                            # not even the plan: nothing was started
    assert re.fullmatch(rf"vramkit: VRAMKIT_DRY_RUN \(make: DRY_RUN\) is '{value}', neither yes nor no; "
                        r"nothing started -> .*\n", r.stderr)
    r = run(["make", "start-qwen-optimized", "RUNTIME=native", f"DRY_RUN={value}"], env)
    assert r.returncode == 2 and f"is '{value}', neither yes nor no" in r.stderr and "Error 64" in r.stderr
    nothing_left(env)


def test_dry_run_no_means_a_real_start(env):
    r = up(env, "--preset", "optimized", "--runtime", "native", VRAMKIT_DRY_RUN="no")
    assert r.returncode == Exit.NO_GPU                              # a real start, stopped by the missing GPU
    assert "DRY RUN" not in r.stdout
    nothing_left(env)
