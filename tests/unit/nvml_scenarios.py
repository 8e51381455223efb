"""NVML faked at the boundary: the pynvml functions vramkit/adapters/nvml.py calls, replaced per
situation with monkeypatch. Errors are pynvml's own NVMLError classes, raised the way the real
library raises them, so the adapter's error handling is what gets tested.

Situations (each a function returning a FakeNvml):
- card_16gb_foreign_6gib: an RTX 4080 (16 GB) with someone else's process holding 6 GiB
- desktop_16gb_1gib_used: a desktop's 16 GB card with 1 GiB held by the compositor and a browser
- two_gpus: a 16 GB and a 24 GB card, one busy
- driver_missing / driver_not_loaded: nvmlInit fails
- old_driver_v1_only: no nvmlDeviceGetMemoryInfo_v2, no _v3/_v2 process queries (pre-R510)
- laptop_no_power_sensor: power queries NotSupported
A FakeNvml can lose a GPU (`lose(index, after_counts=N)`: NVMLError_GpuIsLost on every query
once nvmlDeviceGetCount has been called N more times), and list a pid that has exited.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

import psutil
import pynvml

MiB = 1 << 20
GiB = 1 << 30


@dataclass
class FakeGpu:
    name: str
    uuid: str
    total: int
    reserved: int
    used: int                          # NVML v2 "used" (excludes reserved)
    util: int = 0
    temp_c: int = 40
    power_mw: int | None = 30_000      # None: NotSupported
    power_limit_mw: int | None = 320_000
    procs: list[tuple[int, int | None]] = field(default_factory=list)   # (pid, usedGpuMemory)
    cpus: tuple[int, ...] = (0, 1)
    cc: tuple[int, int] | None = (8, 9)  # nvmlDeviceGetCudaComputeCapability; None: NotSupported
    lost: bool = False

    @property
    def free(self) -> int:
        return self.total - self.reserved - self.used


@dataclass
class FakeNvml:
    gpus: list[FakeGpu]
    init_error: int | None = None      # an NVML_ERROR_* code nvmlInit raises
    has_v2: bool = True                # nvmlDeviceGetMemoryInfo_v2 and the versioned process queries
    driver: str = "550.54.14"
    names: dict[int, str] = field(default_factory=dict)   # pid -> command name (psutil)
    count_calls: int = 0
    _lose_at: dict[int, int] = field(default_factory=dict)

    def lose(self, index: int, after_counts: int = 0) -> None:
        """GPU `index` falls off the bus once nvmlDeviceGetCount was called `after_counts` more times."""
        self._lose_at[index] = self.count_calls + after_counts

    # --- the fake library --------------------------------------------------------------------
    def _gpu(self, handle) -> FakeGpu:
        gpu = self.gpus[handle.index]
        if gpu.lost:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        return gpu

    def install(self, monkeypatch) -> FakeNvml:
        N = pynvml

        def init():
            if self.init_error is not None:
                raise N.NVMLError(self.init_error)

        def count():
            self.count_calls += 1
            for idx, at in self._lose_at.items():
                if self.count_calls > at:
                    self.gpus[idx].lost = True
            return len(self.gpus)

        def handle(i):
            if i >= len(self.gpus):
                raise N.NVMLError(N.NVML_ERROR_INVALID_ARGUMENT)
            if self.gpus[i].lost:
                raise N.NVMLError(N.NVML_ERROR_GPU_IS_LOST)
            return SimpleNamespace(index=i)

        def memory(h, version=None):
            g = self._gpu(h)
            if version:
                if not self.has_v2:
                    raise N.NVMLError(N.NVML_ERROR_FUNCTION_NOT_FOUND)
                return SimpleNamespace(version=version, total=g.total, reserved=g.reserved,
                                       free=g.free, used=g.used)
            return SimpleNamespace(total=g.total, free=g.free, used=g.total - g.free)

        def procs_versioned(h):
            if not self.has_v2:
                raise N.NVMLError(N.NVML_ERROR_FUNCTION_NOT_FOUND)
            return procs_plain(h)

        def procs_plain(h):
            return [SimpleNamespace(pid=p, usedGpuMemory=m) for p, m in self._gpu(h).procs]

        def graphics(h):
            self._gpu(h)
            return []

        def power(h):
            g = self._gpu(h)
            if g.power_mw is None:
                raise N.NVMLError(N.NVML_ERROR_NOT_SUPPORTED)
            return g.power_mw

        def power_limit(h):
            g = self._gpu(h)
            if g.power_limit_mw is None:
                raise N.NVMLError(N.NVML_ERROR_NOT_SUPPORTED)
            return g.power_limit_mw

        def affinity(h, words):
            g = self._gpu(h)
            mask = [0] * words
            for c in g.cpus:
                mask[c // 64] |= 1 << (c % 64)
            return mask

        def temp_v(h, sensor):
            if not self.has_v2:
                raise N.NVMLError(N.NVML_ERROR_FUNCTION_NOT_FOUND)
            return self._gpu(h).temp_c

        def compute_capability(h):
            g = self._gpu(h)
            if g.cc is None:
                raise N.NVMLError(N.NVML_ERROR_NOT_SUPPORTED)
            return g.cc

        fakes = {
            "nvmlInit": init,
            "nvmlDeviceGetCudaComputeCapability": compute_capability,
            "nvmlShutdown": lambda: None,
            "nvmlDeviceGetCount": count,
            "nvmlSystemGetDriverVersion": lambda: self.driver,
            "nvmlDeviceGetHandleByIndex": handle,
            "nvmlDeviceGetName": lambda h: self._gpu(h).name,
            "nvmlDeviceGetUUID": lambda h: self._gpu(h).uuid,
            "nvmlDeviceGetMemoryInfo": memory,
            "nvmlDeviceGetUtilizationRates": lambda h: SimpleNamespace(gpu=self._gpu(h).util, memory=0),
            "nvmlDeviceGetTemperatureV": temp_v,
            "nvmlDeviceGetTemperature": lambda h, s: self._gpu(h).temp_c,
            "nvmlDeviceGetPowerUsage": power,
            "nvmlDeviceGetEnforcedPowerLimit": power_limit,
            "nvmlDeviceGetComputeRunningProcesses_v3": procs_versioned,
            "nvmlDeviceGetComputeRunningProcesses_v2": procs_versioned,
            "nvmlDeviceGetComputeRunningProcesses": procs_plain,
            "nvmlDeviceGetGraphicsRunningProcesses_v3": graphics,
            "nvmlDeviceGetGraphicsRunningProcesses_v2": graphics,
            "nvmlDeviceGetGraphicsRunningProcesses": graphics,
            "nvmlDeviceGetCpuAffinity": affinity,
        }
        for name, fn in fakes.items():
            monkeypatch.setattr(pynvml, name, fn)

        names = self.names

        class FakeProcess:
            """psutil.Process for the pids NVML lists; a pid not in `names` has exited."""

            def __init__(self, pid):
                if pid not in names:
                    raise psutil.NoSuchProcess(pid)
                self.pid = pid

            def name(self):
                return names[self.pid]

        monkeypatch.setattr(psutil, "Process", FakeProcess)
        from vramkit.adapters import nvml
        nvml.reset()
        return self


# --- situations -----------------------------------------------------------------------------------

def rtx4080(used: int, procs=(), **kw) -> FakeGpu:
    # 16 GB card: NVML total 16376 MiB; reserve as seen on 5xx drivers, a few hundred MiB.
    return FakeGpu(name="NVIDIA GeForce RTX 4080", uuid="GPU-4080-0000", total=16376 * MiB,
                   reserved=331 * MiB, used=used, procs=list(procs), **kw)


def card_16gb_foreign_6gib() -> FakeNvml:
    """A 16 GB card where another user's process holds 6 GiB before our server starts."""
    gpu = rtx4080(used=6 * GiB + 200 * MiB, procs=[(4242, 6 * GiB), (1337, 200 * MiB)],
                  util=12, temp_c=47, power_mw=41_500, cpus=tuple(range(0, 8)))
    return FakeNvml([gpu], names={4242: "python3", 1337: "Xorg"})


