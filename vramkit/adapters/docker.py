"""The one adapter for Docker: is it there (engine, NVIDIA runtime), compose up/down, container state."""
from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

from vramkit.errors import Exit, VramkitError


def _run(cmd: list[str], timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def check_engine() -> None:
    """Docker client, a reachable engine, and the NVIDIA runtime; else one VramkitError saying which."""
    if shutil.which("docker") is None:
        raise VramkitError("docker is not installed", "install Docker Engine + the NVIDIA Container Toolkit, "
                           "or run natively: RUNTIME=native", Exit.NO_DOCKER)
    try:
        info = _run(["docker", "info", "--format", "{{json .Runtimes}}"], timeout=20)
    except subprocess.TimeoutExpired:
        raise VramkitError("the Docker engine does not answer", "start it (sudo systemctl start docker), "
                           "or RUNTIME=native", Exit.NO_DOCKER) from None
    if info.returncode != 0:
        raise VramkitError("the Docker engine is not reachable ("
                           + (info.stderr.strip().splitlines() or ["no answer"])[-1][:120] + ")",
                           "start it, check your user is in the docker group, or RUNTIME=native", Exit.NO_DOCKER)
    try:
        runtimes = json.loads(info.stdout or "{}")
    except ValueError:
        runtimes = {}
    if "nvidia" not in runtimes and not Path("/etc/cdi/nvidia.yaml").exists() \
            and not Path("/var/run/cdi/nvidia.yaml").exists():
        raise VramkitError("Docker has no NVIDIA runtime", "install the NVIDIA Container Toolkit "
                           "(nvidia-ctk runtime configure --runtime=docker) and restart Docker", Exit.NO_DOCKER)


def compose(compose_file: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return _run(["docker", "compose", "-f", str(compose_file), *args], timeout=timeout)


def up(compose_file: Path) -> None:
    r = compose(compose_file, "up", "-d", timeout=1800)
    if r.returncode != 0:
        raise VramkitError("docker compose up failed: " + (r.stderr.strip().splitlines() or ["?"])[-1][:200],
                           "see `docker compose -f " + str(compose_file) + " logs`", Exit.START_FAILED)


def down(compose_file: Path) -> None:
    """`docker compose down`; a failure (no docker, an error, a hang) is a VramkitError, never ignored."""
    if shutil.which("docker") is None:
        raise VramkitError(f"cannot stop {compose_file.name}: docker is not installed",
                           "stop the container by other means", Exit.STOP_FAILED)
    try:
        r = compose(compose_file, "down", "--remove-orphans", timeout=300)
    except subprocess.TimeoutExpired:
        raise VramkitError("docker compose down did not finish in 300 s",
                           f"check `docker compose -f {compose_file} ps`", Exit.STOP_FAILED) from None
    if r.returncode != 0:
        raise VramkitError("docker compose down failed: " + (r.stderr.strip().splitlines() or ["?"])[-1][:200],
                           f"check `docker compose -f {compose_file} ps`, then run it again", Exit.STOP_FAILED)


def container_status(name: str) -> str | None:
    """'running', 'exited', ... or None when there is no such container."""
    if shutil.which("docker") is None:
        return None
    r = _run(["docker", "inspect", "--format", "{{.State.Status}}", name], timeout=20)
    return r.stdout.strip() if r.returncode == 0 else None


def logs(name: str, tail: int = 400) -> str:
    r = _run(["docker", "logs", "--tail", str(tail), name], timeout=30)
    return (r.stdout or "") + (r.stderr or "")
