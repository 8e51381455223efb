"""The planner against SGLang 0.5.15.post1's own memory code and the measured GPU runs.

Expected values come from two places only, never from the planner's output:
- MEASURED: /work/shared/gpu/README.md (copied into this repo's docs by the lead) and the real SGLang log
  of the diag run `gptq_graph_bs8_f080` (SGLang 0.5.15.post1, H100 limited to 16.00 GiB free by
  ballast.py; flags --mem-fraction-static 0.80 --chunked-prefill-size 2048 --cuda-graph-max-bs-decode 8):
      Load weight begin. avail mem=15.33 GB
      Load weight end. ... mem usage=9.41 GB.
      KV Cache is allocated. dtype: torch.float16, #tokens: 15493
      Capture target decode CUDA graph end. ... avail mem=2.51 GB.
      max_total_num_tokens=15493, ... max_running_requests=2048, context_len=32768
  SGLang's "GB" there is GiB: get_available_gpu_memory returns free / (1 << 30) (srt/utils/common.py:537).
- DERIVED by hand from SGLang's source (file:line cited at each test).
"""
from __future__ import annotations

import math
from dataclasses import replace

import pytest

from vramkit import catalog
from vramkit.core.plan import planner
from vramkit.core.plan.planner import Engine, Knobs, Target, plan
from vramkit.units import GiB, MiB

GPTQ14 = "qwen2.5-coder-14b-instruct-gptq-int4"
BF16_14 = "qwen2.5-14b-instruct"
Q05 = "qwen2.5-0.5b-instruct"

# MEASURED (log "Load weight begin. avail mem=15.33 GB", GiB): what SGLang found free on the emulated 16 GB card.
FREE_16GB_EMULATED = int(15.33 * GiB)


@pytest.fixture(scope="module")
def engine() -> Engine:
    return catalog.engine()


def _m(name):
    return catalog.model(name)


def _within(got: float, want: float, rel: float) -> bool:
    return abs(got - want) <= rel * abs(want)


def _measured_16gb(kv_dtype: str, engine: Engine) -> planner.Plan:
    # the diag run's flags: --mem-fraction-static 0.80 --chunked-prefill-size 2048 --cuda-graph-max-bs-decode 8
    return plan(_m(GPTQ14), Target(gpu=None, gpu_free_bytes=FREE_16GB_EMULATED),
                Knobs(kv_dtype=kv_dtype, mem_fraction=0.80, chunked_prefill=2048, cuda_graph_max_bs=8), engine)


# ----------------------------------------------------------------------------------------------
# KV bytes per token: pool_configurator.py:252 cell_size = get_num_kv_heads(tp) * (head_dim + v_head_dim)
#                     * num_layers * kv_size;  model_config.py:1013 get_num_kv_heads = max(1, kv_heads // tp)
# ----------------------------------------------------------------------------------------------
def test_kv_bytes_per_token_fp16_14b():
    # 8 kv heads x (128 + 128) x 48 layers x 2 B (fp16: the GPTQ checkpoint's torch_dtype) = 196,608;
    # the README's bf16 H100 run logged the same 196,608 B/token.
    assert planner.kv_bytes_per_token(_m(GPTQ14), "auto") == 2 * 48 * 8 * 128 * 2 == 196_608


def test_kv_bytes_per_token_fp8_is_half():
    assert planner.kv_bytes_per_token(_m(GPTQ14), "fp8_e5m2") == 2 * 48 * 8 * 128 * 1
    assert planner.kv_bytes_per_token(_m(GPTQ14), "fp8_e4m3") == 2 * 48 * 8 * 128 * 1


def test_kv_bytes_per_token_other_shapes():
    # qwen2.5-0.5b: 2 kv heads, head_dim 896/14 = 64, 24 layers, bf16
    assert planner.kv_bytes_per_token(_m(Q05), "auto") == 2 * 2 * 64 * 24 * 2
    # llama-3.1-8b: 8 kv heads, head_dim 4096/32 = 128, 32 layers, bf16
    assert planner.kv_bytes_per_token(_m("llama-3.1-8b-instruct"), "auto") == 8 * 2 * 128 * 32 * 2


