"""Each make step checks its preconditions first (issue 19 item 5): scripts/precheck.sh says what is missing in
one line, with the exit code vramkit/errors.py declares (documented in the README and `vramkit --help`), and the
make targets call it before they do anything. Generated files never depend on .env."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from vramkit.errors import Exit, exit_code_lines

REPO = Path(__file__).resolve().parents[2]
PRECHECK = REPO / "scripts" / "precheck.sh"


def precheck(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(PRECHECK), "the-step", *args], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("args, code, says", [
    (["python", sys.executable, "99.1"], Exit.NO_PYTHON, "older than 99.1"),
    (["python", "/nonexistent/python3", "3.11"], Exit.NO_PYTHON, "no /nonexistent/python3"),
    (["imports", sys.executable, "no_such_module_vk"], Exit.NO_PYTHON, "cannot import no_such_module_vk"),
    (["disk", "/tmp", "999999"], Exit.HOST_MEMORY, "GiB free, this step needs about 999999 GiB"),
    (["ram", "999999"], Exit.HOST_MEMORY, "GiB of RAM available"),
    (["isa", "no_such_flag_vk|nor_this"], Exit.HOST_CPU, "none of: no_such_flag_vk, nor_this"),
    (["dir", "", "config.json"], Exit.BAD_INPUT, "no folder given"),
    (["dir", "/nonexistent/model", "config.json"], Exit.BAD_INPUT, "does not exist"),
    (["lib", "libno_such_lib_vk.so.1", "libnosuch1"], Exit.NO_PYTHON, "apt-get install libnosuch1"),
])
def test_each_missing_precondition_is_one_line_and_its_code(args, code, says):
    out = precheck(*args)
    assert out.returncode == code, out.stderr
    assert out.stderr.startswith("the-step: ") and out.stderr.count("\n") == 1 and " -> " in out.stderr
    assert says in out.stderr


def test_met_preconditions_pass_and_chain():
    out = precheck("python", sys.executable, "3.11", "--", "disk", "/tmp", "0", "--", "ram", "0", "--",
                   "dir", str(REPO / "config" / "models" / "qwen3-8b"), "config.json")
    assert out.returncode == 0 and out.stderr == ""
    chained = precheck("disk", "/tmp", "0", "--", "isa", "no_such_flag_vk")     # the second check still runs
    assert chained.returncode == Exit.HOST_CPU


def test_its_codes_are_documented():
    documented = {int(line.split()[0]) for line in exit_code_lines()}
    used = {int(c) for c in (Exit.NO_PYTHON, Exit.HOST_MEMORY, Exit.HOST_CPU, Exit.BAD_INPUT)}
    assert used <= documented
    text = PRECHECK.read_text()
    assert "NO_PYTHON=25 HOST_MEMORY=14 HOST_CPU=22 BAD_INPUT=64" in text       # the same numbers as errors.py


@pytest.mark.parametrize("target, before", [
    ("kt-convert", "make_random_checkpoint.py"),
    ("setup-kt-native", "pip install"),
    ("setup-gpu", "setup_gpu.sh"),
])
def test_make_steps_check_before_they_act(target, before):
    out = subprocess.run(["make", "-n", target, "MODEL_DIR=/m"], cwd=REPO, capture_output=True, text=True,
                         timeout=60)
    lines = out.stdout.splitlines()
    first_check = next(i for i, ln in enumerate(lines) if "scripts/precheck.sh" in ln)
    first_act = next(i for i, ln in enumerate(lines) if before in ln)
    assert first_check < first_act, out.stdout


def test_generated_files_do_not_depend_on_dot_env(monkeypatch):
    """`make optimize-write` writes this host's cpusets and read bandwidth into .env; the committed files are
    rendered for the reference machine, so they stay fresh (the environment is read before .env)."""
    from vramkit.generated import stale_blocks
    from vramkit.launch.compose_files import stale_files
    monkeypatch.setenv("VRAMKIT_HOST_READ_GBS", "1:11.2,8:72.3,16:93")
    monkeypatch.setenv("VRAMKIT_SGLANG_CPUSET", "0")
    monkeypatch.setenv("VRAMKIT_SIDE_CPUSET", "0")
    assert stale_files(write=False) + stale_blocks(write=False) == []
