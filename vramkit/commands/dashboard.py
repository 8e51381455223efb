"""`vramkit dashboard`: a local page with the plan explorer, the card live, the running server beside
its plan, and the bench results; Prometheus /metrics beside them (issue 13).

  vramkit dashboard                 serve in the foreground on 127.0.0.1:8003
  vramkit dashboard --background    the same in the background (pid + log in the kit's state dir);
                                    returns once /health answers
  vramkit dashboard --stop          stop the background one; its pid file and log go with it
  vramkit dashboard --capture DIR   write every panel's JSON from this machine (for a GPU host without a
                                    browser), then exit
  vramkit dashboard --replay DIR    serve a capture; the page says whose and when
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from vramkit.adapters.process import record_pid, recorded_process, stop_one
from vramkit.errors import Exit, VramkitError

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8003
PID_FILE = "dashboard.pid"
LOG_FILE = "dashboard.log"
ENV_API_KEY = "VRAMKIT_DASHBOARD_API_KEY"
ENV_ALLOWED_HOSTS = "VRAMKIT_DASHBOARD_ALLOWED_HOSTS"   # Host names answered besides loopback (DNS rebinding)


def register(sub) -> None:
    p = sub.add_parser("dashboard", help="local web dashboard + Prometheus /metrics (port 8003)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--host", default=DEFAULT_HOST, help="bind address (default %(default)s)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help="port (default %(default)s)")
    p.add_argument("--api-key", default=None,
                   help=f"require this key on every route (default: env {ENV_API_KEY}, better: `ps` shows "
                        "arguments to every user; unset = no key)")
    p.add_argument("--sglang-url", default=None,
                   help="the SGLang server to show (default: the kit's running record, else http://127.0.0.1:30000)")
    p.add_argument("--bench-dir", type=Path, action="append", default=None,
                   help="bench result folders (repeatable; default benchmarks/results)")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--background", action="store_true", help="start in the background, return once it answers")
    mode.add_argument("--stop", action="store_true", help="stop the background dashboard")
    mode.add_argument("--capture", type=Path, metavar="DIR", help="write every panel's JSON to DIR, then exit")
    p.add_argument("--replay", type=Path, metavar="DIR", help="serve a capture instead of this machine")
    p.add_argument("--samples", type=int, default=10, help="--capture: live samples, 1 s apart (default 10)")
    p.add_argument("--json", action="store_true", help="--background/--stop/--capture: say what happened as JSON")
    p.set_defaults(func=run)


def _api_key(args) -> str:
    key = args.api_key if args.api_key is not None else os.environ.get(ENV_API_KEY, "")
    return key.strip()


def _source(args):
    from vramkit.dashboard.capture import ReplaySource
    from vramkit.dashboard.sources import LiveSource

    if args.replay:
        return ReplaySource(args.replay)
    return LiveSource(bench_dirs=args.bench_dir, sglang_url=args.sglang_url)


def _deps() -> None:
    import importlib.util
    for name in ("fastapi", "uvicorn", "prometheus_client"):
        if importlib.util.find_spec(name) is None:
            raise VramkitError(f"the dashboard needs {name}", "pip install 'vramkit[dashboard]' (make install does)",
                               Exit.BAD_INPUT)


def _paths() -> tuple[Path, Path]:
    from vramkit.adapters.state import state_dir
    d = state_dir()
    return d / PID_FILE, d / LOG_FILE


def _url(args) -> str:
    host = "127.0.0.1" if args.host in ("0.0.0.0", "", "::") else args.host
    return f"http://{host}:{args.port}"


def _health(url: str, key: str) -> dict | None:
    import httpx
    try:
        r = httpx.get(url + "/health", timeout=2.0, headers={"X-API-Key": key} if key else {})
        return r.json() if r.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None


def _port_free(host: str, port: int) -> bool:
    import socket
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def serve(args) -> int:
    _deps()
    import uvicorn

    from vramkit.adapters.http_server import allowed_host_names, uvicorn_config
    from vramkit.dashboard.app import create_app

    if not 0 < args.port < 65536:
        raise VramkitError(f"--port {args.port} is not a port", "e.g. --port 8003", Exit.BAD_INPUT)
    app = create_app(_source(args), _api_key(args),
                     host_names=allowed_host_names(args.host, os.environ.get(ENV_ALLOWED_HOSTS, "")))
    if args.host not in ("127.0.0.1", "localhost", "::1") and not _api_key(args):
        print(f"vramkit: warning: serving on {args.host} without an API key: anyone who reaches it sees the "
              f"card and the server -> set {ENV_API_KEY}", file=sys.stderr)
    if not _port_free(args.host, args.port):
        raise VramkitError(f"{args.host}:{args.port} is in use", "stop what holds it, or pass --port", Exit.PORT_BUSY)
    print(f"vramkit dashboard at {_url(args)}/ (Prometheus: {_url(args)}/metrics)"
          + ("  [API key required]" if _api_key(args) else "")
          + (f"  [replay of {args.replay}]" if args.replay else ""), flush=True)
    uvicorn.Server(uvicorn_config(app, args.host, args.port, log_level="warning",
                                  logger_name="vramkit.dashboard")).run()
    return 0


def _our_pid(pid_file: Path) -> int | None:
    """The background dashboard's pid if that very process still runs (same pid, start time and command
    line): a pid file naming a reused pid or another program (`less vramkit/...`) is never ours."""
    pid, _ = recorded_process(pid_file)
    return pid


def background(args) -> int:
    _deps()
    pid_file, log_file = _paths()
    url, key = _url(args), _api_key(args)
    pid = _our_pid(pid_file)
    if pid:
        _say(args, {"url": url, "pid": pid, "already_running": True},
             f"dashboard already running at {url}/ (pid {pid})")
        return 0
    if args.replay:
        _source(args)                       # a bad capture folder fails here, before anything starts
    if not _port_free(args.host, args.port):
        raise VramkitError(f"{args.host}:{args.port} is in use", "stop what holds it, or pass --port", Exit.PORT_BUSY)
    pid_file.parent.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "vramkit", "dashboard", "--host", args.host, "--port", str(args.port)]
    for flag, value in (("--sglang-url", args.sglang_url), ("--replay", args.replay)):
        if value:
            cmd += [flag, str(value)]
    for d in args.bench_dir or []:
        cmd += ["--bench-dir", str(d)]
    env = dict(os.environ)
    if key:
        env[ENV_API_KEY] = key              # not on the command line: `ps` would show it
    with open(log_file, "ab") as log:
        os.chmod(log_file, 0o600)
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env,
                                start_new_session=True, cwd=os.getcwd())
    record_pid(pid_file, proc.pid)
    deadline = time.monotonic() + 30.0
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pid_file.unlink(missing_ok=True)
            raise VramkitError(f"dashboard exited during start-up (code {proc.returncode}): {_tail(log_file)}",
                               f"read {log_file}", Exit.START_FAILED)
        if _health(url, key) is not None:
            _say(args, {"url": url, "pid": proc.pid, "log": str(log_file), "pid_file": str(pid_file)},
                 f"dashboard up at {url}/ (pid {proc.pid}, log {log_file}); stop it with `make dashboard-down`")
            return 0
        time.sleep(0.2)
    stop_one(proc.pid)
    pid_file.unlink(missing_ok=True)
    raise VramkitError(f"dashboard did not answer {url}/health within 30 s", f"read {log_file}", Exit.HEALTH_TIMEOUT)


def _tail(path: Path, lines: int = 3) -> str:
    try:
        return " | ".join(path.read_text(errors="replace").strip().splitlines()[-lines:])
    except OSError:
        return ""


def stop(args) -> int:
    pid_file, log_file = _paths()
    pid = _our_pid(pid_file)
    stopped = stop_one(pid) if pid else False
    pid_file.unlink(missing_ok=True)
    if stopped:
        log_file.unlink(missing_ok=True)    # a clean stop leaves nothing behind; a failed start keeps its log
    _say(args, {"stopped_pid": pid if stopped else None},
         f"dashboard stopped (pid {pid})" if stopped else "dashboard was not running")
    return 0


def do_capture(args) -> int:
    from vramkit.dashboard.capture import capture
    from vramkit.dashboard.sources import LiveSource

    if args.samples < 1:
        raise VramkitError(f"--samples {args.samples} must be at least 1", "e.g. --samples 10", Exit.BAD_INPUT)
    meta = capture(LiveSource(bench_dirs=args.bench_dir, sglang_url=args.sglang_url), args.capture, args.samples)
    _say(args, meta, f"captured {meta['device']} at {meta['captured_at_utc']} into {args.capture}/; "
                     f"view it with: vramkit dashboard --replay {args.capture}")
    return 0


def _say(args, info: dict, text: str) -> None:
    print(json.dumps(info, indent=2, default=str) if args.json else text)


def run(args) -> int:
    if args.capture and args.replay:
        raise VramkitError("--capture reads this machine; --replay serves a capture", "give one of them",
                           Exit.BAD_INPUT)
    if args.stop:
        return stop(args)
    if args.capture:
        return do_capture(args)
    if args.background:
        return background(args)
    return serve(args)
