"""Pure host-tuning logic for `vramkit host`: cpusets, memory checks, warm-up settling, .env lines.

Takes plain values read by vramkit/adapters/host.py (CPU lists, byte counts, latencies) and returns
proposals and checks; nothing here reads /sys, calls psutil or talks to a server.
"""
from __future__ import annotations

import re
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field

from vramkit.core.checks import FAIL, PASS, WARN, Check
from vramkit.core.plan.knobs import by_name
from vramkit.units import GiB, MiB, bytes2human

ENV_SERVER_CPUSET = "VRAMKIT_SGLANG_CPUSET"
ENV_SIDE_CPUSET = "VRAMKIT_SIDE_CPUSET"

# Share of physical cores left to the side services (embed service, Redis) on a non-hybrid CPU.
# A guess: they are light next to SGLang's tokenizer/scheduler/detokenizer processes.
SIDE_CORE_SHARE = 8
MIN_CPUS_TO_SPLIT = 4
# Pinned host memory cannot be swapped: keep this much RAM free for everything else (a guess).
RAM_HEADROOM_BYTES = 4 << 30


def size_text(n: int) -> str:
    """Bytes in GiB, or MiB / KiB when smaller (a memlock of 8 MiB is not '0.01 GiB')."""
    if n >= GiB:
        return bytes2human(n, "GiB")
    if n >= MiB:
        return bytes2human(n, "MiB", 0)
    return bytes2human(n, "KiB", 0)


# --- CPU lists ------------------------------------------------------------------------------------

def parse_cpulist(text: str) -> tuple[int, ...]:
    """Kernel cpulist '0-3,8,10-11' -> (0, 1, 2, 3, 8, 10, 11). Empty text -> ()."""
    out: set[int] = set()
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not m:
            raise ValueError(f"not a CPU list: {text!r} (use e.g. 0-7,16-23)")
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        if hi < lo:
            raise ValueError(f"not a CPU list: {text!r} ({part} runs backwards)")
        out.update(range(lo, hi + 1))
    return tuple(sorted(out))


def format_cpulist(cpus: Iterable[int]) -> str:
    """(0, 1, 2, 3, 8) -> '0-3,8' (the form taskset, docker --cpuset-cpus and the kernel use)."""
    cpus = sorted(set(cpus))
    runs: list[str] = []
    i = 0
    while i < len(cpus):
        j = i
        while j + 1 < len(cpus) and cpus[j + 1] == cpus[j] + 1:
            j += 1
        runs.append(str(cpus[i]) if i == j else f"{cpus[i]}-{cpus[j]}")
        i = j + 1
    return ",".join(runs)


@dataclass(frozen=True)
class CpuTopology:
    logical: int
    physical: int | None
    allowed: tuple[int, ...]                       # what this process may run on (cgroup/taskset)
    p_cores: tuple[int, ...] = ()                  # performance cores' logical CPUs, if exposed
    e_cores: tuple[int, ...] = ()                  # efficiency cores' logical CPUs, if exposed
    hybrid_source: str = ""                        # where the P/E split came from
    numa_nodes: dict[int, tuple[int, ...]] = field(default_factory=dict)
    siblings: dict[int, tuple[int, ...]] = field(default_factory=dict)   # SMT threads per CPU

    @property
    def hybrid(self) -> bool:
        return bool(self.p_cores and self.e_cores)

    def cores(self, cpus: Iterable[int]) -> list[tuple[int, ...]]:
        """Group CPUs into physical cores (SMT siblings together), in CPU order."""
        pool, seen, out = set(cpus), set[int](), []
        for c in sorted(pool):
            if c in seen:
                continue
            group = tuple(sorted((set(self.siblings.get(c, (c,))) | {c}) & pool))
            seen.update(group)
            out.append(group)
        return out


@dataclass(frozen=True)
class CpusetPlan:
    server: tuple[int, ...]
    side: tuple[int, ...]
    status: str
    notes: tuple[str, ...]

    def env(self) -> dict[str, str]:
        return {ENV_SERVER_CPUSET: format_cpulist(self.server), ENV_SIDE_CPUSET: format_cpulist(self.side)}


