"""The NVML adapter against faked NVML situations: values, N/A with reasons, fallbacks, never 0."""
from __future__ import annotations

import subprocess
import sys

import nvml_scenarios as sc
import pynvml
import pytest

from vramkit.adapters import nvml
from vramkit.core.gpu.snapshot import is_na, to_jsonable

GiB, MiB = sc.GiB, sc.MiB


@pytest.fixture(autouse=True)
def _fresh_nvml():
    nvml.reset()
    yield
    nvml.reset()


def test_16gb_card_with_foreign_process(monkeypatch):
    sc.card_16gb_foreign_6gib().install(monkeypatch)
    snap = nvml.read_snapshot()
    assert snap.status == "ok" and snap.driver_version == "550.54.14"
    (g,) = snap.gpus
    assert g.name == "NVIDIA GeForce RTX 4080" and g.uuid == "GPU-4080-0000"
    assert g.total_bytes == 16376 * MiB
    assert g.memory_api == "v2"
    assert g.reserved_bytes == 331 * MiB
    assert g.nvml_used_bytes == 6 * GiB + 200 * MiB            # what nvidia-smi prints
    assert g.in_use_bytes == g.nvml_used_bytes + 331 * MiB     # total - free: reserve counted
    assert g.util_percent == 12 and g.temperature_c == 47 and g.power_w == 41.5
    assert [(p.pid, p.used_bytes, p.name) for p in g.processes] == [
        (4242, 6 * GiB, "python3"), (1337, 200 * MiB, "Xorg")]
    assert g.cpu_affinity == tuple(range(8))
    assert g.compute_capability == (8, 9)                      # nvmlDeviceGetCudaComputeCapability


def test_compute_capability_not_supported_is_a_reason_not_a_number(monkeypatch):
    fake = sc.card_16gb_foreign_6gib()
    fake.gpus[0].cc = None
    fake.install(monkeypatch)
    (g,) = nvml.read_snapshot().gpus
    assert is_na(g.compute_capability) and "Not Supported" in g.compute_capability.reason


def test_two_gpus_each_read(monkeypatch):
    sc.two_gpus().install(monkeypatch)
    snap = nvml.read_snapshot()
    assert [g.index for g in snap.gpus] == [0, 1]
    assert snap.gpus[1].processes == ()
    assert snap.gpus[1].cpu_affinity == (8, 9, 10, 11)
    assert snap.gpus[0].in_use_percent > 85 > snap.gpus[1].in_use_percent


@pytest.mark.parametrize("scenario, words", [(sc.driver_missing, "Library Not Found"),
                                             (sc.driver_not_loaded, "Driver Not Loaded")])
def test_driver_missing_is_a_reason_not_a_crash(monkeypatch, scenario, words):
    scenario().install(monkeypatch)
    snap = nvml.read_snapshot()
    assert snap.status == "no_nvml" and snap.gpus == ()
    assert words in snap.unavailable.reason
    assert to_jsonable(snap)["reason"].endswith(words)
    # every query answers N/A with the same reason instead of raising
    assert is_na(nvml.query("nvmlDeviceGetCount"))


def test_init_is_lazy_and_once(monkeypatch):
    fake = sc.card_16gb_foreign_6gib().install(monkeypatch)
    calls = []
    monkeypatch.setattr(pynvml, "nvmlInit", lambda: calls.append(1))
    nvml.read_snapshot()
    nvml.read_snapshot()
    assert calls == [1] and fake.count_calls == 2


def test_old_driver_falls_back_to_v1_queries(monkeypatch):
    sc.old_driver_v1_only().install(monkeypatch)
    (g,) = nvml.read_snapshot().gpus
    assert g.memory_api == "v1"
    assert is_na(g.reserved_bytes) and "v1" in g.reserved_bytes.reason
    assert g.nvml_used_bytes == g.in_use_bytes == g.total_bytes - g.free_bytes
    assert [p.pid for p in g.processes] == [4242]                  # unversioned process query
    assert g.temperature_c == 40                                     # pre-TemperatureV query


def test_not_supported_is_na_never_zero(monkeypatch):
    sc.laptop_no_power_sensor().install(monkeypatch)
    (g,) = nvml.read_snapshot().gpus
    assert is_na(g.power_w) and g.power_w.code == pynvml.NVML_ERROR_NOT_SUPPORTED
    assert "Not Supported" in g.power_w.reason
    with pytest.raises(TypeError):
        g.power_w + 1                                                # cannot pass for a number
    assert to_jsonable(g)["power_w"] is None


def test_gpu_lost_mid_loop(monkeypatch):
    fake = sc.two_gpus().install(monkeypatch)
    fake.lose(0, after_counts=1)
    first = nvml.read_snapshot()
    second = nvml.read_snapshot()
    assert first.status == "ok"
    assert second.status == "gpu_lost"
    assert second.gpus[0].lost and "GPU is lost" in second.gpus[0].error.reason
    assert is_na(second.gpus[0].in_use_bytes) and second.gpus[0].in_use_bytes.gpu_lost
    assert second.gpus[1].error is None and second.gpus[1].total_bytes == 24564 * MiB


def test_gpu_lost_between_two_queries_of_one_reading(monkeypatch):
    fake = sc.card_16gb_foreign_6gib().install(monkeypatch)
    real_util = pynvml.nvmlDeviceGetUtilizationRates

    def util_then_lost(h):
        value = real_util(h)
        fake.gpus[0].lost = True
        return value

    monkeypatch.setattr(pynvml, "nvmlDeviceGetUtilizationRates", util_then_lost)
    (g,) = nvml.read_snapshot().gpus
    assert g.lost and g.error.code == pynvml.NVML_ERROR_GPU_IS_LOST


def test_process_vanishing_between_listing_and_reading(monkeypatch):
    fake = sc.card_16gb_foreign_6gib()
    del fake.names[1337]                       # NVML still lists it; psutil says it is gone
    fake.install(monkeypatch)
    procs = {p.pid: p for p in nvml.read_snapshot().gpus[0].processes}
    assert procs[4242].name == "python3"
    assert is_na(procs[1337].name) and "exited" in procs[1337].name.reason
    assert procs[1337].used_bytes == 200 * MiB


def test_process_name_of_a_really_exited_pid():
    # no fake: a real child that has exited and been reaped
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    name = nvml.process_name(child.pid)
    assert is_na(name) and "exited" in name.reason


def test_real_host_without_gpu_says_so():
    snap = nvml.read_snapshot()
    if snap.status == "ok":
        pytest.skip("this host has a working NVML; the no-GPU path is covered by the fakes")
    assert snap.status in ("no_nvml", "no_gpu")
    assert snap.unavailable is None or snap.unavailable.reason