# ----------------------------------------------------------------------------------------------
# The measured points, within 2 % (issue 2, "Done when")
# ----------------------------------------------------------------------------------------------
def test_measured_kv_pool_fp16_16gb(engine):
    p = _measured_16gb("auto", engine)
    assert _within(p.kv_pool_tokens, 15_493, 0.02), p.kv_pool_tokens      # MEASURED: log "#tokens: 15493"


def test_measured_kv_pool_fp8_16gb(engine):
    p = _measured_16gb("fp8_e5m2", engine)
    assert _within(p.kv_pool_tokens, 30_603, 0.02), p.kv_pool_tokens      # MEASURED: README, fp8_e5m2 at 0.80


def test_measured_weights_gptq_16gb(engine):
    p = _measured_16gb("auto", engine)
    assert _within(p.weights_bytes, 9.41 * GiB, 0.02), p.weights_bytes / GiB  # MEASURED: "mem usage=9.41 GB"
    assert p.weights_offloaded_bytes == 0


def test_measured_weights_bf16_14b(engine):
    p = plan(_m(BF16_14), Target(gpu=catalog.gpu("h100-80gb")), Knobs(mem_fraction=0.5), engine)
    assert _within(p.weights_bytes, 27.57 * GiB, 0.02), p.weights_bytes / GiB  # MEASURED: README, 27.57 GiB


def test_measured_kv_pool_bf16_14b_h100(engine):
    p = plan(_m(BF16_14), Target(gpu=catalog.gpu("h100-80gb")), Knobs(mem_fraction=0.5), engine)
    assert _within(p.kv_pool_tokens, 63_577, 0.02), p.kv_pool_tokens      # MEASURED: README, KV 63,577 tokens


def test_measured_startup_free_memory(engine):
    # MEASURED: "Capture target decode CUDA graph end ... avail mem=2.51 GB" (free once the server is up)
    p = _measured_16gb("auto", engine)
    assert abs(p.startup_free_bytes - 2.51 * GiB) <= 0.10 * GiB, p.startup_free_bytes / GiB


def test_measured_default_max_running_requests(engine):
    # MEASURED: log "max_running_requests=2048"; DERIVED: model_runner_kv_cache_mixin.py:1229
    # estimated = max(min(int(15493 / 32768 * 512), 4096), 2048) = 2048; min(2048, 15493 // 2) = 2048
    p = _measured_16gb("auto", engine)
    assert p.knobs.max_running == 2048


# ----------------------------------------------------------------------------------------------
# Longest request: tp_worker.py:455 get_worker_info: max_req_len = min(context_len - 1, pool - 1),
# max_req_input_len = max_req_len - 5; managers/utils.py:177 refuses len(input) >= max_req_input_len.
# ----------------------------------------------------------------------------------------------
def test_sglang_refusal_threshold_of_the_readme():
    # DERIVED: a 30,603-token pool, context 32,768 -> min(32767, 30602) - 5 = 30,597, the number in the
    # README's measured refusal "exceeds the maximum allowed length (30597 tokens)".
    assert min(32768 - 1, 30_603 - 1) - 5 == 30_597


@pytest.mark.parametrize("kv_dtype", ["auto", "fp8_e5m2"])
def test_max_request_tokens_follows_get_worker_info_when_pool_binds(kv_dtype, engine):
    p = _measured_16gb(kv_dtype, engine)
    assert p.kv_pool_tokens < p.context_len
    assert p.max_request_tokens == min(p.context_len - 1, p.kv_pool_tokens - 1) - 5


def test_max_request_tokens_when_context_binds(engine):
    # 0.5B on an H100: the pool is far larger than the 32,768 context -> 32,767 - 5
    p = plan(_m(Q05), Target(gpu=catalog.gpu("h100-80gb")), Knobs(mem_fraction=0.5), engine)
    assert p.kv_pool_tokens > 32768
    assert p.max_request_tokens == 32768 - 1 - 5


