"""kt-kernel 0.5.1 as SGLang 0.5.15.post1 calls it, through the kit's adapter (issue 12), on this CPU.

Real kt-kernel (its AVX-512-BF16 or AMX build; the test skips, saying why, where the wheel or such a CPU
is missing), a real checkpoint written by tools/make_random_checkpoint.py. The one stand-in: a CPU-only
torch cannot pin memory, so `pin_memory=True` is dropped for these calls (the accelerator boundary; on the
GPU host the same calls pin, benchmarks/results/gpu/moe/).
"""
from __future__ import annotations

import importlib
import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
COMPAT = ROOT / "services" / "sglang-kt" / "kt_compat"
CFG = ROOT / "config" / "models" / "qwen3-coder-30b-a3b-instruct"

if importlib.util.find_spec("torch") is None:
    pytest.skip("torch is not installed here", allow_module_level=True)
# torch and kt-kernel are imported when the file's first test runs (`_kt_kernel`), not at collection, which every
# pytest-xdist worker does (torch alone takes seconds): these names are set there
torch: Any = None
kt_kernel: Any = None
vramkit_kt_compat: Any = None
IDS: Any = None
IDS_LIST = [[0, 5, 40, 41, 100, 127, 31, 32], [1, 2, 3, 4, 6, 7, 8, 9], [120, 121, 122, 123, 124, 125, 126, 33]]


@pytest.fixture(scope="module", autouse=True)
def _kt_kernel():
    global torch, kt_kernel, vramkit_kt_compat, IDS
    torch = importlib.import_module("torch")
    sys.path.insert(0, str(COMPAT))
    try:
        vramkit_kt_compat = importlib.import_module("vramkit_kt_compat")
        vramkit_kt_compat.install()
        kt_kernel = importlib.import_module("kt_kernel")
    except (ImportError, OSError) as e:       # no wheel for this Python, or libhwloc missing
        pytest.skip(f"kt-kernel 0.5.1 not importable here ({e}): make setup-kt-test")
    if kt_kernel.__cpu_variant__ not in ("amx", "avx512_bf16"):
        pytest.skip(f"this CPU gets kt-kernel's {kt_kernel.__cpu_variant__} build: no FP8/INT kernels")
    IDS = torch.tensor(IDS_LIST)


# The model's config with its experts narrowed: all 128 experts and top-8 as in the model, hidden 1024 and
# intermediate 256 (2048 and 768 in the model; each a multiple of the 128x128 FP8 blocks and of kt-kernel's AMX
# tiles, so every code path is the model's), a 256-token vocabulary (the writer skips embedding and lm_head no
# test reads). A sixth of the real experts' bytes: the suite's slowest file ran 45 s at the full width.
E, K, H, I = 128, 8, 1024, 256  # noqa: E741 - the paper names: experts, top-k, hidden, intermediate
NARROW = {"vocab_size": 256, "hidden_size": H, "moe_intermediate_size": I}


@pytest.fixture(autouse=True)
def no_pinning(monkeypatch):
    for name in ("empty", "zeros", "full"):
        real = getattr(torch, name)

        def unpinned(*a, _real=real, **kw):
            kw.pop("pin_memory", None)
            return _real(*a, **kw)
        monkeypatch.setattr(torch, name, unpinned)


@pytest.fixture(scope="module")
def narrow_cfg(tmp_path_factory) -> Path:
    cfg = tmp_path_factory.mktemp("cfg")
    (cfg / "config.json").write_text(json.dumps(json.loads((CFG / "config.json").read_text()) | NARROW))
    return cfg


@pytest.fixture(scope="module")
def fp8_layer(tmp_path_factory, narrow_cfg) -> Path:
    out, cfg = tmp_path_factory.mktemp("ck"), narrow_cfg
    sys.path.insert(0, str(ROOT / "tools"))
    from make_random_checkpoint import write  # in this process: torch is imported already (a new one: ~2 s)
    write(cfg, out, "fp8", 1, 1, 4 << 30)
    return out


