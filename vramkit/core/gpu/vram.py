"""Pure logic of the VRAM monitor and the vram-safe guard: thresholds, alerts, statistics, verdicts.

Everything takes plain values (Snapshots, numbers, times in seconds) and returns plain values;
the commands do the NVML reading, the clock, the terminal and the files.
Percentages are of the GPU's total memory and count what is "in use" = total - free (driver-reserved
memory included; see vramkit/core/gpu/snapshot.py).
"""
from __future__ import annotations

import datetime as _dt
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from vramkit.core.gpu.snapshot import GpuSample, Snapshot, is_na
from vramkit.core.na import NotAvailable
from vramkit.errors import Exit
from vramkit.units import bytes2human, human2bytes


def _known(value: int | NotAvailable) -> int:
    """A byte count the caller knows NVML gave (it read the percent made from it)."""
    if is_na(value):
        raise ValueError(f"a byte count read as not available ({value.reason}) beside a known percent")
    return int(value)

DEFAULT_THRESHOLDS_PCT = (85.0, 90.0, 95.0)   # the alert lines
DEFAULT_COOLDOWN_S = 30.0
# A value must fall this many points under a line before crossing it again counts as a new
# excursion: stops 89.9 / 90.1 / 89.9 from being three crossings.
DEFAULT_HYSTERESIS_PCT = 2.0
DEFAULT_GUARD_FRACTION = 0.75                 # the design's "VRAM < 12 GB (75 %)" on a 16 GB card


# --- thresholds -----------------------------------------------------------------------------------

def parse_thresholds(text: str) -> tuple[float, ...]:
    """'85,90,95' or '85%, 90%' -> (85.0, 90.0, 95.0), sorted; each in (0, 100]."""
    out = []
    for part in re.split(r"[,\s]+", text.strip()):
        if not part:
            continue
        try:
            value = float(part.rstrip("%"))
        except ValueError:
            raise ValueError(f"not a percentage: {part!r} (use e.g. 85,90,95)") from None
        if not 0 < value <= 100:
            raise ValueError(f"threshold {part!r} is outside 0-100 %")
        out.append(value)
    if not out:
        raise ValueError("no thresholds given (use e.g. 85,90,95)")
    return tuple(sorted(set(out)))


@dataclass(frozen=True)
class Threshold:
    """What vram-safe compares against: a byte count, or a fraction of each GPU's total."""

    limit_bytes: int | None = None
    fraction: float | None = None
    source: str = ""                        # where it came from, for the one output line

    def limit_for(self, total_bytes: int) -> int:
        if self.limit_bytes is not None:
            return self.limit_bytes
        return int(total_bytes * (self.fraction if self.fraction is not None else DEFAULT_GUARD_FRACTION))

    def describe(self) -> str:
        if self.limit_bytes is not None:
            return f"{bytes2human(self.limit_bytes)} ({self.source})" if self.source else bytes2human(self.limit_bytes)
        pct = f"{100 * (self.fraction or 0):g} %"
        return f"{pct} ({self.source})" if self.source else pct


def parse_threshold(text: str, source: str = "--threshold") -> Threshold:
    """'75%' -> a fraction of each GPU's total; '12GiB' / '12 GB' / bytes -> a byte limit."""
    s = text.strip()
    if s.endswith("%"):
        try:
            pct = float(s[:-1])
        except ValueError:
            raise ValueError(f"not a percentage: {text!r}") from None
        if not 0 < pct <= 100:
            raise ValueError(f"threshold {text!r} is outside 0-100 %")
        return Threshold(fraction=pct / 100.0, source=source)
    limit = human2bytes(s)
    if limit <= 0:
        raise ValueError(f"threshold {text!r} must be above 0")
    if re.fullmatch(r"\s*[0-9.]+\s*", s):
        raise ValueError(f"threshold {text!r} has no unit (write 12GiB or 75%)")
    return Threshold(limit_bytes=limit, source=source)