def test_60k_request_on_16gb_is_refused_like_the_measured_run(engine):
    # MEASURED: "Input length (60000 tokens) exceeds the maximum allowed length (30597 tokens)"
    p = plan(_m(GPTQ14), Target(gpu=None, gpu_free_bytes=FREE_16GB_EMULATED),
             Knobs(context=60_000, kv_dtype="fp8_e5m2", mem_fraction=0.80, chunked_prefill=2048, cuda_graph_max_bs=8),
             engine)
    assert not p.fits
    assert p.max_request_tokens < 60_000
    assert any("60,000" in r for r in p.reasons), p.reasons


# ----------------------------------------------------------------------------------------------
# SGLang's default mem_fraction_static: server_args.py:3469 _handle_gpu_memory_settings (gpu_mem is
# nvidia-smi memory.total in MiB, common.py:638). Computed by hand:
#   reserved = 512 + max(chunk, 2048) * 1.5 + [decode graphs on] max_bs * 2 + tp * pp / 8 * 1024
#              + [prefill graphs on] len(prefill sizes) * 8;  floor 10 * 1024 when gpu_mem > 60 * 1024
#   fraction = round((gpu_mem - reserved) / gpu_mem, 3)
# ----------------------------------------------------------------------------------------------
DEFAULT_FRACTION_CASES = [
    # (MiB, chunk, decode max_bs (0 = graphs off), tp, prefill graphs, expected)
    # 16311 (5060 Ti): chunk 2048, bs 8 -> 512 + 3072 + 16 + 128 = 3728 -> 12583/16311 = 0.77144
    (16311, 2048, 8, 1, False, 0.771),
    # 24564 (4090): chunk 2048, bs 24 -> 512 + 3072 + 48 + 128 = 3760 -> 20804/24564 = 0.84693
    (24564, 2048, 24, 1, False, 0.847),
    # 81559 (H100): chunk 8192, bs 256 -> 512 + 12288 + 512 + 128 = 13440 (> 10240 floor) -> 68119/81559 = 0.83521
    (81559, 8192, 256, 1, False, 0.835),
    # 81559, small chunk, graphs off: 512 + 3072 + 128 = 3712 -> floor 10240 -> 71319/81559 = 0.87445
    (81559, 2048, 0, 1, False, 0.874),
    # 16311, tp 2: + 2/8*1024 = 256 -> 3856 -> 12455/16311 = 0.76360
    (16311, 2048, 8, 2, False, 0.764),
    # 16311, decode graphs off: 512 + 3072 + 128 = 3712 -> 12599/16311 = 0.77242
    (16311, 2048, 0, 1, False, 0.772),
    # 16311, prefill graphs on: sizes <= 2048 (server_args.py:3759): 8 + 14 + 8 + 8 + 4 = 42 -> +336
    #   -> 4064 -> 12247/16311 = 0.75084
    (16311, 2048, 8, 1, True, 0.751),
]


@pytest.mark.parametrize("mib,chunk,bs,tp,prefill,want", DEFAULT_FRACTION_CASES)
def test_sglang_default_mem_fraction_by_hand(mib, chunk, bs, tp, prefill, want):
    assert planner.sglang_default_mem_fraction(mib * MiB, chunk, bs, tp, prefill) == want


@pytest.mark.parametrize("gpu,chunk,bs,frac", [
    ("rtx-5060-ti-16gb", 2048, 8, 0.771),   # server_args.py:3499 gpu_mem < 20 GiB: 2048, 8
    ("rtx-4090-24gb", 2048, 24, 0.847),     # < 35 GiB: 2048, 24 (tp < 4)
    ("h100-80gb", 8192, 256, 0.835),        # < 90 GiB: 8192, 256 (tp < 4)
])
def test_plan_resolves_sglang_defaults_for_the_target_card(gpu, chunk, bs, frac, engine):
    p = plan(_m(GPTQ14), Target(gpu=catalog.gpu(gpu)), Knobs(), engine)
    assert (p.knobs.chunked_prefill, p.knobs.cuda_graph_max_bs, p.knobs.mem_fraction) == (chunk, bs, frac)


