"""Plain values for what NVML said about the GPUs at one moment (the "not available" type is core/na.py).

The NVML adapter (vramkit/adapters/nvml.py) fills these; the monitor, vram-safe and host tuning
read them. A value NVML could not give (not supported, GPU lost, driver missing, process gone) is a
`NotAvailable` carrying the reason, never 0: arithmetic on it raises, so it cannot pass for a
number by accident (same idea as nvitop's `NaType`, gpustat's `safenvml` returning None).

Which "used": NVML has two. Its v2 memory query (R510+ drivers) splits memory into
`total = reserved + used + free`, where `reserved` is what the driver and firmware set aside and
`used` is what contexts allocated: that `used` is what `nvidia-smi --query-gpu=memory.used`
prints. The v1 query's `used` is `total - free`, reserved included. vramkit calls
`total - free` "in use" (`in_use_bytes`): it is what no one else can allocate any more, so the
guard and the alerts count it; `nvml_used_bytes` carries the nvidia-smi figure beside it.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from vramkit.core.na import NA, NotAvailable, is_na


@dataclass(frozen=True)
class ProcessSample:
    pid: int
    used_bytes: int | NotAvailable           # NVML per-process usedGpuMemory
    name: str | NotAvailable                  # psutil's process name; N/A if it exited meanwhile
    kind: str = "compute"                     # "compute" | "graphics"


@dataclass(frozen=True)
class GpuSample:
    index: int
    name: str | NotAvailable = NA
    uuid: str | NotAvailable = NA
    total_bytes: int | NotAvailable = NA
    free_bytes: int | NotAvailable = NA
    nvml_used_bytes: int | NotAvailable = NA  # same as nvidia-smi --query-gpu=memory.used
    reserved_bytes: int | NotAvailable = NA   # driver/firmware reserve (v2 query only)
    memory_api: str | NotAvailable = NA       # "v2" | "v1": which NVML memory query answered
    util_percent: int | NotAvailable = NA
    temperature_c: int | NotAvailable = NA
    power_w: float | NotAvailable = NA
    power_limit_w: float | NotAvailable = NA
    processes: tuple[ProcessSample, ...] | NotAvailable = NA
    cpu_affinity: tuple[int, ...] | NotAvailable = NA   # the CPUs NVML calls nearest this GPU
    compute_capability: tuple[int, int] | NotAvailable = NA   # nvmlDeviceGetCudaComputeCapability (major, minor)
    error: NotAvailable | None = None         # set when the whole GPU could not be read (lost)

    @property
    def in_use_bytes(self) -> int | NotAvailable:
        """total - free: everything no one else can allocate, driver-reserved memory included."""
        if is_na(self.total_bytes) or is_na(self.free_bytes):
            return self.error if self.error is not None else NA
        return int(self.total_bytes) - int(self.free_bytes)

    @property
    def in_use_percent(self) -> float | NotAvailable:
        used = self.in_use_bytes
        if is_na(used) or not self.total_bytes:
            return self.error if self.error is not None else NA
        total = self.total_bytes
        return 100.0 * used / total if not is_na(total) else NA

    @property
    def lost(self) -> bool:
        return bool(self.error is not None and self.error.gpu_lost)


@dataclass(frozen=True)
class Snapshot:
    """One reading of every GPU. `unavailable` is set when NVML itself could not be used."""

    time_s: float                              # unix time of the reading
    gpus: tuple[GpuSample, ...] = ()
    driver_version: str | NotAvailable = NA
    unavailable: NotAvailable | None = None    # no driver / NVML library / init failed
    query_s: float = 0.0                       # how long the reading took

    @property
    def status(self) -> str:
        """'ok' | 'no_nvml' | 'no_gpu' | 'gpu_lost' (NVML: GPU is lost) | 'gpu_unreadable'."""
        if self.unavailable is not None:
            return "no_nvml"
        if not self.gpus:
            return "no_gpu"
        if any(g.lost for g in self.gpus):
            return "gpu_lost"
        if any(g.error is not None for g in self.gpus):
            return "gpu_unreadable"
        return "ok"


def to_jsonable(value: Any) -> Any:
    """Dataclasses -> dicts, NotAvailable -> None, tuples -> lists; adds in_use_* for GPUs."""
    if isinstance(value, NotAvailable):
        return None
    if isinstance(value, GpuSample):
        out = {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
        out["error"] = value.error.reason if value.error is not None else None
        out["in_use_bytes"] = to_jsonable(value.in_use_bytes)
        pct = value.in_use_percent
        out["in_use_percent"] = None if is_na(pct) else round(pct, 2)
        return out
    if isinstance(value, Snapshot):
        return {
            "time_s": value.time_s,
            "status": value.status,
            "reason": value.unavailable.reason if value.unavailable is not None else None,
            "driver_version": to_jsonable(value.driver_version),
            "query_s": round(value.query_s, 6),
            "gpus": [to_jsonable(g) for g in value.gpus],
        }
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {k: to_jsonable(v) for k, v in value.items()}
    return value


__all__ = ["NA", "GpuSample", "NotAvailable", "ProcessSample", "Snapshot", "is_na", "to_jsonable"]
