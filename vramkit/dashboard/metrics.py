"""Prometheus metrics for the card, read from NVML at each scrape (the dashboard's /metrics and
`vramkit monitor --prometheus PORT`).

Names follow Prometheus's conventions (base units, `_bytes`, `_celsius`, `_ratio`); per GPU the labels
are index, name and uuid. `vramkit_gpu_memory_used_bytes` is what vramkit calls "in use": total - free,
the driver's reserve included (nvidia-smi's memory.used + memory.reserved; core/gpu/snapshot.py says
why). Without NVML or a GPU the only series is `vramkit_gpu_up 0`: an exporter on a machine without a
GPU answers, it does not fail. A value NVML could not read is left out, never exported as 0.
"""
from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from vramkit.core.gpu.snapshot import Snapshot, is_na

LABELS = ["index", "name", "uuid"]


class GpuCollector(Collector):
    def __init__(self, read_snapshot: Callable[[], Snapshot],
                 predicted_peak: Callable[[], tuple[dict, int] | None] | None = None):
        self.read_snapshot = read_snapshot
        self.predicted_peak = predicted_peak

    def collect(self):
        snap = self.read_snapshot()
        gpus = list(snap.gpus) if snap.unavailable is None else []
        if not gpus:
            yield GaugeMetricFamily("vramkit_gpu_up", "1 when NVML reads the GPU; 0 without NVML or a GPU", value=0)
            yield from self._plan()
            return
        up = GaugeMetricFamily("vramkit_gpu_up", "1 when NVML reads the GPU, 0 when it does not (lost)",
                               labels=LABELS)
        fams = {
            "used": GaugeMetricFamily("vramkit_gpu_memory_used_bytes",
                                      "GPU memory in use: total - free (nvidia-smi memory.used + reserved)",
                                      labels=LABELS),
            "total": GaugeMetricFamily("vramkit_gpu_memory_total_bytes", "GPU memory total (NVML)", labels=LABELS),
            "ratio": GaugeMetricFamily("vramkit_gpu_memory_used_ratio", "GPU memory in use / total", labels=LABELS),
            "temp": GaugeMetricFamily("vramkit_gpu_temperature_celsius", "GPU core temperature (NVML)", labels=LABELS),
            "util": GaugeMetricFamily("vramkit_gpu_utilization_ratio",
                                      "share of the last sample period a kernel ran (NVML utilization.gpu / 100)",
                                      labels=LABELS),
        }
        for g in gpus:
            labels = [str(g.index), "" if is_na(g.name) else str(g.name), "" if is_na(g.uuid) else str(g.uuid)]
            up.add_metric(labels, 0 if g.error is not None else 1)
            if g.error is not None:
                continue
            used, total = g.in_use_bytes, g.total_bytes
            if not is_na(used):
                fams["used"].add_metric(labels, int(used))
            if not is_na(total):
                fams["total"].add_metric(labels, int(total))
                if not is_na(used) and total:
                    fams["ratio"].add_metric(labels, int(used) / int(total))
            if not is_na(g.temperature_c):
                fams["temp"].add_metric(labels, float(g.temperature_c))
            if not is_na(g.util_percent):
                fams["util"].add_metric(labels, float(g.util_percent) / 100.0)
        yield up
        yield from fams.values()
        yield from self._plan()

    def _plan(self):
        if self.predicted_peak is None:
            return
        found = self.predicted_peak()
        if found is None:
            return
        record, peak = found
        fam = GaugeMetricFamily("vramkit_plan_predicted_peak_bytes",
                                "the running server's planned peak GPU memory per GPU (derived: the kit's planner)",
                                labels=["service", "preset", "model"])
        fam.add_metric([str(record.get("name") or ""), str(record.get("preset") or ""),
                        str(record.get("model") or "")], peak)
        yield fam


def registry(read_snapshot, predicted_peak=None) -> CollectorRegistry:
    """A registry with only the GPU collector (no process/platform collectors: the card is the subject)."""
    reg = CollectorRegistry(auto_describe=False)
    reg.register(GpuCollector(read_snapshot, predicted_peak))
    return reg