def test_default_graph_batch_grows_with_tp4():
    # server_args.py:3503-3535: tp >= 4 gets 80 on < 35 GiB cards, 512 on < 90 GiB cards
    assert planner.sglang_default_cuda_graph_max_bs(24564 * MiB, 4) == 80
    assert planner.sglang_default_cuda_graph_max_bs(81559 * MiB, 4) == 512
    assert planner.sglang_default_chunked_prefill(200 * 1024 * MiB) == 16384


# ----------------------------------------------------------------------------------------------
# KV pool formula: model_runner_kv_cache_mixin.py:115 rest = avail - pre_model_load * (1 - frac);
# pool_configurator.py:272 tokens = rest // cell_size
# ----------------------------------------------------------------------------------------------
def test_pool_grows_with_fraction_at_the_slope_sglang_gives(engine):
    # d(rest)/d(frac) = pre_model_load_memory: +0.05 adds 0.05 * 15.33 GiB of KV
    a = _measured_16gb("fp8_e5m2", engine)
    b = plan(_m(GPTQ14), Target(gpu=None, gpu_free_bytes=FREE_16GB_EMULATED),
             Knobs(kv_dtype="fp8_e5m2", mem_fraction=0.85, chunked_prefill=2048, cuda_graph_max_bs=8), engine)
    want = 0.05 * FREE_16GB_EMULATED / 98_304
    assert abs((b.kv_pool_tokens - a.kv_pool_tokens) - want) <= 2


def test_weights_beyond_the_static_budget_refuse_to_start(engine):
    # model_runner_kv_cache_mixin.py:122: rest <= 0 -> ValueError "Loaded weights leave no GPU memory for the KV cache"
    p = plan(_m(BF16_14), Target(gpu=catalog.gpu("rtx-5060-ti-16gb")), Knobs(mem_fraction=0.8), engine)
    assert p.kv_pool_tokens == 0
    assert not p.fits
    assert any("mem_fraction_static" in r for r in p.reasons), p.reasons


# ----------------------------------------------------------------------------------------------
# One 131,072-token request of the 14B GPTQ on 16 GB (issue 2 "Done when")
# DERIVED: fp8 KV for it = 131072 x 98,304 B = 12 GiB. embed_tokens + lm_head stay on the GPU (OffloaderV1
# offloads decoder layers only): 2 x 152064 x 5120 x 2 B = 2.90 GiB. 12 + 2.90 = 14.9 GiB > 0.80 x 15.33 =
# 12.26 GiB of static budget, so no amount of --cpu-offload-gb makes it fit (config/presets.toml 128k comment).
# ----------------------------------------------------------------------------------------------
def test_derivation_of_the_128k_verdict():
    m = _m(GPTQ14)
    kv = 131_072 * planner.kv_bytes_per_token(m, "fp8_e5m2")
    embed_and_head = 2 * m.vocab_size * m.hidden_size * 2
    assert kv == 12 * GiB
    assert kv + embed_and_head > 0.80 * FREE_16GB_EMULATED


TARGETS_16GB = {
    "gpu rtx-5060-ti-16gb": Target(gpu=catalog.gpu("rtx-5060-ti-16gb"), host_ram_available_bytes=64 * GiB),
    "gpu-free-gib 15.33": Target(gpu=None, gpu_free_bytes=FREE_16GB_EMULATED, host_ram_available_bytes=64 * GiB),
}
KNOBS_128K = dict(catalog.preset("128k").knobs)


@pytest.mark.parametrize("target", TARGETS_16GB.values(), ids=TARGETS_16GB.keys())
@pytest.mark.parametrize("offload", [0, "auto"])
def test_128k_request_of_14b_does_not_fit_16gb(target, offload, engine):
    p = plan(_m(GPTQ14), target, Knobs(**(KNOBS_128K | {"cpu_offload_gib": offload})), engine)
    assert p.context_len == 131_072
    assert not p.fits
    assert p.reasons and all(isinstance(r, str) and r for r in p.reasons)
    assert any("131,072" in r for r in p.reasons), p.reasons
    assert p.max_request_tokens < 131_072


