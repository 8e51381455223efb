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


def test_a_huge_page_copy_holds_the_values_from_a_2_mib_boundary(gs):
    t = torch.arange(3 * 2**20 // 4, dtype=torch.int32).view(-1, 256)      # 3 MiB: spans two huge pages
    c = gs.huge_page_copy(t)
    assert torch.equal(c, t) and c.data_ptr() % gs.HUGE_PAGE == 0 and c.is_contiguous() and c.data_ptr() != t.data_ptr()
    c[0, 0] = -1                                                              # its own memory, writable
    assert t[0, 0] == 0


def test_with_the_share_on_the_prompt_path_registers_its_copies_on_huge_pages(gs, monkeypatch):
    """VRAMKIT_INT4_GPU_SHARE set: GpuPrefill's registered copies (its default pinning) are huge-page copies, at their
    own size; unset: the tensor's own storage as before. CUDA's runtime stood in for, as test_gpu_prefill's."""
    import vramkit_gpu_prefill as gp
    calls: list = []

    class Cudart:
        def cudaHostRegister(self, ptr, size, flags):
            calls.append((ptr, size))
            return 0
    monkeypatch.setattr(torch.cuda, "cudart", lambda: Cudart())
    monkeypatch.delenv(gp.PIN_ENV, raising=False)
    hf = {"hidden_size": 256, "moe_intermediate_size": 128, "num_experts": 4,
          "quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": 128, "sym": True}}
    engine = gp.GpuPrefill(8, hf, "", dummy=True)
    t = torch.ones(1000, dtype=torch.float16)
    monkeypatch.delenv(gs.ENV, raising=False)
    assert engine._pin(t).data_ptr() == t.data_ptr()
    monkeypatch.setenv(gs.ENV, "0.3")
    pinned = engine._pin(t)
    assert pinned.data_ptr() % gs.HUGE_PAGE == 0 and torch.equal(pinned, t) and calls[-1] == (pinned.data_ptr(), 2000)


def test_a_layer_whose_share_cannot_be_built_decodes_on_the_cpu_alone_and_says_why(gs, monkeypatch, tmp_path, capfd):
    """VRAMKIT_INT4_GPU_SHARE set and the layer's device views failing (an import, a copy not pinned): the int4
    kernel's wrapper still comes back, without a share, and the server log says why in the layer's line."""
    import shutil
    if not (shutil.which("cc") or shutil.which("gcc")):
        pytest.skip("no C compiler on this machine (the kernel is compiled at start)")
    import vramkit_int4_experts as vi

    def refuse(*_a, **_k):
        raise AssertionError("the GPU reads only page-locked, contiguous host memory")
    monkeypatch.setattr(gs, "BusExperts", refuse)
    monkeypatch.setenv(gs.ENV, "0.3")
    monkeypatch.setenv(vi.LIB_ENV, str(tmp_path))
    monkeypatch.setattr(vi, "_KERNEL", [])
    hf = {"num_experts": 8, "hidden_size": 256, "moe_intermediate_size": 128, "num_experts_per_tok": 2,
          "quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": 64, "sym": True, "desc_act": False}}
    h = vi.wrap(None, 3, hf, "", True, list(range(8)), 1, 0, last=True, bus={"w13_qweight": None})
    assert h.share is None and h.max_tokens >= 1
    line = next(ln for ln in capfd.readouterr().err.splitlines() if "layer 3:" in ln)
    assert f"{gs.ENV} not used: AssertionError: the GPU reads only page-locked" in line
    assert 3 not in gs.LAYERS


def test_a_drop_keeps_the_copies_the_share_reads_registered(monkeypatch):
    """GpuPrefill.drop(keep=...) after a prompt-path failure: the kept layers' copies stay registered and held, every
    other one is unregistered and let go (the decode share's layers read theirs over the bus)."""
    import vramkit_gpu_prefill as gp
    calls: list = []

    class Cudart:
        def cudaHostRegister(self, ptr, size, flags):
            return 0

        def cudaHostUnregister(self, ptr):
            calls.append(ptr)
            return 0
    monkeypatch.setattr(torch.cuda, "cudart", lambda: Cudart())
    monkeypatch.delenv(gp.PIN_ENV, raising=False)
    monkeypatch.delenv("VRAMKIT_INT4_GPU_SHARE", raising=False)
    hf = {"hidden_size": 256, "moe_intermediate_size": 128, "num_experts": 4,
          "quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": 128, "sym": True}}
    engine = gp.GpuPrefill(8, hf, "", dummy=True)
    for layer in (0, 1, 2):
        engine.host[layer] = {"w": engine._pin(torch.full((64,), layer, dtype=torch.int32))}
    keep = engine.host[1]["w"].data_ptr()
    gone = {engine.host[0]["w"].data_ptr(), engine.host[2]["w"].data_ptr()}
    engine.drop(keep=frozenset({1}))
    assert set(calls) == gone and list(engine.host) == [1] and engine._registered == [keep]
    assert int(engine.host[1]["w"][0]) == 1
