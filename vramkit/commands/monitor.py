"""`vramkit monitor`: live VRAM screen with alerts, session statistics and a sample log.

Exit codes: 0 normal end (Ctrl-C or --duration), 2 no NVML / no GPU (cannot tell),
3 a GPU was lost during the run.  `--once --json` prints one JSON object and exits the same way.
`--prometheus PORT` runs headless: no screen, Prometheus metrics of the card at
http://127.0.0.1:PORT/metrics, read from NVML at each scrape (`vramkit_gpu_up 0` without a GPU, exit 0).
"""
from __future__ import annotations

import argparse
import csv
import datetime as _dt
import json
import os
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.live import Live

from vramkit.adapters import nvml
from vramkit.core.gpu import vram
from vramkit.core.gpu.snapshot import Snapshot, to_jsonable
from vramkit.core.gpu.vram_text import compact_lines
from vramkit.errors import Exit, VramkitError
from vramkit.ui.vram_screen import plain_text, screen, stats_table

ENV_THRESHOLDS = "VRAMKIT_ALERT_THRESHOLDS"
MAX_ALERT_LINES = 6          # alerts kept on screen; all of them also go to stderr when not live


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("monitor", help="live VRAM screen per GPU with alerts, stats and a log",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--interval", type=float, default=1.0,
                   help="seconds between samples, steady cadence (default 1.0)")
    p.add_argument("--duration", type=float, default=None,
                   help="stop after this many seconds (default: until Ctrl-C)")
    p.add_argument("--once", action="store_true", help="one sample, print it, exit")
    p.add_argument("--json", action="store_true",
                   help="machine-readable: with --once one JSON object; live: one JSON line per sample")
    p.add_argument("--log", type=Path, default=None,
                   help="write every sample to FILE (.csv -> CSV, else JSON lines)")
    p.add_argument("--log-format", choices=("csv", "jsonl"), default=None,
                   help="override the format chosen from the --log suffix")
    p.add_argument("--thresholds", default=None,
                   help=f"alert lines in percent, e.g. 85,90,95 (env {ENV_THRESHOLDS}; default 85,90,95)")
    p.add_argument("--cooldown", type=float, default=vram.DEFAULT_COOLDOWN_S,
                   help="seconds before the same line on the same GPU may alert again (default 30)")
    p.add_argument("--bell", action="store_true", help="ring the terminal bell on each alert")
    p.add_argument("--gpu", default="all", help="GPU index to show, or 'all' (default)")
    p.add_argument("--top", type=int, default=5, help="processes shown per GPU (default 5)")
    p.add_argument("--prometheus", type=int, metavar="PORT", default=None,
                   help="headless: serve Prometheus metrics on PORT (/metrics) until Ctrl-C or --duration")
    p.add_argument("--prometheus-addr", default="127.0.0.1",
                   help="address for --prometheus (default %(default)s; 0.0.0.0 for a remote Prometheus)")
    p.set_defaults(func=run)


def _prometheus(args: argparse.Namespace) -> int:
    """Headless exporter: the dashboard's GPU collector on its own small HTTP server."""
    try:
        from prometheus_client import start_http_server

        from vramkit.dashboard.metrics import registry
    except ImportError as e:
        raise VramkitError(f"--prometheus needs {e.name}", "pip install 'vramkit[dashboard]'", Exit.BAD_INPUT) from None
    from vramkit.dashboard.sources import LiveSource

    if not 0 < args.prometheus < 65536:
        raise VramkitError(f"--prometheus {args.prometheus} is not a port", "e.g. --prometheus 9835", Exit.BAD_INPUT)
    source = LiveSource()
    try:
        server, _thread = start_http_server(args.prometheus, addr=args.prometheus_addr,
                                           registry=registry(source.snapshot, source.predicted_peak))
    except OSError as e:
        raise VramkitError(f"cannot serve on {args.prometheus_addr}:{args.prometheus} ({e.strerror})",
                           "pick a free port", Exit.PORT_BUSY) from None
    first = nvml.read_snapshot(with_processes=False)
    seen = (f"{len(first.gpus)} GPU(s)" if first.unavailable is None
            else f"no GPU ({first.unavailable.reason}): vramkit_gpu_up is 0")
    print(f"Prometheus metrics at http://{args.prometheus_addr}:{args.prometheus}/metrics; {seen}", flush=True)
    try:
        if args.duration is not None:
            time.sleep(args.duration)
        else:
            while True:
                time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        server.shutdown()
        server.server_close()
    return 0


def _thresholds(args: argparse.Namespace) -> tuple[float, ...]:
    text = args.thresholds or os.environ.get(ENV_THRESHOLDS) or ""
    if not text:
        return vram.DEFAULT_THRESHOLDS_PCT
    try:
        return vram.parse_thresholds(text)
    except ValueError as e:
        src = "--thresholds" if args.thresholds else ENV_THRESHOLDS
        raise VramkitError(f"{src}: {e}", "give percentages like 85,90,95", Exit.BAD_INPUT) from None


def _gpu_filter(text: str) -> int | None:
    if text == "all":
        return None
    try:
        return int(text)
    except ValueError:
        raise VramkitError(f"--gpu {text!r} is not an index", "use e.g. --gpu 0 or --gpu all",
                           Exit.BAD_INPUT) from None


def _select(snap: Snapshot, gpu: int | None) -> Snapshot:
    if gpu is None or snap.unavailable is not None:
        return snap
    chosen = tuple(g for g in snap.gpus if g.index == gpu)
    if not chosen and snap.gpus:
        raise VramkitError(f"there is no GPU {gpu} (NVML sees {len(snap.gpus)})",
                           f"use --gpu 0..{len(snap.gpus) - 1} or --gpu all", Exit.BAD_INPUT)
    return Snapshot(snap.time_s, chosen, snap.driver_version, snap.unavailable, snap.query_s)


