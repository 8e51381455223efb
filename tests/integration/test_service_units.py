"""`vramkit install-service`: the rendered units pass systemd's own checker (`systemd-analyze verify`),
carry what the issue asks for, and a bad request writes nothing."""
from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from vramkit import catalog
from vramkit.adapters import native_python
from vramkit.launch import reference
from vramkit.launch.systemd_units import exec_line, exec_word, render

REPO = Path(__file__).resolve().parents[2]
ANALYZE = shutil.which("systemd-analyze")


# the units need an interpreter that imports SGLang (install-service refuses where `vramkit up` would):
# the pinned SGLang of the flag checker (make setup-sglang-check), a real one; a card named, a GPU assumed
SGLANG_PY = REPO / ".venv-sglang" / "bin" / "python"
ON_A_GPU = ("--gpu", "rtx-4080-16gb", "--assume-gpu", "--sglang-python", str(SGLANG_PY))
needs_sglang = pytest.mark.skipif(not SGLANG_PY.exists(), reason=".venv-sglang missing (make setup-sglang-check)")


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def install(monkeypatch, capsys):
    """`vramkit install-service --dir TMP/units ARGS` in-process, with only the VRAMKIT_* the test gives."""
    from vramkit.cli import main

    def run(tmp_path: Path, *args: str, env: dict | None = None) -> Result:
        for k in [k for k in os.environ if k.startswith("VRAMKIT_")]:
            monkeypatch.delenv(k)
        for k, v in (env or {}).items():
            monkeypatch.setenv(k, v)
        if "--host-ram-gib" not in args:   # the reference desktop's RAM: a busy machine's free RAM must not decide
            args = (*args, "--host-ram-gib", f"{reference.HOST_RAM_GIB:g}")
        code = main(["install-service", "--dir", str(tmp_path / "units"), *args])
        out = capsys.readouterr()
        return Result(code, out.out, out.err)
    return run


def units(tmp_path: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted((tmp_path / "units").glob("*.service"))}


def test_exec_words_read_back_as_systemd_reads_them():
    assert exec_word("--port") == "--port"
    assert exec_word("/a b/c") == '"/a b/c"'
    assert exec_word("50%") == "50%%"                 # % starts a specifier
    assert exec_word("$HOME") == "$$HOME"             # $ expands a variable
    assert exec_word('say "hi"') == '"say \\"hi\\""'
    with pytest.raises(ValueError):
        exec_line(["python", "-m", "x"])              # ExecStart needs an absolute path
    with pytest.raises(KeyError):
        render("ExecStart=$exec_start $missing", {"exec_start": "/bin/true"})


@needs_sglang
def test_units_have_restart_memlock_cpuset_and_journal(tmp_path, install):
    out = install(tmp_path, "--preset", "optimized", "--hicache-gb", "0", *ON_A_GPU,
                  env={"VRAMKIT_SGLANG_CPUSET": "0-1", "VRAMKIT_SIDE_CPUSET": "1"})
    assert out.returncode == 0, out.stderr
    u = units(tmp_path)
    assert set(u) == {"vramkit-sglang.service", "vramkit-embed.service"}
    sg, em = u["vramkit-sglang.service"], u["vramkit-embed.service"]
    for text in (sg, em):
        assert "Restart=on-failure" in text
        assert "StandardOutput=journal" in text and "StandardError=journal" in text
    assert "LimitMEMLOCK=infinity" in sg
    assert "LimitNOFILE=65536" in sg and "LimitNOFILE=65536" in em     # issue 20 item 2: 1024 was the default
    assert "CPUAffinity=0 1" in sg and "CPUAffinity=1" in em
    exec_start = next(line for line in sg.splitlines() if line.startswith("ExecStart="))
    assert " -m sglang.launch_server " in exec_start
    # issue 20 item 6: the unit's own interpreter imports SGLang (it ran the kit's .venv python, which has none,
    # while `vramkit up` would have refused with exit 23)
    python = shlex.split(exec_start.removeprefix("ExecStart="))[0]
    probe = native_python.probe_sglang(python)        # the same question `vramkit up` asks before a start
    assert probe.ok and probe.version == catalog.versions().sglang_pip, f"{python}: {probe.detail}"
    # the same flags `vramkit plan --preset optimized` renders, which the SGLang parser test checks
    for flag in ("--kv-cache-dtype fp8_e5m2", "--mem-fraction-static 0.85"):
        assert flag in exec_start
    assert '"CUDA_DEVICE_ORDER=PCI_BUS_ID"' in sg          # NVML's numbering, as `vramkit up` sets it
    assert "VRAMKIT_EMBED_API_KEY=" not in em.replace("# VRAMKIT_EMBED_API_KEY=", "")   # no secret in the unit


