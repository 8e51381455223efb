"""The adapter's decode share (services/sglang-kt/kt_compat/vramkit_gpu_share.py): which slots of a CPU layer's decode
batch go to the GPU over the bus and which to the int4 kernel, and what the setting takes. The GPU side (marlin
reading pinned host RAM) runs on the GPU host: benchmarks/gpu/gpu_share_bench.py."""
from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def gs():
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(ROOT / "services" / "sglang-kt" / "kt_compat"))
        import vramkit_gpu_share
        yield vramkit_gpu_share


@pytest.mark.parametrize("raw, want", [(None, None), ("", None), ("0", None), ("off", None), ("0.4", 0.4),
                                       (" 0.25 ", 0.25)])
def test_the_share_is_a_fraction_or_off(gs, raw, want):
    env = {} if raw is None else {gs.ENV: raw}
    assert gs.fraction(env) == want


@pytest.mark.parametrize("raw", ["1", "1.5", "-0.1", "half", "nan"])
def test_a_share_outside_zero_to_one_stops_the_server_in_one_line(gs, raw):
    with pytest.raises(SystemExit) as e:
        gs.fraction({gs.ENV: raw})
    msg = str(e.value)
    assert gs.ENV in msg and repr(raw) in msg and "\n" not in msg


@pytest.mark.parametrize("n, frac", [(1, 0.4), (4, 0.4), (4, 0.5), (3, 0.25), (8, 0.9)])
def test_each_slot_goes_to_one_side_and_the_gpu_takes_the_lowest_share_of_the_call_s_experts(gs, n, frac):
    experts, k = 128, 8
    gen = torch.Generator().manual_seed(n)
    ids = torch.rand(n, experts, generator=gen).topk(k, -1).indices.to(torch.int32)
    ids[0, 1] = -1                                    # a slot masked before (SGLang's -1): neither side takes it
    gpu, cpu = gs.split_ids(ids, frac, experts)
    valid = ids >= 0
    assert torch.equal((gpu >= 0) ^ (cpu >= 0), valid)                        # every valid slot on exactly one side
    assert torch.equal(torch.where(gpu >= 0, gpu, cpu), torch.where(valid, ids, -1))
    used = torch.unique(ids[valid])                                            # sorted
    quota = round(len(used) * frac)
    assert torch.equal(torch.unique(gpu[gpu >= 0]), used[:quota])             # the lowest-numbered share
    assert torch.equal(torch.unique(cpu[cpu >= 0]), used[quota:])
    assert gpu.dtype == cpu.dtype == ids.dtype and gpu.shape == ids.shape


def test_a_call_whose_slots_are_all_masked_gives_neither_side_anything(gs):
    ids = torch.full((2, 8), -1, dtype=torch.int32)
    gpu, cpu = gs.split_ids(ids, 0.5, 128)
    assert (gpu == -1).all() and (cpu == -1).all()