def budget_thresholds(running: list[dict[str, Any]]) -> dict[int | None, Threshold]:
    """Per-GPU thresholds from the launcher's run-state files (key vram_budget_bytes).

    Services sharing a GPU add up. Key None = every GPU (a service that did not record its GPUs).
    """
    per_gpu: dict[int | None, int] = {}
    names: dict[int | None, list[str]] = {}
    for entry in running:
        budget = entry.get("vram_budget_bytes")
        if budget is None:
            continue
        who = str(entry.get("name") or entry.get("preset") or "?")[:60]
        # a hand-edited or torn record is said, never a traceback whose exit 1 reads as WARNING (issue 20)
        if isinstance(budget, bool) or not isinstance(budget, (int, float)) or not math.isfinite(budget) \
                or budget <= 0:
            raise ValueError(f"run record {who!r}: vram_budget_bytes is {budget!r}, not a number of bytes > 0")
        indices = entry.get("gpu_indices") or [None]
        if not isinstance(indices, list) or not all(
                i is None or (isinstance(i, int) and not isinstance(i, bool) and i >= 0) for i in indices):
            raise ValueError(f"run record {who!r}: gpu_indices is {indices!r}, not a list of GPU indices")
        for idx in indices:
            per_gpu[idx] = per_gpu.get(idx, 0) + int(budget)
            names.setdefault(idx, []).append(str(entry.get("preset") or entry.get("name") or "?"))
    return {idx: Threshold(limit_bytes=b, source="budget of running preset " + "+".join(names[idx]))
            for idx, b in per_gpu.items()}


# --- alerts ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Alert:
    time_s: float
    gpu_index: int
    threshold_pct: float
    percent: float
    in_use_bytes: int
    total_bytes: int

    def line(self, tz: _dt.tzinfo | None = None) -> str:
        stamp = _dt.datetime.fromtimestamp(self.time_s, tz).strftime("%Y-%m-%d %H:%M:%S")
        return (f"{stamp}  ALERT GPU {self.gpu_index} above {self.threshold_pct:g} %: "
                f"{bytes2human(self.in_use_bytes)} of {bytes2human(self.total_bytes)} "
                f"({self.percent:.1f} %)")


@dataclass
class _LineState:
    above: bool = False          # inside an excursion over this line
    alerted: bool = False        # this excursion already produced its alert
    last_alert_s: float | None = None


@dataclass
class AlertTracker:
    """Turns a stream of usage percentages into alerts, one per excursion over each line.

    An excursion starts when usage reaches a line and ends when it falls `hysteresis_pct` under it.
    Within `cooldown_s` of the last alert on the same line and GPU, a new excursion stays quiet;
    if it is still above when the cooldown ends, it alerts then.
    """

    thresholds_pct: tuple[float, ...] = DEFAULT_THRESHOLDS_PCT
    cooldown_s: float = DEFAULT_COOLDOWN_S
    hysteresis_pct: float = DEFAULT_HYSTERESIS_PCT
    _state: dict[tuple[int, float], _LineState] = field(default_factory=dict)
    suppressed: int = 0          # excursions held back by the cooldown (at their start)

    def update(self, gpu: GpuSample, now_s: float) -> list[Alert]:
        pct = gpu.in_use_percent
        if is_na(pct):
            return []              # unknown is not "below": keep each line's state as it was
        alerts = []
        for th in self.thresholds_pct:
            st = self._state.setdefault((gpu.index, th), _LineState())
            if pct >= th:
                if not st.above:
                    st.above, st.alerted = True, False
                    if st.last_alert_s is not None and now_s - st.last_alert_s < self.cooldown_s:
                        self.suppressed += 1
                if not st.alerted and (st.last_alert_s is None
                                       or now_s - st.last_alert_s >= self.cooldown_s):
                    st.alerted, st.last_alert_s = True, now_s
                    alerts.append(Alert(now_s, gpu.index, th, pct, _known(gpu.in_use_bytes),
                                        _known(gpu.total_bytes)))
            elif pct < th - self.hysteresis_pct:
                st.above = False
        return alerts