def propose_cpusets(topo: CpuTopology, gpu_cpus: tuple[int, ...] | None = None) -> CpusetPlan:
    """Server on the GPU's nearest CPUs (P-cores first), side services apart from it.

    - Pool: the CPUs this process may use. If NVML names the GPU's nearest CPUs (its NUMA node),
      the server stays within them: host-to-GPU copies of the pinned cache cross no socket link.
    - Hybrid CPU (P/E cores exposed): server on P-cores, side services on E-cores.
    - Otherwise: side services get 1/SIDE_CORE_SHARE of the physical cores (at least one), taken
      away from the GPU's node where there is another node, else from the end of the pool.
    - Under MIN_CPUS_TO_SPLIT CPUs no split: both get everything (warn).
    """
    pool = tuple(sorted(topo.allowed))
    notes: list[str] = []
    near = pool
    if gpu_cpus:
        inter = tuple(c for c in pool if c in set(gpu_cpus))
        if inter and inter != pool:
            near = inter
            notes.append(f"GPU's nearest CPUs (NVML): {format_cpulist(gpu_cpus)}")
        elif not inter:
            notes.append("none of the GPU's nearest CPUs is allowed here; using every allowed CPU")
    if len(pool) < MIN_CPUS_TO_SPLIT:
        notes.append(f"only {len(pool)} CPU(s) allowed: no split, server and side share them")
        return CpusetPlan(pool, pool, WARN, tuple(notes))
    if topo.hybrid:
        p = tuple(c for c in near if c in set(topo.p_cores))
        e = tuple(c for c in pool if c in set(topo.e_cores))
        if p and e:
            notes.append(f"hybrid CPU ({topo.hybrid_source}): server on P-cores, side on E-cores")
            return CpusetPlan(p, e, PASS, tuple(notes))
    cores = topo.cores(pool)
    k = max(1, len(cores) // SIDE_CORE_SHARE)
    far = [c for c in cores if not set(c) & set(near)]
    side_cores = far[-k:] if far else topo.cores(near)[-k:]
    side = tuple(sorted(c for core in side_cores for c in core))
    server = tuple(c for c in near if c not in set(side)) or near
    notes.append(f"side services get {len(side_cores)} of {len(cores)} physical cores "
                 f"(1/{SIDE_CORE_SHARE}, a guess: they are light)")
    return CpusetPlan(server, side, PASS, tuple(notes))


# --- memory checks --------------------------------------------------------------------------------

def memlock_check(soft_bytes: int | None, pinned_bytes: int | None, in_docker: bool) -> Check:
    """RLIMIT_MEMLOCK against the pinned host pool. None = unlimited.

    CUDA's pinned allocations (cudaHostAlloc, torch pin_memory) are pinned by the NVIDIA driver
    and, as far as we know, not charged to RLIMIT_MEMLOCK (benchmarks/gpu/nvml_vs_smi.py checks
    it on the GPU host); mlock()-based pinning (RDMA, some NCCL paths) is. So short is a warning.
    """
    where = "inside this container" if in_docker else "for this shell"
    limit = "unlimited" if soft_bytes is None else size_text(soft_bytes)
    data = {"memlock_soft_bytes": soft_bytes, "pinned_bytes": pinned_bytes}
    if pinned_bytes is None:
        return Check("memlock", PASS, f"memlock {limit} {where}; no pinned host pool planned "
                     "(give --pinned-gib to check one)", data)
    if soft_bytes is None or soft_bytes >= pinned_bytes:
        return Check("memlock", PASS, f"memlock {limit} {where} covers the {bytes2human(pinned_bytes)} "
                     "pinned pool", data)
    fix = ("compose: ulimits: memlock: -1" if in_docker else "ulimit -l unlimited (or limits.conf)")
    return Check("memlock", WARN, f"memlock {limit} {where} < {bytes2human(pinned_bytes)} pinned pool: "
                 f"CUDA pinning is not charged to it, mlock()-based pinning is -> {fix}", data)


def pinned_ram_check(pinned_bytes: int | None, total_bytes: int, available_bytes: int,
                     cgroup_limit_bytes: int | None) -> Check:
    """The pinned pool must fit in RAM with headroom: pinned pages cannot be swapped out."""
    cap = total_bytes if cgroup_limit_bytes is None else min(total_bytes, cgroup_limit_bytes)
    limited = cgroup_limit_bytes is not None and cgroup_limit_bytes < total_bytes
    capname = "container memory limit" if limited else "host RAM"
    data = {"pinned_bytes": pinned_bytes, "ram_total_bytes": total_bytes,
            "ram_available_bytes": available_bytes, "cgroup_limit_bytes": cgroup_limit_bytes}
    if pinned_bytes is None:
        return Check("pinned_ram", PASS, f"no pinned pool planned; {capname} {bytes2human(cap)}, "
                     f"{bytes2human(available_bytes)} available", data)
    if pinned_bytes + RAM_HEADROOM_BYTES > cap:
        return Check("pinned_ram", FAIL, f"{bytes2human(pinned_bytes)} pinned + {bytes2human(RAM_HEADROOM_BYTES)} "
                     f"headroom > {capname} {bytes2human(cap)} -> lower {by_name()['hicache_gb'].cli_flag}", data)
    if pinned_bytes + RAM_HEADROOM_BYTES > available_bytes:
        return Check("pinned_ram", WARN, f"{bytes2human(pinned_bytes)} pinned fits {capname} "
                     f"{bytes2human(cap)} but only {bytes2human(available_bytes)} is available now", data)
    return Check("pinned_ram", PASS, f"{bytes2human(pinned_bytes)} pinned fits: {bytes2human(available_bytes)} "
                 f"available of {capname} {bytes2human(cap)}", data)


# --- warm-up --------------------------------------------------------------------------------------

def latency_settled(latencies_s: list[float], window: int = 3, tolerance: float = 0.10) -> bool:
    """True once the last `window` latencies lie within ±tolerance of their median.

    The first request is never counted (it pays for lazy init / first kernel launches), so it
    takes at least window + 1 requests.
    """
    if len(latencies_s) < window + 1:
        return False
    tail = latencies_s[-window:]
    med = statistics.median(tail)
    return med > 0 and all(abs(x - med) <= tolerance * med for x in tail)


# --- .env -----------------------------------------------------------------------------------------

_ENV_LINE = re.compile(r"\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=")


def read_env_value(text: str, key: str) -> str | None:
    """The value of KEY=value in .env text (the last one wins, as in a shell), or None."""
    value = None
    for line in text.splitlines():
        m = _ENV_LINE.match(line)
        if m and m.group(1) == key:
            value = line[m.end():].strip()
    return value


def update_env_text(text: str, values: dict[str, str]) -> str:
    """Set KEY=value lines in .env text, keeping every other line (and comments) as it was."""
    lines = text.splitlines()
    done = set()
    for i, line in enumerate(lines):
        m = _ENV_LINE.match(line)
        if m and m.group(1) in values:
            lines[i] = f"{m.group(1)}={values[m.group(1)]}"
            done.add(m.group(1))
    for key, value in values.items():
        if key not in done:
            lines.append(f"{key}={value}")
    return "\n".join(lines) + "\n"
