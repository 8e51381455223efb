"""Prometheus metrics of the card: names, units, labels and values from NVML situations faked at the
hardware boundary (nvml_scenarios), read back with prometheus-client's own text parser."""
from __future__ import annotations

import nvml_scenarios as sc
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from vramkit.adapters import nvml
from vramkit.dashboard.metrics import registry

MiB = 1 << 20
GiB = 1 << 30


@pytest.fixture(autouse=True)
def _fresh_nvml():
    nvml.reset()
    yield
    nvml.reset()


def scrape(predicted=None) -> dict[str, list]:
    text = generate_latest(registry(nvml.read_snapshot, predicted)).decode()
    out: dict[str, list] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def test_no_driver_is_gpu_up_0_and_nothing_else(monkeypatch):
    sc.driver_missing().install(monkeypatch)
    m = scrape()
    assert m == {"vramkit_gpu_up": [({}, 0.0)]}


def test_16gb_card_with_a_foreign_process(monkeypatch):
    fake = sc.card_16gb_foreign_6gib().install(monkeypatch)
    g = fake.gpus[0]
    m = scrape()
    labels = {"index": "0", "name": "NVIDIA GeForce RTX 4080", "uuid": "GPU-4080-0000"}
    assert m["vramkit_gpu_up"] == [(labels, 1.0)]
    in_use = g.total - g.free                       # total - free: the reserve counts as in use
    assert m["vramkit_gpu_memory_used_bytes"] == [(labels, float(in_use))]
    assert m["vramkit_gpu_memory_total_bytes"] == [(labels, float(16376 * MiB))]
    assert m["vramkit_gpu_memory_used_ratio"][0][1] == pytest.approx(in_use / g.total)
    assert m["vramkit_gpu_temperature_celsius"] == [(labels, 47.0)]
    assert m["vramkit_gpu_utilization_ratio"] == [(labels, 0.12)]
    assert "vramkit_plan_predicted_peak_bytes" not in m


def test_two_gpus_each_labelled(monkeypatch):
    sc.two_gpus().install(monkeypatch)
    m = scrape()
    assert [lab["index"] for lab, _ in m["vramkit_gpu_memory_total_bytes"]] == ["0", "1"]
    assert {lab["name"] for lab, _ in m["vramkit_gpu_up"]} == {"NVIDIA GeForce RTX 4080", "NVIDIA GeForce RTX 4090"}
    ratios = {lab["index"]: v for lab, v in m["vramkit_gpu_memory_used_ratio"]}
    assert ratios["0"] > 0.85 and ratios["1"] < 0.05


def test_a_lost_gpu_is_up_0_and_exports_no_numbers(monkeypatch):
    fake = sc.two_gpus().install(monkeypatch)
    fake.lose(1)
    m = scrape()
    up = {lab["index"]: v for lab, v in m["vramkit_gpu_up"]}
    assert up == {"0": 1.0, "1": 0.0}
    assert [lab["index"] for lab, _ in m["vramkit_gpu_memory_used_bytes"]] == ["0"]


def test_the_running_plans_peak(monkeypatch):
    sc.card_16gb_foreign_6gib().install(monkeypatch)
    record = {"name": "vramkit-optimized", "preset": "optimized", "model": "qwen2.5-coder-14b-instruct-gptq-int4"}
    m = scrape(lambda: (record, 14_844_002_448))
    assert m["vramkit_plan_predicted_peak_bytes"] == [
        ({"service": "vramkit-optimized", "preset": "optimized", "model": "qwen2.5-coder-14b-instruct-gptq-int4"},
         14_844_002_448.0)]
