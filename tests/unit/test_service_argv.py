"""`vramkit install-service` writes the command `vramkit up` would run (issue 19 item 5): for every preset, the
SGLang unit's ExecStart, read back as systemd reads it, is the argv `vramkit up --runtime native --dry-run`
prints for the same arguments. Compared as whole argv lists, so any flag either side adds (a tool-call parser,
a served name) must be on both. In-process; the interpreter is this one (no SGLang: both print the same
failed check and carry on, as a dry run does)."""
from __future__ import annotations

import os
import shlex
import sys

import pytest

from vramkit import catalog
from vramkit.cli import main

COMMON = ["--gpu", "rtx-4080-16gb", "--assume-gpu", "--sglang-python", sys.executable, "--dry-run",
          "--host-ram-gib", "64", "--cpu-isa", "amx", "--kt-weight-path", "/srv/kt/weights"]


def systemd_words(line: str) -> list[str]:
    """ExecStart's words as systemd reads them (systemd.syntax(7)): C-style double quotes, %% and $$."""
    return [w.replace("%%", "%").replace("$$", "$") for w in shlex.split(line, posix=True)]


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch, tmp_path):
    for k in [k for k in os.environ if k.startswith("VRAMKIT_")]:
        monkeypatch.delenv(k)
    monkeypatch.setenv("VRAMKIT_STATE_DIR", str(tmp_path / "state"))


def up_argv(capsys, preset: str) -> list[str]:
    assert main(["up", "--preset", preset, "--runtime", "native", *COMMON]) == 0
    out = capsys.readouterr().out
    words = next(w for ln in out.splitlines() if " -m sglang.launch_server" in ln for w in [shlex.split(ln)])
    env = [w for w in words if "=" in w and w.split("=")[0].isupper() and w.startswith("VRAMKIT_")]
    assert words[:len(env)] == env       # the adapter's settings lead the line; the unit has them as Environment=
    return words[len(env):]


def unit_argv(capsys, tmp_path, preset: str) -> list[str]:
    assert main(["install-service", "--dir", str(tmp_path / "u"), "--preset", preset, *COMMON]) == 0
    out = capsys.readouterr().out
    assert not (tmp_path / "u").exists()                 # a dry run writes nothing
    line = next(ln for ln in out.splitlines() if ln.startswith("ExecStart=") and "sglang.launch_server" in ln)
    return systemd_words(line.removeprefix("ExecStart="))


@pytest.mark.parametrize("preset", list(catalog.presets()))
def test_exec_start_is_up_dry_runs_argv(capsys, tmp_path, preset):
    up = up_argv(capsys, preset)
    unit = unit_argv(capsys, tmp_path, preset)
    assert unit[0] == os.path.abspath(up[0])             # systemd needs the interpreter's absolute path
    assert unit[1:] == up[1:]
    assert up[up.index("--context-length") + 1] == str(catalog.preset(preset).knobs["context"])


def test_the_moe_unit_carries_the_weights_and_the_adapter(capsys, tmp_path):
    assert main(["install-service", "--dir", str(tmp_path / "u"), "--preset", "moe", *COMMON]) == 0
    out = capsys.readouterr().out
    assert "--kt-weight-path /srv/kt/weights" in out
    assert "PYTHONPATH=" in out and "services/sglang-kt/kt_compat" in out
    assert "VRAMKIT_KT_GPU_LAYERS=auto" in out              # the preset's whole layers reach the unit too


def test_a_dense_unit_with_the_embeddings_in_host_ram_carries_the_adapter(capsys, tmp_path):
    """The optimized preset (its auto moves the token embeddings without the hybrid mode): the unit puts the kit's
    adapter on SGLang's path as `vramkit up` does; with --kt-embed-host off it starts the plain server."""
    assert main(["install-service", "--dir", str(tmp_path / "u"), "--preset", "optimized", *COMMON]) == 0
    out = capsys.readouterr().out
    assert "PYTHONPATH=" in out and "services/sglang-kt/kt_compat" in out and "VRAMKIT_KT_EMBED_HOST=on" in out
    assert main(["install-service", "--dir", str(tmp_path / "u"), "--preset", "optimized", "--kt-embed-host", "off",
                 *COMMON]) == 0
    plain = capsys.readouterr().out
    assert "PYTHONPATH=" not in plain and "VRAMKIT_KT_EMBED_HOST" not in plain


def test_install_refuses_where_up_refuses(capsys, tmp_path):
    """Without a dry run: no SGLang in the interpreter is up's exit 23, and install-service's, writing nothing."""
    argv = [a for a in COMMON if a != "--dry-run"]
    assert main(["install-service", "--dir", str(tmp_path / "u"), "--preset", "baseline", *argv]) == 23
    err = capsys.readouterr().err
    assert err.startswith("vramkit: not starting: sglang") and not (tmp_path / "u").exists()
