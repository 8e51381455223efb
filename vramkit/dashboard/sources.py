"""Where each panel's data comes from: the live system (NVML, the kit's state record, the running
SGLang server, bench result files) or a capture of one (`vramkit dashboard --capture DIR`, replayed
with `--replay DIR`). Both answer the same five questions with the same JSON, so the page cannot tell
them apart except by `meta()`, which it shows.
"""
from __future__ import annotations

import json
import platform
import re
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil

from vramkit import __version__, catalog
from vramkit.adapters import nvml
from vramkit.adapters.sglang_http import SglangClient
from vramkit.adapters.state import read_running, state_dir
from vramkit.bench.summary import HEADLINES, headline
from vramkit.core.gpu import vram
from vramkit.core.gpu.snapshot import is_na, to_jsonable
from vramkit.core.sglang_log import parse
from vramkit.dashboard import planning
from vramkit.dashboard.view import (
    history_point,
    predicted_vs_actual,
    server_memory,
    trim_history,
)
from vramkit.errors import VramkitError
from vramkit.launch.resolve import host_available, nvml_gpu

HISTORY_WINDOW_S = 600.0     # the live panel's "short history": ten minutes
HISTORY_MAX_POINTS = 600
HISTORY_MIN_STEP_S = 1.0
SGLANG_DEFAULT_URL = f"http://127.0.0.1:{catalog.sglang().port}"
# SGLang's own Prometheus series the server panel shows (only with --enable-metrics)
SGLANG_SERIES = ("sglang:num_used_tokens", "sglang:token_usage", "sglang:num_running_reqs",
                 "sglang:num_queue_reqs", "sglang:cache_hit_rate", "sglang:gen_throughput",
                 "sglang:max_total_num_tokens")
BENCH_DIR = catalog.CONFIG_DIR.parent / "benchmarks" / "results"


def parse_sglang_metrics(text: str | None) -> dict[str, float]:
    """The SGLANG_SERIES values from SGLang's /metrics text (first sample of each)."""
    if not text:
        return {}
    # optional: a GPU host's Python may lack prometheus-client, and only this panel's extra needs it
    from prometheus_client.parser import text_string_to_metric_families  # noqa: PLC0415

    out: dict[str, float] = {}
    try:
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                if s.name in SGLANG_SERIES and s.name not in out:
                    out[s.name] = float(s.value)
    except ValueError:
        return {}
    return out


def bench_run_view(result: dict, path: str) -> dict:
    """One bench result file as the bench panel charts it."""
    s = result.get("summary") or {}
    conc = [{"x": lv.get("concurrency"), "y": lv.get("decode_tok_s_aggregate")}
            for lv in (s.get("concurrency") or {}).get("levels", []) if lv.get("decode_tok_s_aggregate")]
    ctx = [{"prompt_tokens": p.get("prompt_tokens"), "ttft_s": p.get("ttft_s"), "decode_tok_s": p.get("decode_tok_s")}
           for p in (s.get("context") or {}).get("points", []) if p.get("ok")]
    return {"label": result.get("label") or Path(path).stem, "file": path, "date_utc": result.get("date_utc"),
            "device": (result.get("device") or {}).get("label"), "headline": headline(result),
            "concurrency": conc, "context": ctx}


def read_bench(dirs: list[Path]) -> dict:
    """Every `vramkit bench` result (schema vramkit.bench/*) under `dirs`, oldest first."""
    runs, skipped = [], []
    root = catalog.CONFIG_DIR.parent
    for d in dirs:
        for p in sorted(Path(d).glob("**/*.json")):
            try:
                data = json.loads(p.read_text())
            except (OSError, ValueError):
                skipped.append(str(p))
                continue
            if not isinstance(data, dict) or not str(data.get("schema", "")).startswith("vramkit.bench/"):
                continue
            rel = str(p.relative_to(root)) if p.is_relative_to(root) else str(p)
            runs.append(bench_run_view(data, rel))
    runs.sort(key=lambda r: (r["date_utc"] or "", r["label"]))
    return {"runs": runs, "headlines": [{"key": k, "label": lb, "unit": u, "better": b} for k, lb, u, b in HEADLINES],
            "skipped": skipped, "dirs": [str(d) for d in dirs]}


