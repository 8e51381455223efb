"""The one NVML choke point: every NVML call in vramkit goes through `query()` in this module.

NVML comes from the `nvidia-ml-py` package (module `pynvml`), never the old `pynvml` package.
Init is lazy (first query) and done once. A failing call becomes a `NotAvailable` carrying NVML's
reason and error code, never a 0 and never an exception, so a missing driver, a GPU that fell off
the bus (NVMLError_GpuIsLost) or a query the card does not support (NVMLError_NotSupported, e.g.
power on some laptops) shows as "N/A" in its place. Same approach as nvitop
(`nvitop/api/libnvml.py::nvmlQuery`, `NA`) and gpustat (`core.py::safenvml`, `InvalidGPU`).

Versioned queries, newest first, falling back when the driver lacks the symbol:
- memory: `nvmlDeviceGetMemoryInfo_v2` (R510+: total = reserved + used + free) then v1
  (used = total - free). See vramkit/core/gpu/snapshot.py for which "used" the kit reads.
- processes: `...RunningProcesses_v3`, `_v2`, then unversioned (nvitop does the same dance).
- temperature: `nvmlDeviceGetTemperatureV` (R565+) then the deprecated `nvmlDeviceGetTemperature`.
"""
from __future__ import annotations

import functools
import inspect
import os
import threading
import time
from typing import Any

import psutil
import pynvml  # provided by the nvidia-ml-py distribution

from vramkit.core.gpu.snapshot import GpuSample, NotAvailable, ProcessSample, Snapshot, is_na

_FUNCTION_NOT_FOUND = 13         # NVML_ERROR_FUNCTION_NOT_FOUND
_ARGUMENT_VERSION_MISMATCH = 25  # NVML_ERROR_ARGUMENT_VERSION_MISMATCH
_FALLBACK_CODES = {_FUNCTION_NOT_FOUND, _ARGUMENT_VERSION_MISMATCH}

_lock = threading.Lock()
_initialized = False


def reset() -> None:
    """Forget the init state (tests swap the NVML library underneath; a real run never calls it)."""
    global _initialized
    with _lock:
        _initialized = False


def _na(err: BaseException, what: str) -> NotAvailable:
    code = getattr(err, "value", None)
    if isinstance(err, getattr(pynvml, "NVMLLibraryMismatchError", ())):
        code = _FUNCTION_NOT_FOUND
    return NotAvailable(f"{what}: {err}", code if isinstance(code, int) else None)


def init() -> NotAvailable | None:
    """Start NVML once. None when it is up; else why not (no library, no driver, mismatch)."""
    global _initialized
    if _initialized:
        return None
    with _lock:
        if _initialized:
            return None
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as err:
            return _na(err, "NVML did not start")
        except OSError as err:       # a broken libnvidia-ml.so that dlopen half-loads
            return NotAvailable(f"NVML did not start: {err}")
        _initialized = True
    return None


def query(fn_name: str, *args: Any, **kwargs: Any) -> Any:
    """Call pynvml.<fn_name>; the value (bytes decoded) or a NotAvailable. Starts NVML if needed."""
    err = init()
    if err is not None:
        return err
    fn = getattr(pynvml, fn_name, None)
    if fn is None:
        return NotAvailable(f"{fn_name}: not in this nvidia-ml-py", _FUNCTION_NOT_FOUND)
    try:
        value = fn(*args, **kwargs)
    except pynvml.NVMLError as e:
        return _na(e, fn_name)
    except pynvml.NVMLLibraryMismatchError as e:
        return _na(e, fn_name)
    except UnicodeDecodeError:
        return NotAvailable(f"{fn_name}: unreadable string")
    if isinstance(value, bytes):
        value = value.decode("utf-8", errors="replace")
    return value


def _first_answer(fn_names: list[str], *args: Any) -> Any:
    """The first of several versions of a query that the driver has."""
    result: Any = NotAvailable("no version of the query exists")
    for name in fn_names:
        result = query(name, *args)
        if not (is_na(result) and result.code in _FALLBACK_CODES):
            return result
    return result


# --- per-GPU readings ---------------------------------------------------------------------------

@functools.lru_cache(maxsize=8)
def _takes_version(fn: Any) -> bool:
    """nvidia-ml-py builds older than the v2 memory struct have no `version` argument."""
    return "version" in inspect.signature(fn).parameters


def _memory(handle: Any) -> tuple[Any, str | NotAvailable]:
    """(struct with total/free/used[/reserved], "v2"|"v1") or (NotAvailable, NA)."""
    fn = getattr(pynvml, "nvmlDeviceGetMemoryInfo", None)
    v2 = getattr(pynvml, "nvmlMemory_v2", None)
    takes_version = fn is not None and _takes_version(fn)
    if v2 is not None and takes_version:
        mem = query("nvmlDeviceGetMemoryInfo", handle, version=v2)
        if not is_na(mem):
            return mem, "v2"
        if mem.code not in _FALLBACK_CODES:
            return mem, mem
    mem = query("nvmlDeviceGetMemoryInfo", handle)
    return (mem, mem) if is_na(mem) else (mem, "v1")