@pytest.fixture(scope="module")
def fp8_experts(fp8_layer):
    """The checkpoint's layer-0 experts, dequantized to bf16 once for both tests' references (seconds each time)."""
    sys.path.insert(0, str(ROOT / "tools"))
    from make_random_checkpoint import checkpoint_experts
    return checkpoint_experts(fp8_layer, 0, E)


def sglang_style(path: Path, method: str, n_gpu: int, experts: int = E):
    """Exactly SGLang 0.5.15.post1's call (kt_ep_wrapper.KTEPWrapperMethod.create_weights)."""
    return kt_kernel.KTMoEWrapper(layer_idx=0, num_experts=experts, num_experts_per_tok=K, hidden_size=H,
                                  moe_intermediate_size=I, num_gpu_experts=n_gpu, cpuinfer_threads=2,
                                  threadpool_count=1, weight_path=str(path), chunked_prefill_size=512, method=method,
                                  max_deferred_experts_per_token=0)


def run_cpu_experts(w, x, ids, weights):
    out = torch.zeros(x.shape[0], H, dtype=torch.bfloat16)
    bsz = torch.tensor([x.shape[0]], dtype=torch.int32)
    w.cpu_infer.submit(w.moe.forward_task(bsz.data_ptr(), K, ids.data_ptr(), weights.data_ptr(), x.data_ptr(),
                                          out.data_ptr(), False))
    w.cpu_infer.sync()
    return out.float()


def reference(experts, x, ids, weights, n_gpu):
    """The CPU share SGLang expects back: the routed experts >= n_gpu, weighted, summed."""
    gate, up, down = experts
    ref = torch.zeros(x.shape[0], H)
    for b in range(x.shape[0]):
        for k in range(K):
            e = int(ids[b, k])
            if e >= n_gpu:
                xf = x[b].float()
                act = torch.nn.functional.silu(gate[e].float() @ xf) * (up[e].float() @ xf)
                ref[b] += weights[b, k] * (down[e].float() @ act)
    return ref




def test_adapter_turns_num_gpu_experts_into_the_first_n_mask():
    m = vramkit_kt_compat.first_n_mask(8, 3)
    assert m.tolist() == [True, True, True, False, False, False, False, False]
    assert vramkit_kt_compat.first_n_mask(8, None) is None
    with pytest.raises(ValueError):
        vramkit_kt_compat.first_n_mask(8, 9)
    assert getattr(kt_kernel.KTMoEWrapper, "_vramkit_compat", False)
    assert kt_kernel.KTMoEWrapper.set_capture_batch_sizes is not None   # SGLang's graph runner calls it


def test_fp8_experts_from_the_checkpoint_skip_the_gpu_ones(fp8_layer, fp8_experts):
    n_gpu = 32
    w = sglang_style(fp8_layer, "FP8", n_gpu)
    assert w.gpu_experts_mask[:n_gpu].all() and not w.gpu_experts_mask[n_gpu:].any()
    w.load_weights(torch.arange(E, dtype=torch.long))
    torch.manual_seed(0)
    x = torch.randn(3, H).to(torch.bfloat16)
    weights = torch.rand(3, K)
    out = run_cpu_experts(w, x, IDS, weights)
    ref = reference(fp8_experts, x, IDS, weights, n_gpu)
    assert out[1].abs().max() == 0                       # every expert of token 1 is a GPU expert
    for b in (0, 2):
        assert (out[b] - ref[b]).norm() / ref[b].norm() < 0.02