class LiveSource:
    """The panels from this machine, now."""

    mode = "live"

    def __init__(self, bench_dirs: list[Path] | None = None, sglang_url: str | None = None):
        self.bench_dirs = bench_dirs or [BENCH_DIR]
        self.sglang_url = sglang_url
        self._history: list[dict] = []
        self._lock = threading.Lock()
        self._prediction_cache: dict[tuple, dict] = {}

    # --- meta, catalog, plan -------------------------------------------------------------------
    def meta(self) -> dict:
        return {"mode": self.mode, "vramkit": __version__, "python": platform.python_version(),
                "host": platform.node(), "now_utc": datetime.now(UTC).isoformat(timespec="seconds")}

    def catalog(self) -> dict:
        return planning.catalog_view()

    def plan(self, raw: dict[str, str]) -> dict:
        return planning.plan_view(planning.parse_params(raw), nvml_gpu, host_available)

    # --- live card -----------------------------------------------------------------------------
    def snapshot(self):
        return nvml.read_snapshot()

    def live(self) -> dict:
        snap = to_jsonable(self.snapshot())
        with self._lock:
            last = self._history[-1]["time_s"] if self._history else None
            # the background sampler and the page both ask: one point per second at most
            if last is None or snap["time_s"] - last >= HISTORY_MIN_STEP_S:
                self._history = trim_history(self._history + [history_point(snap)], snap["time_s"],
                                             HISTORY_WINDOW_S, HISTORY_MAX_POINTS)
            history = list(self._history)
        return live_view(snap, history, read_running())

    # --- running server ------------------------------------------------------------------------
    def server(self) -> dict:
        records = read_running()
        record = records[0] if records else None
        url = self.sglang_url or (f"http://{record.get('host') or '127.0.0.1'}:{record['port']}"
                                  if record and record.get("port") else SGLANG_DEFAULT_URL)
        out: dict[str, Any] = {"url": url, "record": record, "records": len(records), "state_dir": str(state_dir())}
        with SglangClient(url, timeout_s=10.0) as client:
            health = client.health()
            out["health"] = health
            if health is None:
                out["running"] = False
                out["note"] = (f"no SGLang server answers at {url}"
                               + ("" if record else "; the kit has no running record "
                                                    "(start one with make start-qwen-optimized)"))
                return out
            out["running"] = True
            try:
                info = client.server_info()
            except VramkitError as e:
                info, out["server_info_error"] = None, e.what
            loads = client.loads()
            metrics = client.metrics_text()
        out["server_info"] = redact(info)
        out["loads"] = loads
        out["sglang_memory"] = server_memory(info, loads)
        out["sglang_metrics"] = parse_sglang_metrics(metrics)
        out["sglang_metrics_note"] = (None if metrics else "SGLang's /metrics is off (start it with --enable-metrics); "
                                      "KV tokens and requests come from /v1/loads")
        log_figs = _log_figures(record)
        out["log_figures"] = log_figs
        snap = self.snapshot()
        out["nvml"] = server_gpu_memory(snap, record)
        out.update(self.predict_running(record or {}, info, loads, log_figs, snap, out["nvml"]))
        return out

    def predict_running(self, record: dict, info: dict | None, loads: dict | None, log_figs: dict, snap,
                        nvml_view: dict) -> dict:
        params = planning.running_params(record, info, log_figs)
        if "gpu_free_gib" not in params:
            name = _nvml_card_name(snap)
            if name:
                params["gpu"] = name
        try:
            plan = planning.plan_view(params, None, host_available)
        except VramkitError as e:
            return {"plan": None, "plan_error": e.line(), "plan_request": params, "rows": []}
        rows = predicted_vs_actual(plan, plan["memory"], info, loads, nvml_view.get("bytes"),
                                   nvml_view.get("gpu_in_use_bytes"), record.get("vram_budget_bytes"))
        return {"plan": plan, "plan_request": params, "rows": rows}

    def predicted_peak(self) -> tuple[dict, int] | None:
        """(the running record, its plan's predicted peak in bytes), for /metrics; None when nothing runs.
        Re-planned once per record (name, started_at)."""
        records = read_running()
        if not records:
            return None
        record = records[0]
        key = (record.get("name"), record.get("started_at"))
        if key not in self._prediction_cache:
            srv = self.server()
            plan = srv.get("plan")
            if not plan:
                return None
            self._prediction_cache = {key: {"peak": plan["peak_vram_bytes"]}}
        return record, int(self._prediction_cache[key]["peak"])

    # --- bench ---------------------------------------------------------------------------------
    def bench(self) -> dict:
        return read_bench(self.bench_dirs)

    def metrics_registry(self):
        from vramkit.dashboard.metrics import registry  # noqa: PLC0415 - prometheus-client is optional for --capture

        return registry(self.snapshot, self.predicted_peak)


