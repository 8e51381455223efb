"""Which GPUs `vramkit up` plans for, measures and starts on (NVML faked at the hardware boundary).

SGLang sizes every tensor-parallel rank from the smallest free memory among its GPUs, so the plan for
`--gpu auto` must read the cards the server will use, not GPU 0 by habit.
"""
from __future__ import annotations

import argparse

import nvml_scenarios as sc
import pytest

from vramkit import catalog
from vramkit.adapters import nvml
from vramkit.commands.plan import add_plan_arguments, request_from_args
from vramkit.errors import Exit, VramkitError
from vramkit.launch import checks as launch_checks
from vramkit.launch import steps
from vramkit.launch.resolve import nvml_gpu, resolve
from vramkit.launch.up import in_use

GiB = 1 << 30


def _free(snap, i):
    return int(snap.gpus[i].free_bytes)


def test_auto_plans_for_the_gpu_the_server_uses(monkeypatch):
    sc.two_gpus().install(monkeypatch)            # GPU 0: a 16 GB card nearly full; GPU 1: an idle 24 GB card
    snap = nvml.read_snapshot(with_processes=False)
    spec, free = nvml_gpu(1, [1], snap)
    assert "4090" in spec.label and free == _free(snap, 1) and free > 20 * GiB
    spec0, free0 = nvml_gpu(1, [0], snap)
    assert "4080" in spec0.label and free0 == _free(snap, 0) < 3 * GiB
    # a catalogued card keeps its SM count and compute capability (marlin's workspace, gpt-oss's MXFP4 layout)
    assert (spec.sm_count, spec.compute_capability) == (128, (8, 9))


def test_tensor_parallel_plans_for_the_smallest_free_card(monkeypatch):
    sc.two_gpus().install(monkeypatch)
    snap = nvml.read_snapshot(with_processes=False)
    spec, free = nvml_gpu(2, None, snap)          # ranks on GPUs 0 and 1
    assert free == min(_free(snap, 0), _free(snap, 1)) == _free(snap, 0)
    assert spec.memory_total_bytes == min(int(g.total_bytes) for g in snap.gpus)


def test_a_gpu_that_is_not_there_is_one_clear_error(monkeypatch):
    sc.two_gpus().install(monkeypatch)
    with pytest.raises(VramkitError) as e:
        nvml_gpu(1, [5])
    assert e.value.code == Exit.NO_GPU and "GPU 5 is not there: NVML sees 2" in e.value.what
    with pytest.raises(VramkitError) as e:
        nvml_gpu(4)                               # tp 4 on two cards
    assert e.value.code == Exit.NO_GPU


def test_no_driver_is_no_gpu(monkeypatch):
    sc.driver_missing().install(monkeypatch)
    with pytest.raises(VramkitError) as e:
        nvml_gpu(1)
    assert e.value.code == Exit.NO_GPU


def test_vram_budget_base_is_the_fullest_server_gpu(monkeypatch):
    sc.two_gpus().install(monkeypatch)
    snap = nvml.read_snapshot(with_processes=False)
    assert in_use(snap, [1]) == snap.gpus[1].in_use_bytes < 2 * GiB
    assert in_use(snap, [0, 1]) == snap.gpus[0].in_use_bytes > 13 * GiB
    assert in_use(None, [0]) is None               # unknown is not 0: the budget says what it assumed


@pytest.mark.parametrize("ids, tp, expected", [(None, 1, [0]), (None, 2, [0, 1]), ([1], 1, [1]), ([1, 0], 1, [1]),
                                               ([1, 0], 2, [1, 0])])
def test_server_gpu_ids(ids, tp, expected):
    spec = steps.LaunchSpec(name="t", runtime="native", gpu_ids=ids)
    assert steps.server_gpu_ids(spec, tp) == expected


def test_too_few_gpus_named_for_tp_is_bad_input_not_a_silent_swap():
    spec = steps.LaunchSpec(name="t", runtime="native", gpu_ids=[3])
    with pytest.raises(VramkitError) as e:
        steps.server_gpu_ids(spec, 2)
    assert e.value.code == Exit.BAD_INPUT and "names 1 GPU(s) for tensor parallel size 2" in e.value.what