def test_amxint8_layout_converted_from_the_checkpoint(narrow_cfg, fp8_layer, fp8_experts, tmp_path, capsys):
    sys.path.insert(0, str(ROOT / "tools"))
    from make_random_checkpoint import write_kt_layout
    info = write_kt_layout(narrow_cfg, tmp_path, "AMXINT8", 2, layers=1, source=fp8_layer)
    err = capsys.readouterr().err               # the conversion's progress (issue 19 item 8): per layer, size, ETA
    assert "layer 1 of 1 (100 %)" in err and " written at " in err and "ETA 0 s" in err
    assert info["bytes"] == E * (3 * H * I + 4 * (2 * I + H))           # core/plan/kt_hybrid.cpu_expert_bytes
    assert sorted(p.name for p in tmp_path.iterdir()) == ["_layer_0"]
    w = sglang_style(tmp_path, "AMXINT8", 16)
    w.load_weights(torch.arange(E, dtype=torch.long))
    x = torch.randn(3, H).to(torch.bfloat16)
    weights = torch.rand(3, K)
    out = run_cpu_experts(w, x, IDS, weights)
    ref = reference(fp8_experts, x, IDS, weights, 16)
    assert out[1].abs().max() == 0                       # token 1 routes only to GPU experts (< 16)
    for b in (0, 2):
        assert (out[b] - ref[b]).norm() / ref[b].norm() < 0.06   # INT8 with a scale per row: ~3 % seen
    assert json.loads(json.dumps(info))["source"] == str(fp8_layer)


AVX2_SITE = ROOT / ".venv" / "kt-avx2"      # make setup-kt-test: config/versions.toml kt_kernel_avx2_pip
AVX2_RUN = """
import json, sys, torch
sys.path.insert(0, sys.argv[1])
import vramkit_kt_compat
vramkit_kt_compat.install()
import kt_kernel
for name in ("empty", "zeros", "full"):          # a CPU-only torch cannot pin memory (the accelerator boundary)
    real = getattr(torch, name)
    setattr(torch, name, lambda *a, _real=real, **kw: _real(*a, **{k: v for k, v in kw.items() if k != "pin_memory"}))
d = torch.load(sys.argv[3])
w = kt_kernel.KTMoEWrapper(layer_idx=0, num_experts=d["E"], num_experts_per_tok=d["K"], hidden_size=d["H"],
                           moe_intermediate_size=d["I"], num_gpu_experts=d["n_gpu"], cpuinfer_threads=2,
                           threadpool_count=1, weight_path=sys.argv[2], chunked_prefill_size=512, method="FP8",
                           max_deferred_experts_per_token=0)
w.load_weights(torch.arange(d["E"], dtype=torch.long))
x, ids, weights = d["x"], d["ids"], d["weights"]
out = torch.zeros(x.shape[0], d["H"], dtype=torch.bfloat16)
bsz = torch.tensor([x.shape[0]], dtype=torch.int32)
w.cpu_infer.submit(w.moe.forward_task(bsz.data_ptr(), d["K"], ids.data_ptr(), weights.data_ptr(), x.data_ptr(),
                                      out.data_ptr(), False))
w.cpu_infer.sync()
torch.save(out, sys.argv[4])
print(json.dumps({"version": kt_kernel.__version__, "variant": kt_kernel.__cpu_variant__,
                  "kernel": type(w.moe).__name__, "mask": w.gpu_experts_mask.tolist()}))
"""


