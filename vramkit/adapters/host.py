"""The one adapter for the host itself: CPU topology from /sys, limits, Docker, affinity, pinned copies.

- CPU topology: psutil counts plus /sys: hybrid P/E cores from /sys/devices/cpu_core/cpus and
  /sys/devices/cpu_atom/cpus (Intel hybrid), else per-CPU `cpu_capacity` where it differs (Arm
  big.LITTLE); NUMA nodes from /sys/devices/system/node/node*/cpulist; SMT siblings from
  cpu*/topology/thread_siblings_list. `sys_root` lets tests point it at a recorded /sys tree.
- RLIMIT_MEMLOCK (resource.getrlimit), inside-Docker (/.dockerenv or /proc/self/cgroup) and the
  cgroup memory limit (v2 memory.max, v1 memory.limit_in_bytes).
- sched_setaffinity on a running server: its process, every thread, every child process.
- A real pinned allocation and host-to-GPU copy speed through torch, when CUDA is there.
"""
from __future__ import annotations

import os
import resource
import shutil
import time
from pathlib import Path

import psutil

from vramkit.core.gpu.snapshot import NotAvailable
from vramkit.core.host_plan import CpuTopology, parse_cpulist


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def read_topology(sys_root: Path | str = "/sys", allowed: set[int] | None = None) -> CpuTopology:
    root = Path(sys_root)
    cpu_dir = root / "devices/system/cpu"
    online_text = _read(cpu_dir / "online")
    online = parse_cpulist(online_text) if online_text else tuple(range(psutil.cpu_count() or 1))
    if allowed is None:
        allowed = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set(online)
    siblings: dict[int, tuple[int, ...]] = {}
    for c in online:
        text = _read(cpu_dir / f"cpu{c}/topology/thread_siblings_list")
        if text:
            siblings[c] = parse_cpulist(text)
    physical = len({siblings[c] for c in siblings}) if siblings else psutil.cpu_count(logical=False)

    p_cores: tuple[int, ...] = ()
    e_cores: tuple[int, ...] = ()
    source = ""
    p_text, e_text = _read(root / "devices/cpu_core/cpus"), _read(root / "devices/cpu_atom/cpus")
    if p_text and e_text:
        p_cores, e_cores, source = parse_cpulist(p_text), parse_cpulist(e_text), "cpu_core/cpu_atom"
    else:
        caps = {}
        for c in online:
            text = _read(cpu_dir / f"cpu{c}/cpu_capacity")
            if text and text.isdigit():
                caps[c] = int(text)
        if caps and len(set(caps.values())) > 1:
            top = max(caps.values())
            p_cores = tuple(c for c, v in sorted(caps.items()) if v == top)
            e_cores = tuple(c for c, v in sorted(caps.items()) if v != top)
            source = "cpu_capacity"

    numa: dict[int, tuple[int, ...]] = {}
    node_dir = root / "devices/system/node"
    if node_dir.is_dir():
        for d in sorted(node_dir.glob("node[0-9]*")):
            text = _read(d / "cpulist")
            if text is not None:
                numa[int(d.name[4:])] = parse_cpulist(text) if text else ()
    return CpuTopology(logical=len(online), physical=physical, allowed=tuple(sorted(allowed)),
                       p_cores=p_cores, e_cores=e_cores, hybrid_source=source,
                       numa_nodes=numa, siblings=siblings)


def cpu_flags(cpuinfo: Path | str = "/proc/cpuinfo") -> set[str]:
    """The CPU's instruction-set flags as the kernel names them (amx_tile, avx512_bf16, avx512vbmi, avx2, ...);
    empty when unreadable (not Linux): the hybrid MoE check then says the CPU lacks them."""
    text = _read(Path(cpuinfo)) or ""
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def memlock_limit() -> tuple[int | None, int | None]:
    """(soft, hard) RLIMIT_MEMLOCK in bytes; None = unlimited."""
    soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    inf = resource.RLIM_INFINITY
    return (None if soft == inf else soft, None if hard == inf else hard)


def c_compiler() -> str | None:
    """The C compiler a native SGLang server would build the kit's int4 decode kernel with ($CC, else cc), or None."""
    return shutil.which(os.environ.get("CC") or "cc")


def in_docker(root: Path | str = "/") -> tuple[bool, str]:
    """(inside a container?, what said so)."""
    r = Path(root)
    if (r / ".dockerenv").exists():
        return True, "/.dockerenv exists"
    text = _read(r / "proc/self/cgroup") or ""
    for word in ("docker", "containerd", "kubepods", "libpod"):
        if word in text:
            return True, f"/proc/self/cgroup mentions {word}"
    return False, "no /.dockerenv, no container in /proc/self/cgroup"