_SECRET_KEY = re.compile(r"api_key|secret|password|passwd|credential|auth", re.IGNORECASE)


def redact(info: dict | None) -> dict | None:
    """SGLang's server args carry its API keys (api_key, admin_api_key): never shown, never captured."""
    if info is None:
        return None
    return {k: ("<redacted>" if _SECRET_KEY.search(k) and isinstance(v, str) and v else v) for k, v in info.items()}


def budget_lines(records: list[dict]) -> dict[str, dict]:
    """Per GPU index, the vram-safe budget of the server the kit recorded on it (in use before its start +
    the planned peak x 1.05): the line the card's in-use should stay under, drawn on the live bar."""
    out: dict[str, dict] = {}
    for rec in records:
        if rec.get("vram_budget_bytes") is None:
            continue
        for idx in rec.get("gpu_indices") or [0]:
            out[str(idx)] = {"bytes": int(rec["vram_budget_bytes"]), "service": rec.get("name")}
    return out


def live_view(snap: dict, history: list[dict], records: list[dict] | None = None) -> dict:
    status = snap.get("status")
    headline = {"ok": None, "no_nvml": "no GPU: NVML is not available here",
                "no_gpu": "no GPU: NVML sees none", "gpu_lost": "a GPU was lost (NVML: GPU is lost)",
                "gpu_unreadable": "a GPU did not answer NVML"}.get(str(status))
    return {"snapshot": snap, "history": history, "thresholds_pct": list(vram.DEFAULT_THRESHOLDS_PCT),
            "status_line": headline, "reason": snap.get("reason"),
            "todo": vram.NO_NVML_TODO if status in ("no_nvml", "no_gpu") else None,
            "in_use_means": vram.USED_NOTE, "budgets": budget_lines(records or [])}


def _nvml_card_name(snap) -> str | None:
    """The catalogued twin of the first card NVML sees, if any."""
    if snap.unavailable is not None or not snap.gpus:
        return None
    spec = catalog.gpu_by_nvml_name(str(snap.gpus[0].name))
    return spec.name if spec else None


def server_gpu_memory(snap, record: dict | None) -> dict:
    """NVML's measure of the server: its own processes' memory when the driver lists them with pids we can
    see (native runtime: the recorded pid and its children), and its first GPU's in-use memory."""
    if snap.unavailable is not None or not snap.gpus:
        return {"bytes": None, "gpu_in_use_bytes": None, "how": "no GPU visible to NVML here"}
    idx = ((record or {}).get("gpu_indices") or [0])[0]
    gpu = next((g for g in snap.gpus if g.index == idx), snap.gpus[0])
    used = gpu.in_use_bytes
    out = {"bytes": None, "gpu": gpu.index, "gpu_in_use_bytes": None if is_na(used) else int(used),
           "how": f"NVML: GPU {gpu.index}; the server's processes are not in its list (container, docker runtime)"}
    pids = _pid_tree((record or {}).get("pid"))
    if pids and not is_na(gpu.processes):
        mine = [p.used_bytes for p in gpu.processes if p.pid in pids and not is_na(p.used_bytes)]
        if mine:
            out.update(bytes=int(sum(mine)), how=f"NVML: the server's processes on GPU {gpu.index}")
    return out


def _pid_tree(pid) -> set[int]:
    if not pid:
        return set()
    try:
        p = psutil.Process(int(pid))
        return {p.pid} | {c.pid for c in p.children(recursive=True)}
    except (psutil.Error, ValueError):
        return set()


def _log_figures(record: dict | None) -> dict:
    path = (record or {}).get("log")
    if not path:
        return {}
    try:
        return dict(parse(Path(path).read_text(errors="replace")).values)
    except OSError:
        return {}