def test_the_avx2_release_runs_fp8_experts_on_its_avx2_build_as_sglang_calls_it(fp8_layer, fp8_experts, tmp_path):
    """The release an AVX2-only CPU gets (kt-kernel 0.7.0, whose KTMoEWrapper has both gpu_experts_mask and an
    SFT-only num_gpu_experts) with its avx2 build forced: SGLang 0.5.15.post1's call through the adapter builds the
    first-N mask, and the AVX2 FP8 kernel's CPU share matches the reference."""
    if not (AVX2_SITE / "kt_kernel").is_dir():
        pytest.skip(f"kt-kernel's AVX2-only release is not at {AVX2_SITE}: make setup-kt-test")
    n_gpu = 32
    torch.manual_seed(1)
    x, weights = torch.randn(3, H).to(torch.bfloat16), torch.rand(3, K)
    torch.save({"E": E, "K": K, "H": H, "I": I, "n_gpu": n_gpu, "x": x, "ids": IDS, "weights": weights},
               tmp_path / "in.pt")
    env = {k: v for k, v in __import__("os").environ.items() if k != "PYTHONPATH"} | {
        "PYTHONPATH": str(AVX2_SITE), "KT_KERNEL_CPU_VARIANT": "avx2"}
    r = subprocess.run([sys.executable, "-c", AVX2_RUN, str(COMPAT), str(fp8_layer), str(tmp_path / "in.pt"),
                        str(tmp_path / "out.pt")], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    info = json.loads(next(ln for ln in r.stdout.splitlines() if ln.startswith('{"version"')))  # kt-kernel prints too
    from vramkit import catalog
    assert info["version"] == catalog.versions().kt_kernel_avx2_pip and info["variant"] == "avx2"
    assert info["mask"] == [True] * n_gpu + [False] * (E - n_gpu)
    out = torch.load(tmp_path / "out.pt").float()
    ref = reference(fp8_experts, x, IDS, weights, n_gpu)
    assert out[1].abs().max() == 0                       # every expert of token 1 is a GPU expert
    for b in (0, 2):
        assert (out[b] - ref[b]).norm() / ref[b].norm() < 0.02


# --- RAWINT4: a GPTQ-Int4 checkpoint's own values on kt-kernel's group-wise int4 kernel (issue 18) -------------------
GPTQ_GROUP = 128
# a quarter of the experts (the kernel's path is the same; a quarter of the bytes to write, load and repack), and
# tokens routed among them: token 1's all below RAW4_GPU (on the GPU), token 2's all above
E4, RAW4_GPU = 32, 10
IDS4_LIST = [[0, 5, 20, 21, 10, 31, 11, 12], [1, 2, 3, 4, 6, 7, 8, 9], [24, 25, 26, 27, 28, 29, 30, 13]]


@pytest.fixture(scope="module")
def gptq_layer(tmp_path_factory, narrow_cfg) -> Path:
    """Layer 0's experts as a symmetric GPTQ-Int4 checkpoint writes them (qweight, fp16 scales, trivial g_idx), every
    nibble drawn 0..15 (so -8s among them), beside the narrowed config with Qwen's GPTQ quantization_config."""
    from safetensors.torch import save_file

    from vramkit.core.model import kt_repack
    out = tmp_path_factory.mktemp("gptq")
    cfg = json.loads((narrow_cfg / "config.json").read_text()) | {"num_hidden_layers": 1, "num_experts": E4,
                                                                   "quantization_config": {
        "quant_method": "gptq", "bits": 4, "group_size": GPTQ_GROUP, "sym": True, "desc_act": False}}
    (out / "config.json").write_text(json.dumps(cfg))
    g = torch.Generator().manual_seed(3)
    tensors = {}
    for e in range(E4):
        for proj, (n, k) in (("gate", (I, H)), ("up", (I, H)), ("down", (H, I))):
            name = f"model.layers.0.mlp.experts.{e}.{proj}_proj"
            nib = torch.randint(0, 16, (k, n), generator=g, dtype=torch.int32)
            tensors[name + ".qweight"] = kt_repack.pack(nib, 0)
            tensors[name + ".scales"] = (torch.rand(k // GPTQ_GROUP, n, generator=g) * 4e-3 + 1e-3).half()
            tensors[name + ".g_idx"] = (torch.arange(k) // GPTQ_GROUP).to(torch.int32)
    save_file(tensors, str(out / "model.safetensors"))
    return out


ROUTED = sorted({int(e) for e in IDS4_LIST for e in e})   # the experts the tests' tokens are routed to


def rawint4_experts(folder: Path):
    """The experts a RAWINT4 folder stands for, those the tokens use (kt-kernel's own loader reads the folder;
    kt_repack decodes): {expert: f32 [out, in]} per projection, indexed as reference() indexes them."""
    from kt_kernel.utils.loader import CompressedSafeTensorLoader

    from vramkit.core.model import kt_repack
    got = CompressedSafeTensorLoader(str(folder)).load_experts("model.layers.0")
    return [{e: kt_repack.rawint4_values(got[n][e], got[n + "_scale"][e]) for e in ROUTED}
            for n in ("gate", "up", "down")]


def rawint4_run(folder: Path, n_gpu: int):
    from kt_kernel.utils.amx import NativeMoEWrapper
    NativeMoEWrapper._native_loader_instance = None    # one loader per process in kt-kernel (a server has one method)
    w = sglang_style(folder, "RAWINT4", n_gpu, E4)
    w.load_weights(torch.arange(E4, dtype=torch.long))
    torch.manual_seed(0)
    x, weights = torch.randn(3, H).to(torch.bfloat16), torch.rand(3, K)
    return run_cpu_experts(w, x, torch.tensor(IDS4_LIST), weights), x, weights


def test_rawint4_repacked_from_gptq_runs_as_sglang_calls_it(narrow_cfg, gptq_layer, tmp_path):
    """The writer repacks the GPTQ checkpoint (-8 raised to -7), kt-kernel's loader reads the files, and the kernel
    computes the CPU experts of those values through the adapter, the GPU's experts skipped."""
    sys.path.insert(0, str(ROOT / "tools"))
    from make_random_checkpoint import write_rawint4_layout

    from vramkit.core.model import kt_repack
    info = write_rawint4_layout(narrow_cfg, tmp_path, 1, source=gptq_layer)
    assert info["raised_from_minus_8"] > 0 and 0.05 < info["share_raised"] < 0.075     # 1 nibble of 16 drawn
    out, x, weights = rawint4_run(tmp_path, RAW4_GPU)
    experts = rawint4_experts(tmp_path)
    ref = reference(experts, x, torch.tensor(IDS4_LIST), weights, RAW4_GPU)
    assert out[1].abs().max() == 0
    for b in (0, 2):
        assert (out[b] - ref[b]).norm() / ref[b].norm() < 0.03
    # the -8s, and only them, moved by more than the scales' fp16 -> bf16 rounding (2^-9 of a value)
    for p, got in zip(("gate", "up", "down"), experts, strict=True):
        for e in ROUTED[:4]:
            want = kt_repack.gptq_values(*_gptq(gptq_layer, e, p), GPTQ_GROUP)
            moved = (got[e] - want).abs() > want.abs() * 2 ** -7
            assert torch.equal(moved, kt_repack.unpack(_gptq(gptq_layer, e, p)[0], 0).T == 0), (p, e)


GPTQ_FILES: dict = {}


def _gptq(folder: Path, e: int, proj: str):
    """(qweight, scales) of one expert's projection in the gptq_layer checkpoint (read once per test run)."""
    if folder not in GPTQ_FILES:
        from safetensors.torch import load_file
        GPTQ_FILES[folder] = load_file(str(folder / "model.safetensors"))
    name = f"model.layers.0.mlp.experts.{e}.{proj}_proj"
    return GPTQ_FILES[folder][name + ".qweight"], GPTQ_FILES[folder][name + ".scales"]


def test_kt_kernels_rawint4_still_computes_minus_8_wrong(gptq_layer, tmp_path):
    """Why the repack raises -8 (kt_repack.NIBBLE_FLOOR): with the nibble 0 kept, kt-kernel 0.5.1's output is far
    from the values it was given. If this fails, kt-kernel computes -8 right: drop the floor (RAWINT4 exact)."""
    from safetensors.torch import save_file

    from vramkit.core.model import kt_repack
    tensors = {}
    for p in ("gate", "up", "down"):
        names = [f"model.layers.0.mlp.experts.{e}.{p}_proj" for e in range(E4)]
        qs, ss = zip(*(_gptq(gptq_layer, e, p) for e in range(E4)), strict=True)
        packed, scale, _ = kt_repack.gptq_experts_to_rawint4(list(qs), list(ss), GPTQ_GROUP, floor=0)
        for name, pk, sc in zip(names, packed, scale, strict=True):
            tensors[name + ".weight_packed"], tensors[name + ".weight_scale"] = pk, sc
    save_file(tensors, str(tmp_path / "kept.safetensors"))
    out, x, weights = rawint4_run(tmp_path, 0)
    ref = reference(rawint4_experts(tmp_path), x, torch.tensor(IDS4_LIST), weights, 0)
    assert all((out[b] - ref[b]).norm() / ref[b].norm() > 0.3 for b in range(3))