def desktop_16gb_1gib_used() -> FakeNvml:
    """A desktop's 16 GB card before the server starts: the compositor and a browser hold 1 GiB."""
    gpu = rtx4080(used=1 * GiB, procs=[(1337, 300 * MiB), (2024, 724 * MiB)], util=3, cpus=tuple(range(0, 8)))
    return FakeNvml([gpu], names={1337: "Xorg", 2024: "firefox"})


def two_gpus() -> FakeNvml:
    """GPU 0 (16 GB) nearly full with our server, GPU 1 (24 GB) idle."""
    g0 = rtx4080(used=14 * GiB, procs=[(5000, 14 * GiB)], util=97, temp_c=71, power_mw=280_000)
    g1 = FakeGpu(name="NVIDIA GeForce RTX 4090", uuid="GPU-4090-0001", total=24564 * MiB,
                 reserved=400 * MiB, used=0, temp_c=35, power_mw=21_000, power_limit_mw=450_000,
                 cpus=(8, 9, 10, 11))
    return FakeNvml([g0, g1], names={5000: "sglang::scheduler"})


def driver_missing() -> FakeNvml:
    return FakeNvml([], init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)


def driver_not_loaded() -> FakeNvml:
    return FakeNvml([], init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED)


def old_driver_v1_only() -> FakeNvml:
    """A pre-R510 driver: no memory v2 (so no 'reserved'), no _v3/_v2 process queries."""
    gpu = rtx4080(used=3 * GiB, procs=[(4242, 3 * GiB)])
    return FakeNvml([gpu], has_v2=False, driver="470.239.06", names={4242: "python3"})


def laptop_no_power_sensor() -> FakeNvml:
    gpu = rtx4080(used=1 * GiB, power_mw=None, power_limit_mw=None)
    return FakeNvml([gpu])


def run_cli(argv: list[str]) -> int:
    """vramkit.cli.main(argv), with only the command modules that exist yet.

    Other parts of the kit register their commands in the same list while they are being written;
    a module not there yet must not fail these tests. Once all exist this filter changes nothing.
    """
    import importlib.util

    from vramkit import cli

    present = [m for m in cli.COMMAND_MODULES if importlib.util.find_spec(m) is not None]
    saved = cli.COMMAND_MODULES
    cli.COMMAND_MODULES = present
    try:
        return cli.main(argv)
    finally:
        cli.COMMAND_MODULES = saved