@needs_sglang
def test_the_same_extra_flags_and_model_path_as_vramkit_up(tmp_path, install):
    folder = REPO / "config" / "models" / "qwen2.5-coder-14b-instruct-gptq-int4"
    out = install(tmp_path, "--preset", "optimized", "--hicache-gb", "0", *ON_A_GPU, "--load-format", "dummy",
                  "--model-path", str(folder),
                  env={"VRAMKIT_SGLANG_EXTRA_ARGS": "--attention-backend triton"})
    assert out.returncode == 0, out.stderr
    exec_start = next(ln for ln in units(tmp_path)["vramkit-sglang.service"].splitlines() if ln.startswith("ExecStart="))
    assert f"--model-path {folder}" in exec_start and "--load-format dummy" in exec_start
    assert "--attention-backend triton" in exec_start


@needs_sglang
def test_without_a_cpuset_the_unit_says_so(tmp_path, install):
    # empty, not unset: a .env from `make optimize-write` must not decide this test (issue 19 item 5)
    out = install(tmp_path, "--preset", "baseline", *ON_A_GPU, env={"VRAMKIT_SGLANG_CPUSET": "", "VRAMKIT_SIDE_CPUSET": ""})
    assert out.returncode == 0, out.stderr
    sg = units(tmp_path)["vramkit-sglang.service"]
    assert "CPUAffinity=" not in sg.replace("# CPUAffinity:", "")
    assert "make optimize-write" in sg


@needs_sglang
@pytest.mark.skipif(ANALYZE is None, reason="systemd-analyze not installed (Debian package systemd)")
def test_systemd_analyze_verify_accepts_both_units(tmp_path, install):
    out = install(tmp_path, "--preset", "baseline", *ON_A_GPU,
                  env={"VRAMKIT_SGLANG_CPUSET": "0", "VRAMKIT_SIDE_CPUSET": "0"})
    assert out.returncode == 0, out.stderr
    paths = [str(p) for p in sorted((tmp_path / "units").glob("*.service"))]
    v = subprocess.run([ANALYZE, "verify", *paths], capture_output=True, text=True, timeout=120)
    assert v.returncode == 0, v.stderr
    assert v.stderr.strip() == "", v.stderr          # not even a warning (unknown key, bad value)


@pytest.mark.skipif(ANALYZE is None, reason="systemd-analyze not installed (Debian package systemd)")
def test_systemd_analyze_catches_what_a_bad_render_would_be(tmp_path, install):
    """The checker is not a rubber stamp: a unit with a relative ExecStart and a bad CPUAffinity fails."""
    bad = tmp_path / "bad.service"
    bad.write_text("[Service]\nExecStart=python -m sglang.launch_server\nCPUAffinity=zz\n")
    v = subprocess.run([ANALYZE, "verify", str(bad)], capture_output=True, text=True, timeout=120)
    assert v.returncode != 0


@needs_sglang
def test_a_plan_that_does_not_fit_writes_nothing(tmp_path, install):
    # the 14B at 128K on 16 GB: its KV cannot fit; `vramkit up --no-auto-fit` refuses it with exit 10, so does this
    out = install(tmp_path, "--preset", "optimized", "--context", "128k", "--hicache-gb", "0", "--no-auto-fit",
                  *ON_A_GPU)
    assert out.returncode == 10
    assert out.stderr.startswith("vramkit: ") and "Traceback" not in out.stderr
    assert not (tmp_path / "units").exists()


def test_a_relative_or_missing_python_is_refused(tmp_path, install):
    out = install(tmp_path, "--preset", "optimized", "--sglang-python", "/nonexistent/python")
    assert out.returncode == 64
    assert "--sglang-python" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.parametrize("how", ["--gpus", "--model-path", "model folder"])
def test_a_line_break_cannot_inject_a_directive(how, tmp_path, monkeypatch, capsys):
    """Issue 20 item 7: a newline in --gpus, --model-path or a model folder's name wrote `ExecStartPre=` into
    the unit, and systemd-analyze verify still passed. Now: exit 64, one line, nothing written."""
    from vramkit.cli import main

    for k in [k for k in os.environ if k.startswith("VRAMKIT_")]:
        monkeypatch.delenv(k)
    evil = "0\nExecStartPre=/bin/touch " + str(tmp_path / "pwned")
    args = ["install-service", "--dir", str(tmp_path / "units"), "--preset", "optimized", "--host-ram-gib", "64"]
    if how == "model folder":
        folder = tmp_path / "m\nExecStartPre=x"
        folder.mkdir()
        shutil.copy(REPO / "config/models/qwen2.5-coder-14b-instruct-gptq-int4/config.json", folder)
        args += ["--model", str(folder)]
    else:
        args += [how, evil]
    assert main(args) == 64
    err = capsys.readouterr().err
    assert err.startswith("vramkit: ") and "control character" in err and "Traceback" not in err
    assert not (tmp_path / "units").exists()
    with pytest.raises(ValueError):
        render("Environment=CUDA_VISIBLE_DEVICES=$gpu_ids\n", {"gpu_ids": evil})
