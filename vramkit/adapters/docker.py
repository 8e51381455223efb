"""The one adapter for Docker: is it there (engine, NVIDIA runtime), compose up/down, container state."""
from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections import deque
from collections.abc import Callable
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


def up(compose_file: Path, on_line: Callable[[str], None] | None = None, timeout: float = 1800) -> None:
    """`docker compose up -d`. With `on_line`, compose's own progress lines are passed on as they come (a first
    start pulls a multi-GB image, or builds the moe preset's: each layer's bytes so far and the build's steps),
    so the step is not silent; its last line is the error when it fails."""
    cmd = ["docker", "compose", "-f", str(compose_file), "up", "-d"]
    if on_line is None:
        r = _run(cmd, timeout=timeout)
        lines = r.stderr.strip().splitlines()
        code = r.returncode
    else:
        lines, code = _stream(cmd, on_line, timeout)
    if code != 0:
        raise VramkitError("docker compose up failed: " + (lines or ["?"])[-1][:200],
                           "see `docker compose -f " + str(compose_file) + " logs`", Exit.START_FAILED)


def _stream(cmd: list[str], on_line: Callable[[str], None], timeout: float) -> tuple[list[str], int]:
    """Run `cmd`, handing each line of its stderr (compose writes its progress there) to `on_line`; (the last
    lines, the exit code). Past `timeout` it is killed and the code is 124."""
    tail: deque[str] = deque(maxlen=20)
    deadline = time.monotonic() + timeout
    with subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, errors="replace") as p:
        assert p.stderr is not None
        for raw in p.stderr:
            line = raw.rstrip()
            if line:
                tail.append(line)
                on_line(line)
            if time.monotonic() > deadline:
                p.kill()
                return [*tail, f"no end after {timeout:.0f} s"], 124
        return list(tail), p.wait()


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