@pytest.mark.parametrize("text", ["foo", "0,x", "-1", "0,0"])
def test_bad_gpus_flag_is_one_clear_error(text):
    from vramkit.commands.launch import _gpu_ids
    with pytest.raises(VramkitError) as e:
        _gpu_ids(text)
    assert e.value.code == Exit.BAD_INPUT


def _gpu_checks(tp, gpu_ids, gpu_count):
    ap = argparse.ArgumentParser()
    add_plan_arguments(ap)
    r = resolve(request_from_args(ap.parse_args(["--preset", "optimized", "--gpu", "rtx-4090-24gb", "--tp", str(tp)])))
    spec = steps.LaunchSpec(name="t", runtime="native", gpu_ids=gpu_ids)
    checks = launch_checks.preflight(r, spec, gpu_present=True, docker_check=None, host_ram=lambda: 256 * GiB,
                                memlock=lambda: (None, None), port_free=lambda host, port: True, gpu_count=gpu_count)
    return [c for c in checks if c.name == "gpus"]


def test_preflight_refuses_gpus_nvml_does_not_see():
    assert _gpu_checks(1, [1], gpu_count=2) == []
    [c] = _gpu_checks(1, [5], gpu_count=2)            # a named --gpu skips NVML's plan: preflight catches it
    assert not c.ok and c.code == Exit.NO_GPU and "GPU 5 is not there: NVML sees 2" in c.detail
    [c] = _gpu_checks(2, None, gpu_count=1)
    assert not c.ok and "tensor parallel size 2 needs 2 GPUs, NVML sees 1" in c.detail


# ----------------------------------------------------------------------------------------------
# a card the catalog lacks: refused, or planned with the figures the user gives (never another card's)
# ----------------------------------------------------------------------------------------------
def _uncatalogued() -> sc.FakeNvml:
    """An RTX A2000 12GB (288 GB/s, PCIe 4.0 x16): config/gpus.toml does not list it."""
    return sc.FakeNvml([sc.FakeGpu(name="NVIDIA RTX A2000 12GB", uuid="GPU-A2000-0000", total=12282 << 20,
                                   reserved=300 << 20, used=0, cc=(8, 6))])


def _plan_args(*argv):
    import argparse
    p = argparse.ArgumentParser()
    add_plan_arguments(p)
    return request_from_args(p.parse_args(["--gpu", "auto", "--host-ram-gib", "64", *argv]))


def test_an_uncatalogued_card_is_refused_without_its_figures(monkeypatch):
    _uncatalogued().install(monkeypatch)
    with pytest.raises(VramkitError) as e:
        resolve(_plan_args(), read_gpu=nvml_gpu)
    assert e.value.code == Exit.BAD_INPUT
    assert "RTX A2000" in e.value.what and "--gpu-bandwidth-gbs" in e.value.todo and "--gpu-pcie" in e.value.todo
    with pytest.raises(VramkitError) as e:                    # half the figures is still a guess
        resolve(_plan_args("--gpu-bandwidth-gbs", "448"), read_gpu=nvml_gpu)
    assert "--gpu-pcie" in e.value.todo


def test_an_uncatalogued_card_is_planned_with_the_given_figures(monkeypatch):
    _uncatalogued().install(monkeypatch)
    r = resolve(_plan_args("--gpu-bandwidth-gbs", "448", "--gpu-pcie", "4x16"), read_gpu=nvml_gpu)
    assert (r.gpu.bandwidth_bytes_s, r.gpu.pcie_gen, r.gpu.pcie_lanes) == (448e9, 4, 16)
    assert r.gpu.compute_capability == (8, 6)               # from NVML: the catalog has no twin to take it from
    faster = resolve(_plan_args("--gpu-bandwidth-gbs", "896", "--gpu-pcie", "4x16"), read_gpu=nvml_gpu)
    assert faster.plan.decode_tok_s_ceiling > 1.5 * r.plan.decode_tok_s_ceiling