def _temperature(handle: Any) -> int | NotAvailable:
    sensor = getattr(pynvml, "NVML_TEMPERATURE_GPU", 0)
    if hasattr(pynvml, "nvmlDeviceGetTemperatureV"):
        t = query("nvmlDeviceGetTemperatureV", handle, sensor)
        if not (is_na(t) and t.code in _FALLBACK_CODES):
            return t
    return query("nvmlDeviceGetTemperature", handle, sensor)


def process_name(pid: int) -> str | NotAvailable:
    """Command name of a pid; N/A when it exited between NVML's list and now, or is not ours."""
    try:
        return psutil.Process(pid).name()
    except psutil.NoSuchProcess:          # ZombieProcess is one too
        return NotAvailable(f"process {pid} exited")
    except psutil.AccessDenied:
        return NotAvailable(f"process {pid}: access denied")
    except FileNotFoundError:             # psutil race on a vanishing /proc entry (gpustat #95)
        return NotAvailable(f"process {pid} exited")


def _processes(handle: Any) -> tuple[ProcessSample, ...] | NotAvailable:
    seen: dict[int, ProcessSample] = {}
    last: NotAvailable | None = None
    answered = False
    for kind, base in (("compute", "nvmlDeviceGetComputeRunningProcesses"),
                       ("graphics", "nvmlDeviceGetGraphicsRunningProcesses")):
        listed = _first_answer([f"{base}_v3", f"{base}_v2", base], handle)
        if is_na(listed):
            if listed.gpu_lost:
                return listed
            last = listed
            continue
        answered = True
        for p in listed:
            pid = int(p.pid)
            if pid in seen:
                continue
            raw = getattr(p, "usedGpuMemory", None)
            used = int(raw) if raw is not None else NotAvailable("not reported by the driver (WDDM)")
            seen[pid] = ProcessSample(pid=pid, used_bytes=used, name=process_name(pid), kind=kind)
    if not answered:
        return last if last is not None else NotAvailable("process list not available")
    return tuple(sorted(seen.values(),
                        key=lambda p: (-(p.used_bytes if not is_na(p.used_bytes) else -1), p.pid)))


def _cpu_affinity(handle: Any) -> tuple[int, ...] | NotAvailable:
    words = max(1, ((os.cpu_count() or 1) + 63) // 64)
    mask = query("nvmlDeviceGetCpuAffinity", handle, words)
    if is_na(mask):
        return mask
    cpus = [w * 64 + bit for w, word in enumerate(mask) for bit in range(64) if int(word) >> bit & 1]
    return tuple(cpus)


def _compute_capability(handle: Any) -> tuple[int, int] | NotAvailable:
    """(major, minor), as nvidia-smi --query-gpu=compute_cap shows it (R450+ drivers)."""
    cc = query("nvmlDeviceGetCudaComputeCapability", handle)
    if is_na(cc):
        return cc
    major, minor = cc
    return int(major), int(minor)


def read_gpu(index: int, with_processes: bool = True) -> GpuSample:
    handle = query("nvmlDeviceGetHandleByIndex", index)
    if is_na(handle):
        return GpuSample(index=index, error=handle)
    mem, api = _memory(handle)
    if is_na(mem) and mem.gpu_lost:
        return GpuSample(index=index, error=mem)
    util = query("nvmlDeviceGetUtilizationRates", handle)
    power_mw = query("nvmlDeviceGetPowerUsage", handle)
    limit_mw = query("nvmlDeviceGetEnforcedPowerLimit", handle)
    values: dict[str, Any] = dict(
        name=query("nvmlDeviceGetName", handle),
        uuid=query("nvmlDeviceGetUUID", handle),
        util_percent=util if is_na(util) else int(util.gpu),
        temperature_c=_temperature(handle),
        power_w=power_mw if is_na(power_mw) else power_mw / 1000.0,
        power_limit_w=limit_mw if is_na(limit_mw) else limit_mw / 1000.0,
        processes=_processes(handle) if with_processes else NotAvailable("not asked for"),
        cpu_affinity=_cpu_affinity(handle),
        compute_capability=_compute_capability(handle),
        memory_api=api,
    )
    if is_na(mem):
        values.update(total_bytes=mem, free_bytes=mem, nvml_used_bytes=mem, reserved_bytes=mem)
    else:
        values.update(total_bytes=int(mem.total), free_bytes=int(mem.free),
                      nvml_used_bytes=int(mem.used),
                      reserved_bytes=int(mem.reserved) if api == "v2"
                      else NotAvailable("v1 memory query has no reserved field"))
    for v in values.values():       # the GPU fell off the bus between two queries
        if is_na(v) and v.gpu_lost:
            return GpuSample(index=index, error=v)
    return GpuSample(index=index, **values)


def read_snapshot(with_processes: bool = True) -> Snapshot:
    """Every GPU NVML sees, now. Never raises for NVML trouble: it is in the Snapshot."""
    t0 = time.perf_counter()
    now = time.time()
    err = init()
    if err is not None:
        return Snapshot(time_s=now, unavailable=err, query_s=time.perf_counter() - t0)
    count = query("nvmlDeviceGetCount")
    if is_na(count):
        return Snapshot(time_s=now, unavailable=count, query_s=time.perf_counter() - t0)
    gpus = tuple(read_gpu(i, with_processes) for i in range(int(count)))
    return Snapshot(time_s=now, gpus=gpus, driver_version=query("nvmlSystemGetDriverVersion"),
                    query_s=time.perf_counter() - t0)