# --- session statistics ---------------------------------------------------------------------------

@dataclass
class GpuStats:
    index: int
    name: str = ""
    total_bytes: int | None = None
    samples: int = 0
    missing: int = 0             # samples where memory could not be read
    peak_bytes: int | None = None
    peak_percent: float | None = None
    sum_bytes: int = 0
    sum_percent: float = 0.0
    seconds_above: dict[float, float] = field(default_factory=dict)
    alerts: int = 0
    temp_min_c: int | None = None
    temp_max_c: int | None = None
    _last: tuple[float, float] | None = None   # (time, percent) of the previous good sample

    @property
    def mean_bytes(self) -> float | None:
        return self.sum_bytes / self.samples if self.samples else None

    @property
    def mean_percent(self) -> float | None:
        return self.sum_percent / self.samples if self.samples else None


@dataclass
class SessionStats:
    """Peak, mean (per sample: the cadence is steady), time above each line, alerts, temperatures.

    Time above a line: each interval between two samples counts toward the lines the earlier
    sample was at or above (a step function; an interval over a missing sample counts nowhere).
    """

    thresholds_pct: tuple[float, ...] = DEFAULT_THRESHOLDS_PCT
    gpus: dict[int, GpuStats] = field(default_factory=dict)
    started_s: float | None = None
    ended_s: float | None = None

    def add(self, snap: Snapshot, alerts: Sequence[Alert] = ()) -> None:
        if self.started_s is None:
            self.started_s = snap.time_s
        self.ended_s = snap.time_s
        for g in snap.gpus:
            st = self.gpus.setdefault(g.index, GpuStats(g.index, seconds_above={t: 0.0 for t in self.thresholds_pct}))
            if not is_na(g.name):
                st.name = g.name
            if st._last is not None:
                t_prev, pct_prev = st._last
                for th in self.thresholds_pct:
                    if pct_prev >= th:
                        st.seconds_above[th] += max(0.0, snap.time_s - t_prev)
            pct = g.in_use_percent
            if is_na(pct):
                st.missing += 1
                st._last = None
            else:
                used = _known(g.in_use_bytes)
                st.total_bytes = _known(g.total_bytes)
                st.samples += 1
                st.sum_bytes += used
                st.sum_percent += pct
                if st.peak_bytes is None or used > st.peak_bytes:
                    st.peak_bytes, st.peak_percent = used, pct
                st._last = (snap.time_s, pct)
            if not is_na(g.temperature_c):
                t = int(g.temperature_c)
                st.temp_min_c = t if st.temp_min_c is None else min(st.temp_min_c, t)
                st.temp_max_c = t if st.temp_max_c is None else max(st.temp_max_c, t)
        for a in alerts:
            if a.gpu_index in self.gpus:
                self.gpus[a.gpu_index].alerts += 1

    def to_dict(self) -> dict[str, Any]:
        return {
            "duration_s": (self.ended_s - self.started_s)
            if self.started_s is not None and self.ended_s is not None else 0.0,
            "gpus": [{
                "index": s.index, "name": s.name, "total_bytes": s.total_bytes,
                "samples": s.samples, "missing_samples": s.missing,
                "peak_bytes": s.peak_bytes,
                "peak_percent": None if s.peak_percent is None else round(s.peak_percent, 2),
                "mean_bytes": None if s.mean_bytes is None else int(s.mean_bytes),
                "mean_percent": None if s.mean_percent is None else round(s.mean_percent, 2),
                "seconds_above": {f"{th:g}": round(v, 3) for th, v in s.seconds_above.items()},
                "alerts": s.alerts, "temp_min_c": s.temp_min_c, "temp_max_c": s.temp_max_c,
            } for s in sorted(self.gpus.values(), key=lambda s: s.index)],
        }


# --- cadence --------------------------------------------------------------------------------------