@pytest.mark.parametrize("offload", [0, "auto"])
def test_128k_alternatives_are_replanned_and_ranked(offload, engine):
    target = TARGETS_16GB["gpu rtx-5060-ti-16gb"]
    knobs = Knobs(**(KNOBS_128K | {"cpu_offload_gib": offload}))
    p = plan(_m(GPTQ14), target, knobs, engine)
    assert p.alternatives, "a plan that does not fit must offer alternatives"
    for alt in p.alternatives:
        again = plan(_m(GPTQ14), target, replace(knobs, **alt.knobs), engine, with_alternatives=False)
        assert again.fits == alt.fits, alt.change
        assert again.decode_tok_s_ceiling == pytest.approx(alt.decode_tok_s_ceiling), alt.change
        assert alt.change and alt.cost
    fits = [a.fits for a in p.alternatives]
    assert fits == sorted(fits, reverse=True), "fitting alternatives come first"
    assert any(fits), "on 16 GB a shorter context (or a second card) must fit"


def _offloaded_as_sglang(plan_, gib: int, model) -> bool:
    """SGLang's OffloaderV1 moves whole parameters, layer by layer, until the budget is reached: the
    offloaded bytes reach --cpu-offload-gb and pass it by less than one parameter (the largest one here is
    the 4-bit gate_up qweight, hidden x 2 x intermediate / 2 bytes)."""
    largest = model.hidden_size * 2 * model.intermediate_size // 2
    return gib * GiB <= plan_.weights_offloaded_bytes < gib * GiB + largest


def test_128k_of_14b_fits_24gb_with_the_least_offload(engine):
    # config/presets.toml: "On 24 GB+, MODEL=qwen2.5-coder-14b-... fits with offload"
    target = Target(gpu=catalog.gpu("rtx-4090-24gb"), host_ram_available_bytes=64 * GiB)
    p = plan(_m(GPTQ14), target, Knobs(**KNOBS_128K), engine)
    assert p.fits, p.reasons
    n = p.knobs.cpu_offload_gib
    assert isinstance(n, int) and n > 0      # 12 GiB of KV + 9.4 GiB of weights > 0.80 x ~23.3 GiB
    # "auto" is the LEAST that fits: one GiB less must not fit
    less = plan(_m(GPTQ14), target, Knobs(**(KNOBS_128K | {"cpu_offload_gib": n - 1})), engine)
    assert not less.fits
    # --cpu-offload-gb N moves N GiB of decoder-layer parameters, rounded up to a whole parameter
    assert _offloaded_as_sglang(p, n, _m(GPTQ14))
    # pinned host RAM: the offloaded weights, each tensor at the next power of two (PyTorch's host allocator)
    assert p.host_ram_bytes == p.weights_pinned_host_bytes > p.weights_offloaded_bytes


def test_offload_ceiling_is_bound_by_pcie(engine):
    # issue 2: with weight offload the decode ceiling is PCIe bandwidth / offloaded bytes (at best)
    gpu = catalog.gpu("rtx-5060-ti-16gb")
    assert gpu.pcie_bytes_s == pytest.approx(3.938e9 * 8)       # PCIe 5.0 x8, 128b/130b
    p = plan(_m(GPTQ14), Target(gpu=gpu), Knobs(mem_fraction=0.8, cpu_offload_gib=4), engine)
    assert _offloaded_as_sglang(p, 4, _m(GPTQ14))
    assert p.decode_tok_s_ceiling <= gpu.pcie_bytes_s / p.weights_offloaded_bytes