class SampleLog:
    """--log FILE: CSV (one row per GPU per sample) or JSON lines (one line per sample)."""

    def __init__(self, path: Path, fmt: str | None):
        self.fmt = fmt or ("csv" if path.suffix.lower() == ".csv" else "jsonl")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._fh = path.open("a", newline="", encoding="utf-8")
        except OSError as e:
            raise VramkitError(f"cannot write the log {path}: {e.strerror}",
                               "pick a writable path for --log", Exit.BAD_FILE) from None
        self._csv = None
        if self.fmt == "csv":
            self._csv = csv.DictWriter(self._fh, fieldnames=vram.LOG_FIELDS)
            if self._fh.tell() == 0:
                self._csv.writeheader()

    def write(self, snap: Snapshot) -> None:
        rows = vram.log_rows(snap)
        if self._csv is not None:
            self._csv.writerows(rows)
        else:
            head = {k: rows[0][k] for k in ("time", "time_s")}
            gpus = [{k: v for k, v in r.items() if k not in ("time", "time_s")} for r in rows
                    if r.get("gpu") is not None]
            self._fh.write(json.dumps(head | {"status": snap.status, "gpus": gpus}) + "\n")
        self._fh.flush()

    def close(self) -> None:
        self._fh.close()


def _once(args: argparse.Namespace, gpu: int | None) -> int:
    snap = _select(nvml.read_snapshot(), gpu)
    code = vram.snapshot_exit(snap)
    if args.log:
        log = SampleLog(args.log, args.log_format)
        log.write(snap)
        log.close()
    if args.json:
        out = to_jsonable(snap) | {"exit_code": int(code), "in_use_means": vram.USED_NOTE}
        if snap.unavailable is not None:
            out["todo"] = vram.NO_NVML_TODO
        print(json.dumps(out, indent=2))
        return int(code)
    if snap.unavailable is not None:
        raise VramkitError(f"NVML not available: {snap.unavailable.reason}", vram.NO_NVML_TODO,
                           Exit.CANNOT_TELL)
    sys.stdout.write(plain_text(screen(snap, top_processes=args.top),
                                width=Console().width if sys.stdout.isatty() else 100))
    return int(code)


def run(args: argparse.Namespace) -> int:
    if args.interval <= 0:
        raise VramkitError(f"--interval {args.interval} must be above 0", "e.g. --interval 0.5",
                           Exit.BAD_INPUT)
    if args.prometheus is not None:
        return _prometheus(args)
    thresholds = _thresholds(args)
    gpu = _gpu_filter(args.gpu)
    if args.once:
        return _once(args, gpu)

    first = _select(nvml.read_snapshot(), gpu)
    if first.unavailable is not None or not first.gpus:
        if args.json:
            print(json.dumps(to_jsonable(first) | {"exit_code": int(Exit.CANNOT_TELL)}))
            return int(Exit.CANNOT_TELL)
        reason = first.unavailable.reason if first.unavailable is not None else "NVML sees no GPU"
        raise VramkitError(f"nothing to monitor: {reason}", vram.NO_NVML_TODO, Exit.CANNOT_TELL)

    tracker = vram.AlertTracker(thresholds, cooldown_s=args.cooldown)
    stats = vram.SessionStats(thresholds)
    log = SampleLog(args.log, args.log_format) if args.log else None
    console = Console()
    live_screen = console.is_terminal and not args.json
    alert_lines: list[str] = []
    lost_seen = False
    snap = first
    start = deadline = time.monotonic()
    live = Live(console=console, auto_refresh=False, screen=False) if live_screen else None
    try:
        if live:
            live.start()
        while True:
            alerts = [a for g in snap.gpus for a in tracker.update(g, snap.time_s)]
            stats.add(snap, alerts)
            lost_seen = lost_seen or any(g.lost for g in snap.gpus)
            if log:
                log.write(snap)
            for a in alerts:
                line = a.line()
                alert_lines = (alert_lines + [line])[-MAX_ALERT_LINES:]
                if not live:
                    print(line, file=sys.stderr)
                if args.bell:
                    console.bell()
            clock = _dt.datetime.fromtimestamp(snap.time_s).strftime("%H:%M:%S")
            if live:
                live.update(screen(snap, stats, alert_lines, args.top, clock), refresh=True)
            elif args.json:
                print(json.dumps(to_jsonable(snap)), flush=True)
            else:                     # not a terminal (pipe, tee, file): one plain line per GPU
                print("\n".join(compact_lines(snap, clock)), flush=True)
            now = time.monotonic()
            if args.duration is not None and now - start >= args.duration:
                break
            deadline = vram.next_deadline(deadline, now, args.interval)
            time.sleep(max(0.0, deadline - time.monotonic()))
            snap = _select(nvml.read_snapshot(), gpu)
    except KeyboardInterrupt:
        pass                          # Ctrl-C is how a live monitor ends: print the summary
    finally:
        if live:
            live.stop()
        if log:
            log.close()
    summary = stats.to_dict() | {"suppressed_by_cooldown": tracker.suppressed,
                                 "exit_code": int(Exit.GPU_LOST if lost_seen else Exit.OK)}
    if args.json:
        print(json.dumps({"summary": summary}))
    else:
        if not live:                  # the live screen's last frame already shows the table
            console.print(stats_table(stats))
        if lost_seen:
            console.print("a GPU was lost during the run (NVML: GPU is lost): check dmesg / nvidia-smi",
                          highlight=False)
    return summary["exit_code"]