def next_deadline(deadline_s: float, now_s: float, interval_s: float) -> float:
    """The next sample time on a steady grid: deadline + interval, skipping slots already missed.

    Sleeping `deadline - now` afterwards is "the interval minus the time the query took"; a query
    slower than the interval skips to the next free slot instead of bunching samples.
    """
    nxt = deadline_s + interval_s
    if nxt <= now_s:
        nxt += ((now_s - nxt) // interval_s + 1) * interval_s
    return nxt


# --- exit codes -----------------------------------------------------------------------------------

def snapshot_exit(snap: Snapshot) -> Exit:
    """0 all readable; 2 cannot tell (no NVML, no GPU, unreadable); 3 a GPU is lost."""
    if snap.status == "ok":
        return Exit.OK
    if any(g.lost for g in snap.gpus):
        return Exit.GPU_LOST
    return Exit.CANNOT_TELL


NO_NVML_TODO = ("install/load the NVIDIA driver (nvidia-smi must work), "
                "or run this on the GPU host")


# --- vram-safe ------------------------------------------------------------------------------------

# WARNING starts this far under the threshold. Why 3 %: a preset running as planned sits at ~95.6 % of
# the budget the launcher records (in use before start + planned peak x 1.05): the optimized preset peaked
# at 14.33 GiB (measured, benchmarks/calibration/opt-f085-16g.json) against 1.05 x its 14.28 GiB plan.
# A line at 97 % stays quiet in normal running and speaks when less than ~0.45 GiB of a 15 GiB budget is
# left. Derived from that measurement; the 3 % itself is a choice, not a measurement.
WARN_HEADROOM = 0.03

VERDICT_CODES = {"ok": Exit.VRAM_OK, "warning": Exit.VRAM_WARNING, "critical": Exit.VRAM_CRITICAL,
                 "unknown": Exit.VRAM_UNKNOWN}
# The host's verdict is its worst GPU's, in this order: an over-budget GPU is known for sure, so it wins;
# an unreadable one beats a warning, since it may be over.
SEVERITY = ("ok", "warning", "unknown", "critical")


@dataclass(frozen=True)
class GpuVerdict:
    index: int
    verdict: str                      # "ok" | "warning" | "critical" | "unknown"
    in_use_bytes: int | None
    nvml_used_bytes: int | None
    total_bytes: int | None
    limit_bytes: int | None
    threshold: str
    reason: str = ""
    warn_bytes: int | None = None


@dataclass(frozen=True)
class GuardResult:
    code: Exit
    line: str
    gpus: tuple[GpuVerdict, ...]

    @property
    def verdict(self) -> str:
        return {int(c): v for v, c in VERDICT_CODES.items()}[int(self.code)]

    def to_dict(self) -> dict[str, Any]:
        return {
            "exit_code": int(self.code),
            "verdict": self.verdict,
            "line": self.line,
            "codes": "0 OK, 1 WARNING (over the warn line, within "
                     f"{100 * WARN_HEADROOM:g} % of the threshold), 2 CRITICAL (over the threshold), 3 UNKNOWN",
            "reads": "in_use_bytes = total - free (NVML), driver-reserved memory included; "
                     "nvml_used_bytes = NVML used = nvidia-smi memory.used",
            "gpus": [vars(v) for v in self.gpus],
        }


USED_NOTE = "in use = total - free, driver-reserved memory included"


def warn_line(limit_bytes: int) -> int:
    return int(limit_bytes * (1.0 - WARN_HEADROOM))


def vram_safe(snap: Snapshot, thresholds: dict[int | None, Threshold],
              gpu: int | None = None) -> GuardResult:
    """The monitoring-plugin verdict for the selected GPUs (each against its own threshold):

    0 OK        every GPU at or under its warn line (WARN_HEADROOM under the threshold)
    1 WARNING   a GPU over its warn line, none over its threshold: close to the budget
    2 CRITICAL  a GPU over its threshold (the running preset's budget, or --threshold)
    3 UNKNOWN   no NVML, no GPU, the asked-for GPU absent, or a GPU unreadable/lost and none over

    `thresholds` maps a GPU index (or None = any GPU) to its Threshold.
    """
    def unknown(why: str) -> GuardResult:
        return GuardResult(Exit.VRAM_UNKNOWN, f"vram-safe: UNKNOWN: {why}", ())

    if snap.unavailable is not None:
        return unknown(f"{snap.unavailable.reason} -> {NO_NVML_TODO}")
    if not snap.gpus:
        return unknown("NVML sees no GPU -> check nvidia-smi / CUDA_VISIBLE_DEVICES / the container's --gpus")
    chosen = [g for g in snap.gpus if gpu is None or g.index == gpu]
    if not chosen:
        return unknown(f"there is no GPU {gpu} (this host has {len(snap.gpus)}: 0-{len(snap.gpus) - 1})")
    verdicts = []
    for g in chosen:
        th = thresholds.get(g.index) or thresholds.get(None) or Threshold(fraction=DEFAULT_GUARD_FRACTION,
                                                                          source="default")
        used = g.in_use_bytes
        nvml_used = None if is_na(g.nvml_used_bytes) else int(g.nvml_used_bytes)
        if is_na(used):
            reason = g.error.reason if g.error is not None else used.reason
            verdicts.append(GpuVerdict(g.index, "unknown", None, nvml_used, None, None, th.describe(), reason))
            continue
        limit = th.limit_for(_known(g.total_bytes))
        warn = warn_line(limit)
        verdict = "critical" if used > limit else "warning" if used > warn else "ok"
        verdicts.append(GpuVerdict(g.index, verdict, int(used), nvml_used, _known(g.total_bytes), limit,
                                   th.describe(), warn_bytes=warn))
    worst = max((v.verdict for v in verdicts), key=SEVERITY.index)
    parts = []
    for v in verdicts:
        if v.verdict == "unknown":
            parts.append(f"GPU {v.index} unreadable ({v.reason})")
            continue
        op = {"critical": ">", "warning": f"> warn line {bytes2human(v.warn_bytes)}, <=", "ok": "<="}[v.verdict]
        parts.append(f"GPU {v.index} {bytes2human(v.in_use_bytes)} {op} {bytes2human(v.limit_bytes)}"
                     f" of {bytes2human(v.total_bytes)}")
    line = (f"vram-safe: {worst.upper()}: " + "; ".join(parts) + f" [threshold {verdicts[0].threshold}; "
            f"{USED_NOTE}]")
    return GuardResult(VERDICT_CODES[worst], line, tuple(verdicts))


# --- sample log -----------------------------------------------------------------------------------

LOG_FIELDS = ("time", "time_s", "gpu", "in_use_bytes", "nvml_used_bytes", "total_bytes",
              "util_percent", "temperature_c", "power_w", "status")


def log_rows(snap: Snapshot) -> list[dict[str, Any]]:
    """One row per GPU for the --log file; None where the value was not available."""
    stamp = _dt.datetime.fromtimestamp(snap.time_s, _dt.UTC).isoformat(timespec="milliseconds")
    if snap.unavailable is not None or not snap.gpus:
        return [dict.fromkeys(LOG_FIELDS) | {"time": stamp, "time_s": round(snap.time_s, 3),
                                             "status": snap.status}]

    def val(v: Any) -> Any:
        return None if is_na(v) else v

    return [{
        "time": stamp, "time_s": round(snap.time_s, 3), "gpu": g.index,
        "in_use_bytes": val(g.in_use_bytes), "nvml_used_bytes": val(g.nvml_used_bytes),
        "total_bytes": val(g.total_bytes), "util_percent": val(g.util_percent),
        "temperature_c": val(g.temperature_c),
        "power_w": None if is_na(g.power_w) else round(g.power_w, 1),
        "status": "lost" if g.lost else ("error" if g.error is not None else "ok"),
    } for g in snap.gpus]