def test_decode_ceiling_is_bound_by_gpu_bandwidth(engine):
    # a decode step reads at least lm_head + every decoder layer once: ceiling <= bandwidth / those bytes
    gpu = catalog.gpu("rtx-5060-ti-16gb")
    p = plan(_m(GPTQ14), Target(gpu=gpu), Knobs(kv_dtype="fp8_e5m2", mem_fraction=0.8), engine)
    c = p.weights_by_component
    assert p.decode_tok_s_ceiling <= gpu.bandwidth_bytes_s / (c["lm_head"] + c["attention"] + c["mlp"])
    assert p.decode_tok_s_ceiling > 0
    longer = plan(_m(GPTQ14), Target(gpu=gpu), Knobs(kv_dtype="auto", mem_fraction=0.8), engine)
    assert longer.decode_tok_s_ceiling < p.decode_tok_s_ceiling      # fp16 KV reads twice the KV bytes


# ----------------------------------------------------------------------------------------------
# Host RAM for the hierarchical cache: --hicache-size is GB (server_args.py:1996, pool_host/base.py:104
# host_size * 1e9); base.py:126 refuses more than psutil available - 10 GiB.
# ----------------------------------------------------------------------------------------------
def test_hicache_host_ram_bytes_are_decimal_gb(engine):
    p = plan(_m(GPTQ14), Target(gpu=catalog.gpu("rtx-5060-ti-16gb"), host_ram_available_bytes=64 * GiB),
             Knobs(kv_dtype="fp8_e5m2", mem_fraction=0.8, hicache_gb=16), engine)
    assert p.host_ram_bytes == 16 * 10**9


@pytest.mark.parametrize("available_gib,ok", [(20, False), (26, True), (64, True)])
def test_hicache_needs_pool_plus_10gib_available(available_gib, ok, engine):
    # 16e9 B = 14.90 GiB; + 10 GiB reserve = 24.90 GiB needed
    p = plan(_m(GPTQ14), Target(gpu=catalog.gpu("rtx-5060-ti-16gb"), host_ram_available_bytes=available_gib * GiB),
             Knobs(kv_dtype="fp8_e5m2", mem_fraction=0.8, hicache_gb=16, context=16384), engine)
    assert (not any("host RAM" in r for r in p.reasons)) == ok, p.reasons


def test_hicache_check_counts_pinned_offloaded_weights(engine):
    # 26 GiB available: 3 GiB of offloaded weights pinned first -> 23 GiB; minus the 10 GiB reserve = 13 GiB
    # < 16e9 B (14.90 GiB) of host pool: SGLang raises "Not enough host memory available"
    p = plan(_m(GPTQ14), Target(gpu=catalog.gpu("rtx-4090-24gb"), host_ram_available_bytes=26 * GiB),
             Knobs(**(KNOBS_128K | {"cpu_offload_gib": 3, "hicache_gb": 16})), engine)
    assert _offloaded_as_sglang(p, 3, _m(GPTQ14))
    assert not p.fits


# ----------------------------------------------------------------------------------------------
# Tensor parallelism
# ----------------------------------------------------------------------------------------------
def test_tp2_halves_kv_per_rank_for_8_kv_heads():
    m = _m(GPTQ14)
    assert planner.kv_bytes_per_token(m, "auto", tp=2) == 196_608 // 2      # 4 heads per rank
    assert planner.kv_bytes_per_token(m, "auto", tp=8) == 196_608 // 8      # 1 head per rank


@pytest.mark.parametrize("name", [GPTQ14, BF16_14, "llama-3.1-8b-instruct"])
def test_tp2_weights_per_rank_about_half(name):
    one = sum(planner.weight_components(_m(name), 1).values())
    two = sum(planner.weight_components(_m(name), 2).values())
    # every linear and the vocabulary split; norms (and GPTQ's row-parallel g_idx) are replicated
    assert 0.49 * one <= two <= 0.53 * one, two / one


def test_kv_heads_replicated_when_tp_exceeds_kv_heads():
    # model_config.py:1020 max(1, 2 // 4) = 1 head per rank for qwen2.5-0.5b (2 kv heads), not 0 and not 0.5
    m = _m(Q05)
    one_head = 1 * (64 + 64) * 24 * 2
    assert planner.kv_bytes_per_token(m, "auto", tp=2) == one_head
    assert planner.kv_bytes_per_token(m, "auto", tp=4) == one_head
    # linear.py:950 QKVParallelLinear: tp >= kv heads -> 1 kv head per rank (replicated): k and v of
    # one head each per rank in the qkv projection
    comps4 = planner.weight_components(m, 4)
    assert comps4["attention"] > 0


