"""The caching-allocator model (vramkit/core/memory/torch_alloc.py) against the rules of PyTorch's
c10/cuda/CUDACachingAllocator.cpp, and the weight-load replay built on it (vramkit/core/memory/weight_load.py)."""
from __future__ import annotations

from vramkit import catalog
from vramkit.core.memory.torch_alloc import CachingAllocator, round_size, segment_size
from vramkit.core.memory.weight_load import replay_load
from vramkit.core.model.arch import weight_layout
from vramkit.core.plan.planner import weight_components

MiB = 1 << 20


def test_sizes_round_as_pytorch_does():
    assert round_size(1) == 512 and round_size(512) == 512 and round_size(513) == 1024
    assert segment_size(512) == 2 * MiB                 # small pool: 2 MiB segments
    assert segment_size(MiB) == 2 * MiB                 # 1 MiB is still "small"
    assert segment_size(MiB + 512) == 20 * MiB          # large, under 10 MiB: 20 MiB segments
    assert segment_size(10 * MiB) == 10 * MiB           # from 10 MiB: its own size, rounded to 2 MiB
    assert segment_size(11 * MiB) == 12 * MiB


def test_a_9_mib_tensor_reserves_a_20_mib_segment_and_the_rest_is_reused():
    a = CachingAllocator()
    a.malloc(9 * MiB)
    assert a.reserved == 20 * MiB and a.allocated == 9 * MiB
    a.malloc(9 * MiB)                                   # fits in the same segment's remainder
    assert a.reserved == 20 * MiB
    a.malloc(9 * MiB)                                   # 2 MiB left: a new segment
    assert a.reserved == 40 * MiB


def test_empty_cache_returns_only_wholly_free_segments():
    a = CachingAllocator()
    h1, h2 = a.malloc(9 * MiB), a.malloc(9 * MiB)
    h3 = a.malloc(64 * MiB)
    a.free(h1)
    a.free(h3)
    a.empty_cache()
    assert a.reserved == 20 * MiB                       # h2 pins its segment; h3's went back
    a.free(h2)                                          # merges with the free neighbours
    a.empty_cache()
    assert a.reserved == 0 and a.allocated == 0


def test_best_fit_takes_the_smallest_block_that_fits():
    a = CachingAllocator()
    big, small = a.malloc(40 * MiB), a.malloc(12 * MiB)
    a.free(big)
    a.free(small)
    a.malloc(12 * MiB)                                  # the 12 MiB segment, not a split of the 40 MiB one
    a.empty_cache()
    assert a.reserved == 12 * MiB


def test_empty_tensors_take_nothing():
    a = CachingAllocator()
    assert a.malloc(0) is None
    a.free(None)
    assert a.reserved == 0


def _layout(name, tp=1, rope=0):
    """The model's allocations with a rotary cache of `rope` bytes (context x head_dim x fp32)."""
    m = catalog.model(name)
    return weight_layout(m, tp, rope // (m.head_dim * 4))


def test_replay_holds_every_tensor_and_reserves_at_least_that():
    for name in ("qwen2.5-coder-14b-instruct-gptq-int4", "qwen2.5-coder-7b-instruct", "qwen2.5-0.5b-instruct"):
        m = catalog.model(name)
        for tp in (1, 2):
            rope = 32768 * m.head_dim * 4
            r = replay_load(_layout(name, tp, rope))
            tensors = sum(weight_components(m, tp).values()) + rope
            assert r.gpu_reserved_bytes >= r.gpu_tensor_bytes
            # marlin repacks GPTQ without changing its size; only the g_idx/qzeros it drops may differ
            assert abs(r.gpu_tensor_bytes - tensors) / tensors < 0.02, (name, tp)
            assert r.offloaded_bytes == 0


def test_tp2_halves_the_sharded_weights():
    name = "qwen2.5-coder-7b-instruct"
    one, two = replay_load(_layout(name, 1)), replay_load(_layout(name, 2))
    assert 0.49 < two.gpu_tensor_bytes / one.gpu_tensor_bytes < 0.51


def test_offload_moves_whole_parameters_until_the_budget_is_reached():
    layout = _layout("qwen2.5-coder-14b-instruct-gptq-int4")
    none = replay_load(layout)
    r = replay_load(layout, 2 * 1024 * MiB)
    assert 2 * 1024 * MiB <= r.offloaded_bytes < 2 * 1024 * MiB + 80 * MiB     # one gate_up qweight is 67.5 MiB
    assert none.gpu_tensor_bytes - r.gpu_tensor_bytes >= r.offloaded_bytes * 0.98


def test_the_rotary_cache_is_built_from_work_tensors_as_its_class_builds_it():
    """base.py's cache: positions, freqs, cos, sin, all freed after it (recorded on the Qwen3-MoE loads); YaRN's scales
    cos and sin by mscale, each a new tensor with the unscaled one freed at once (yarn.py); a class not replayed adds
    nothing. The 128K calibration point (YaRN x4 on the 7B GPTQ) lands at +0.10 % on the weights with them."""
    from dataclasses import replace

    from vramkit.core.model.arch import rope_build_temps, rope_cache_bytes
    m = catalog.model("qwen2.5-coder-7b-instruct-gptq-int4")
    half = rope_cache_bytes(m, 131072) // 2
    assert rope_build_temps(m, 131072) == (131072 * 4, half, half, half)
    yarn = replace(m, rope_scaling={"rope_type": "yarn", "factor": 4.0})
    assert rope_build_temps(yarn, 131072) == (131072 * 4, half, half, half, -3, half, half, -5)
    assert rope_build_temps(replace(m, rope_scaling={"rope_type": "llama3", "factor": 8.0}), 131072) == ()
    # the cache is kept and the work is not: the yarn load holds the same tensors and reserves at least as much
    plain, scaled = replay_load(weight_layout(m, 1, 131072)), replay_load(weight_layout(yarn, 1, 131072))
    assert plain.live_by_role == scaled.live_by_role and scaled.gpu_reserved_bytes >= plain.gpu_tensor_bytes