def cgroup_memory_limit(root: Path | str = "/") -> int | None:
    """This cgroup's memory limit in bytes, None when unlimited or not found."""
    r = Path(root) / "sys/fs/cgroup"
    text = _read(r / "memory.max")                      # cgroup v2
    if text is not None:
        return None if text == "max" else int(text)
    text = _read(r / "memory/memory.limit_in_bytes")    # cgroup v1: "unlimited" is ~2^63
    if text is not None and text.isdigit():
        value = int(text)
        return None if value >= 1 << 60 else value
    return None


def host_memory() -> tuple[int, int]:
    """(total, available) RAM in bytes."""
    vm = psutil.virtual_memory()
    return int(vm.total), int(vm.available)


def rss_of(marker: str) -> int:
    """Resident memory in bytes summed over the processes whose command line contains `marker` (pages two of
    them share count twice: compare two readings, not one with a total)."""
    total = 0
    for proc in psutil.process_iter(["cmdline", "memory_info"]):
        cmd = " ".join(proc.info.get("cmdline") or [])
        if marker in cmd and proc.info.get("memory_info") is not None:
            total += proc.info["memory_info"].rss
    return total


def pin_process(pid: int, cpus: tuple[int, ...]) -> dict:
    """Set the CPU affinity of a process, all its threads and all its children; read it back.

    sched_setaffinity acts on one thread, and SGLang runs its scheduler and detokenizer as child
    processes, so every thread of every process in the tree gets it. Raises psutil.NoSuchProcess
    when the pid is gone; per-thread failures (a thread that exited meanwhile) are counted.
    """
    root = psutil.Process(pid)
    procs = [root] + root.children(recursive=True)
    threads_set, failed = 0, []
    for proc in procs:
        try:
            tids = [t.id for t in proc.threads()]
        except (psutil.NoSuchProcess, psutil.AccessDenied) as e:
            failed.append(f"pid {proc.pid}: {type(e).__name__}")
            continue
        for tid in tids:
            try:
                os.sched_setaffinity(tid, cpus)
                threads_set += 1
            except ProcessLookupError:
                continue                      # the thread ended between listing and setting
            except PermissionError as e:
                failed.append(f"tid {tid}: {e.strerror}")
    return {"pid": pid, "processes": [p.pid for p in procs], "threads_set": threads_set,
            "failed": failed, "affinity_now": sorted(os.sched_getaffinity(pid))}


def pinned_copy_speed(size_bytes: int, repeats: int = 5, device: int = 0) -> dict | NotAvailable:
    """Allocate `size_bytes` of pinned host memory and time host-to-GPU copies (pinned and pageable).

    Returns seconds and GB/s (10^9 bytes/s, the unit PCIe is quoted in), best of `repeats`.
    """
    try:
        import torch  # noqa: PLC0415 - optional: the kit runs without torch; this check needs it
    except ImportError:
        return NotAvailable("torch is not installed")
    if not torch.cuda.is_available():
        return NotAvailable("no CUDA GPU (torch.cuda.is_available() is False)")
    t0 = time.perf_counter()
    try:
        host = torch.empty(size_bytes, dtype=torch.uint8, pin_memory=True)
    except RuntimeError as e:
        return NotAvailable(f"pinned allocation of {size_bytes} bytes failed: {e}")
    pin_alloc_s = time.perf_counter() - t0
    pageable = torch.empty(size_bytes, dtype=torch.uint8)
    dev = torch.empty(size_bytes, dtype=torch.uint8, device=f"cuda:{device}")

    def best(src, dst) -> float:
        times = []
        for _ in range(repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            dst.copy_(src, non_blocking=True)
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1000.0)
        return min(times)

    best(host, dev)                             # first copy pays for lazy init
    pinned_s, pageable_s = best(host, dev), best(pageable, dev)
    out = {"size_bytes": size_bytes, "pin_alloc_s": round(pin_alloc_s, 4),
           "h2d_pinned_s": pinned_s, "h2d_pinned_GBps": round(size_bytes / pinned_s / 1e9, 2),
           "h2d_pageable_s": pageable_s, "h2d_pageable_GBps": round(size_bytes / pageable_s / 1e9, 2),
           "device": torch.cuda.get_device_name(device)}
    del host, pageable, dev
    torch.cuda.empty_cache()
    return out