@pytest.mark.parametrize("argv", [("--gpu-pcie", "4"), ("--gpu-pcie", "7x16"), ("--gpu-pcie", "4x3"),
                                  ("--gpu-bandwidth-gbs", "0"), ("--gpu-bandwidth-gbs", "fast")])
def test_bad_card_figures_are_exit_64(monkeypatch, argv):
    _uncatalogued().install(monkeypatch)
    with pytest.raises(VramkitError) as e:
        resolve(_plan_args("--gpu-bandwidth-gbs", "448", "--gpu-pcie", "4x16", *argv), read_gpu=nvml_gpu)
    assert e.value.code == Exit.BAD_INPUT


def test_a_catalogued_card_takes_one_given_figure_over_its_own(monkeypatch):
    sc.two_gpus().install(monkeypatch)
    r = resolve(_plan_args("--gpu-bandwidth-gbs", "500"), read_gpu=nvml_gpu)
    assert r.gpu.bandwidth_bytes_s == 500e9 and (r.gpu.pcie_gen, r.gpu.pcie_lanes) == (4, 16)   # the 4080's link


# ----------------------------------------------------------------------------------------------
# compute capability from NVML (issue 19 item 3)
# ----------------------------------------------------------------------------------------------
def test_nvml_compute_capability_wins_over_the_catalogued_twin(monkeypatch):
    fake = sc.two_gpus()
    fake.gpus[0].cc = (12, 0)          # a card that says otherwise than its twin (the 4080, 8.9): NVML is the card
    fake.install(monkeypatch)
    spec, _ = nvml_gpu(1)
    assert spec.name == "rtx-4080-16gb" and spec.compute_capability == (12, 0)


def test_without_nvml_compute_capability_the_twin_answers(monkeypatch):
    fake = sc.two_gpus()
    fake.gpus[0].cc = None             # NotSupported: the catalogued twin's figure, not a guess
    fake.install(monkeypatch)
    spec, _ = nvml_gpu(1)
    assert spec.compute_capability == (8, 9)


@pytest.mark.parametrize("total_mib, expected", [(10240, "rtx-3080-10gb"), (12288, "rtx-3080-12gb")])
def test_one_nvml_name_two_memory_sizes_are_told_apart(monkeypatch, total_mib, expected):
    sc.FakeNvml([sc.FakeGpu(name="NVIDIA GeForce RTX 3080", uuid="GPU-3080", total=total_mib << 20,
                            reserved=200 << 20, used=0, cc=(8, 6))]).install(monkeypatch)
    spec, _ = nvml_gpu(1)
    assert spec.name == expected
    assert spec.bandwidth_bytes_s == catalog.gpu(expected).bandwidth_bytes_s   # 760 vs 912 GB/s


def test_free_memory_with_the_cards_figures_keeps_the_decode_ceiling():
    # issue 19: --gpu-free-gib dropped --gpu-bandwidth-gbs/--gpu-pcie, so no speed was printed
    import argparse
    p = argparse.ArgumentParser()
    add_plan_arguments(p)
    args = ["--gpu-free-gib", "14.8", "--host-ram-gib", "64"]
    slow = resolve(request_from_args(p.parse_args([*args, "--gpu-bandwidth-gbs", "448", "--gpu-pcie", "5x16"])))
    fast = resolve(request_from_args(p.parse_args([*args, "--gpu-bandwidth-gbs", "896", "--gpu-pcie", "5x16"])))
    assert slow.plan.free_at_start_bytes == fast.plan.free_at_start_bytes == int(14.8 * (1 << 30))
    assert fast.plan.decode_tok_s_ceiling == pytest.approx(2 * slow.plan.decode_tok_s_ceiling, rel=0.01)
    bare = resolve(request_from_args(p.parse_args(args)))      # no figures: no ceiling, not a borrowed one
    assert bare.plan.decode_tok_s_ceiling is None
    assert bare.plan.kv_pool_tokens == fast.plan.kv_pool_tokens   # the card's figures change the speed, not the fit