def test_tp2_plan_uses_per_rank_kv(engine):
    p = plan(_m(GPTQ14), Target(gpu=catalog.gpu("rtx-5060-ti-16gb")),
             Knobs(kv_dtype="fp8_e5m2", mem_fraction=0.8, tp=2), engine)
    one = plan(_m(GPTQ14), Target(gpu=catalog.gpu("rtx-5060-ti-16gb")),
               Knobs(kv_dtype="fp8_e5m2", mem_fraction=0.8, tp=1), engine)
    assert p.kv_bytes_per_token == 98_304 // 2
    # per rank the weights halve AND each token costs half: more than twice the tokens
    assert p.kv_pool_tokens > 2 * one.kv_pool_tokens


def test_tp_that_does_not_divide_the_heads_does_not_fit(engine):
    p = plan(_m(Q05), Target(gpu=catalog.gpu("rtx-4090-24gb")), Knobs(mem_fraction=0.8, tp=4), engine)
    assert not p.fits


# ----------------------------------------------------------------------------------------------
# YaRN: the context SGLang derives (hf_transformers/common.py:380 get_context_length: factor dropped when
# original_max_position_embeddings is in rope_scaling, so the context comes from max_position_embeddings)
# ----------------------------------------------------------------------------------------------
def test_yarn_factor_4_for_131072_on_a_32768_qwen():
    assert planner.context_and_yarn(_m(GPTQ14), 131_072) == (131_072, 4.0)


def test_native_context_needs_no_yarn():
    assert planner.context_and_yarn(_m(GPTQ14), 32_768) == (32_768, None)
    assert planner.context_and_yarn(_m(GPTQ14), 8_192) == (32_768, None)
    # Llama 3.1 is natively 131,072 (llama3 rope: get_context_length keeps factor 1)
    assert planner.context_and_yarn(_m("llama-3.1-8b-instruct"), 131_072) == (131_072, None)


@pytest.mark.parametrize("context", [40_000, 65_536, 100_000])
def test_yarn_context_covers_the_target(context):
    ctx, factor = planner.context_and_yarn(_m(GPTQ14), context)
    assert factor is not None and factor > 1
    assert ctx >= context
    assert ctx == int(32_768 * factor)
    assert math.isfinite(factor)


def test_offload_keeps_one_layer_on_the_gpu_while_it_runs(engine):
    # SGLang's OffloaderV1 copies an offloaded layer's parameters to the GPU for its forward: one decoder
    # layer's bytes beside the prefill activations, and one in the decode graphs' pool
    m = _m(GPTQ14)
    c = planner.weight_components(m)
    per_layer = (c["attention"] + c["mlp"] + 2 * m.num_layers * m.hidden_size * m.dtype_bytes) // m.num_layers
    target = Target(gpu=catalog.gpu("rtx-4090-24gb"), host_ram_available_bytes=64 * GiB)
    base = Knobs(kv_dtype="fp8_e5m2", mem_fraction=0.8, context=32768)
    p0 = plan(m, target, base, engine)
    p2 = plan(m, target, replace(base, cpu_offload_gib=2), engine)
    act0, act2 = p0.startup_free_bytes - p0.headroom_bytes, p2.startup_free_bytes - p2.headroom_bytes
    assert act2 - act0 == per_layer
    # and without decode graphs the pool copy is gone, the prefill one stays
    p2e = plan(m, target, replace(base, cpu_offload_gib=2, cuda_graph_max_bs=0), engine)
    p0e = plan(m, target, replace(base, cuda_graph_max_bs=0), engine)
    assert (p2e.startup_free_bytes - p2e.headroom_bytes) - (p0e.startup_free_bytes - p0e.headroom_bytes) == per_layer
    assert p2e.startup_free_bytes - p2.startup_free_bytes == engine.decode_graph + per_layer
