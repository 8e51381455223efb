"""The one adapter for local processes and ports: start SGLang natively, stop it, check a port."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import psutil


def port_free(host: str, port: int) -> bool:
    """True when nothing listens on host:port (a bind would succeed)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def start_background(cmd: list[str], log_path: Path, env: dict | None = None) -> int:
    """Start `cmd` in its own session (so stop() can end its whole process group), output to log_path."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env={**os.environ, **(env or {})}, start_new_session=True)
    return proc.pid


def alive(pid: int, *, reap: bool = True) -> bool:
    """Is `pid` running? A zombie counts as gone. reap=True collects a zombie child of ours (waitpid);
    reap=False only reads its state from /proc, for a child another owner waits for (a pool's worker)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    if not reap:
        try:
            with open(f"/proc/{pid}/stat", "rb") as fh:
                return fh.read().rsplit(b")", 1)[1].split()[0] != b"Z"
        except (OSError, IndexError):
            return True
    try:
        pid_done, _ = os.waitpid(pid, os.WNOHANG)
        return pid_done == 0
    except ChildProcessError:
        return True


def tree_pids(pid: int) -> set[int]:
    """`pid` and every process under it now (a server and its scheduler and detokenizer children)."""
    try:
        proc = psutil.Process(pid)
        return {pid, *(c.pid for c in proc.children(recursive=True))}
    except psutil.Error:
        return {pid}


def stop(pid: int, grace_s: float = 20.0) -> bool:
    """SIGTERM the process group, SIGKILL what is left after grace_s. True if something was running."""
    try:
        pgid = os.getpgid(pid)
    except ProcessLookupError:
        return False
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return True
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if not alive(pid) and not _group_alive(pgid):
                return True
            time.sleep(0.2)
    return True


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def stop_one(pid: int, timeout_s: float = 10.0) -> bool:
    """SIGTERM this one process (it stops its own children, e.g. uvicorn its embedded Redis), SIGKILL after
    timeout_s. True if it was running."""
    try:
        proc = psutil.Process(pid)
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout_s)
        except psutil.TimeoutExpired:
            proc.kill()
            proc.wait(5)
    except psutil.NoSuchProcess:
        return False
    return True


def start_time(pid: int) -> float:
    """When `pid` started, in seconds since boot: the kernel's own count (/proc/PID/stat field 22), fixed for
    the process's life. Not psutil's create_time(), which adds the boot time read from /proc/stat at each call:
    that moves with clock updates (seen on CI: a running dashboard's record no longer matched and
    `--background` took it for a stranger's). Raises psutil.NoSuchProcess when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            after_name = fh.read().rsplit(b")", 1)[1].split()     # the name may hold spaces and ')'
    except OSError:
        raise psutil.NoSuchProcess(pid) from None
    return int(after_name[19]) / os.sysconf("SC_CLK_TCK")


def same_start(pid: int, rec: dict) -> bool:
    """The process at `pid` started when the pid record `rec` says (its "create_time", start_time's clock): the same
    process, not a later one given the same pid. Raises psutil.NoSuchProcess when it is gone."""
    return abs(start_time(pid) - float(rec.get("create_time", -1))) < 0.01


# --- pid files (issue 20 item 7: `embed down` and `dashboard --stop` signalled whatever process held the pid
# written there, e.g. `less vramkit/embed/server.py`, because a command line that merely mentioned vramkit
# counted as ours). A record names the exact process: pid, start time and full command line.

def record_pid(path: Path, pid: int, **extra: object) -> dict:
    """Write a pid record (JSON, 0600, replaced atomically); returns it. `extra` is kept beside it."""
    proc = psutil.Process(pid)
    # A child just started by Popen may not have exec'd yet: until then its command line is ours (seen on a busy
    # machine: the record held `embed up`'s, and the next `up` took its own service for a stranger's); while the
    # kernel replaces its memory in exec it reads empty, and a record with no command line never matches again (a
    # loaded machine's test run, 2026-11-29: neither the next `up` nor `down` knew the service as ours and it
    # outlived its test; its record was gone with the run's temporary folder, so this is the likely cause, not a
    # confirmed one)
    ours, deadline = psutil.Process().cmdline(), time.monotonic() + 10
    cmdline = proc.cmdline()
    while cmdline in (ours, []) and time.monotonic() < deadline:
        time.sleep(0.01)
        cmdline = proc.cmdline()
    rec = {"pid": pid, "create_time": start_time(pid), "cmdline": cmdline, **extra}
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(rec, fh)
    tmp.replace(path)
    return rec


def read_pid_record(path: Path) -> dict | None:
    """The record, or None (missing, unreadable, not ours: an old bare pid counts as not ours)."""
    try:
        rec = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(rec, dict) or not isinstance(rec.get("pid"), int) or isinstance(rec.get("pid"), bool):
        return None
    return rec


def recorded_process(path: Path) -> tuple[int | None, dict | None]:
    """(pid, record) when the recorded process still runs, the same one: same start time, same command line;
    (None, record-or-None) otherwise. Only then may a signal be sent to it."""
    rec = read_pid_record(path)
    if rec is None:
        return None, None
    try:
        proc = psutil.Process(rec["pid"])
        same = same_start(proc.pid, rec) and proc.cmdline() == rec.get("cmdline")
    except (psutil.Error, TypeError, ValueError):
        return None, rec
    return (rec["pid"] if same else None), rec
