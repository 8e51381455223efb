"""Does a kt-kernel build run on a CPU without AVX-512? (issue 18 item 4)

    qemu-x86_64 -cpu Haswell python3 benchmarks/gpu/kt_isa_probe.py SO_FILE [--methods BF16,FP8,GPTQ_INT4]
    python3 benchmarks/gpu/kt_isa_probe.py --scan WHEEL...     # static: instructions per build (objdump)

Loads one of kt-kernel's compiled extensions (a wheel's `_kt_kernel_ext_<variant>.*.so`, or the single
`kt_kernel_ext.*.so`) directly, with numpy only (no torch, so it starts in seconds under an emulator), and runs
one small MoE forward per method through the build's own kernel classes, checked against numpy. Run under
`qemu-x86_64 -cpu Haswell` (QEMU's TCG has AVX2 and no AVX-512: an AVX-512 instruction raises SIGILL, exit
132, as on a Core i7-12700 or a Ryzen 5800X). Prints one JSON line per step, so a SIGILL leaves the steps
that passed on stdout.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import re
import sys

import numpy as np

E, K, H, INTER = 8, 2, 256, 256        # experts, top-k, hidden, intermediate: small, kernel-aligned


def say(**kv) -> None:
    print(json.dumps(kv), flush=True)


def bf16(x: np.ndarray) -> np.ndarray:
    """float32 -> bf16 bits (uint16), round to nearest even."""
    u = x.astype(np.float32).view(np.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def from_bf16(b: np.ndarray) -> np.ndarray:
    return (b.astype(np.uint32) << 16).view(np.float32)


def e4m3_table() -> np.ndarray:
    v = np.zeros(256, np.float32)
    for i in range(256):
        s, ex, m = i >> 7, (i >> 3) & 15, i & 7
        val = (m / 8) * 2.0 ** -6 if ex == 0 else (1 + m / 8) * 2.0 ** (ex - 7)
        v[i] = -val if s else val
    v[0x7F] = v[0xFF] = np.nan
    return v


def to_e4m3(x: np.ndarray, table: np.ndarray) -> np.ndarray:
    finite = np.where(np.isnan(table), np.inf, table)
    return np.abs(x.reshape(-1, 1) - finite[None]).argmin(1).astype(np.uint8).reshape(x.shape)


SCAN = {   # objdump mnemonic / operand patterns: what a CPU without that extension cannot execute
    "zmm (AVX-512)": re.compile(r"%zmm"),
    "k-mask (AVX-512)": re.compile(r"%k[0-7]\b"),
    "AMX tiles": re.compile(r"\t(tdp|tileload|tilestore|ldtilecfg|tilezero|sttilecfg)"),
    "AVX512-BF16 (vdpbf16ps/vcvtne*2bf16)": re.compile(r"\t(vdpbf16ps|vcvtne2ps2bf16|vcvtneps2bf16)"),
    "AVX512-FP16 (*ph arithmetic)": re.compile(r"\tv(add|sub|mul|div|fmadd\d*|fnmadd\d*)ph\b"),
}


def scan(wheels: list[str]) -> int:
    """Per wheel and per compiled variant: the count of instructions each extension adds, and the MoE classes."""
    import subprocess
    import tempfile
    import zipfile
    for whl in wheels:
        with zipfile.ZipFile(whl) as z, tempfile.TemporaryDirectory() as d:
            for name in sorted(n for n in z.namelist() if n.endswith(".so") and "kt_kernel_ext" in n):
                path = z.extract(name, d)
                text = subprocess.run(["objdump", "-d", "--no-show-raw-insn", path], capture_output=True,
                                      text=True, check=True).stdout
                strings = subprocess.run(["strings", path], capture_output=True, text=True, check=True).stdout
                classes = sorted({s for s in strings.split() if re.fullmatch(r"(AMX|AVX)[A-Za-z0-9_]*_MOE", s)})
                say(wheel=whl.rsplit("/", 1)[-1], build=name.rsplit("/", 1)[-1].split(".")[0],
                    **{k: len(rx.findall(text)) for k, rx in SCAN.items()}, moe_classes=classes)
    return 0


def main() -> int:
    if sys.argv[1:2] == ["--scan"]:
        return scan(sys.argv[2:])
    ap = argparse.ArgumentParser()
    ap.add_argument("so")
    ap.add_argument("--methods", default="BF16,FP8,GPTQ_INT4,AMXINT4,LLAMAFILE")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    spec = importlib.util.spec_from_file_location("kt_kernel_ext", a.so)
    ext = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ext)
    classes = sorted(n for n in dir(ext.moe) if n.endswith("MOE"))
    say(step="import", ok=True, classes=classes)
    wp = ext.WorkerPoolConfig()
    wp.subpool_count, wp.subpool_numa_map, wp.subpool_thread_count = 1, [0], [a.threads]
    cpu = ext.CPUInfer(wp)
    say(step="threadpool", ok=True)
    rng = np.random.default_rng(0)
    w = {n: (rng.standard_normal(s) * 0.05).astype(np.float32)
         for n, s in (("gate", (E, INTER, H)), ("up", (E, INTER, H)), ("down", (E, H, INTER)))}
    x = (rng.standard_normal((3, H))).astype(np.float32)
    ids = np.array([[0, 3], [5, 1], [7, 2]], np.int64)
    wts = np.array([[0.6, 0.4], [0.5, 0.5], [0.9, 0.1]], np.float32)
    mask = np.zeros(E, np.uint8)
    p2l = np.arange(E, dtype=np.int64)
    table = e4m3_table()

    def ref(wd: dict) -> np.ndarray:
        xb = from_bf16(bf16(x))
        out = np.zeros((x.shape[0], H), np.float32)
        for t in range(x.shape[0]):
            for s in range(K):
                e = ids[t, s]
                g, u = wd["gate"][e] @ xb[t], wd["up"][e] @ xb[t]
                out[t] += wts[t, s] * (wd["down"][e] @ (g / (1 + np.exp(-g)) * u))
        return out

    def forward(method: str, cls_name: str, moe, deq: dict) -> None:
        """One batch-3 forward against numpy on the weights' dequantized values."""
        xin = np.ascontiguousarray(bf16(x))
        out = np.zeros((x.shape[0], H), np.uint16)
        bsz = np.array([x.shape[0]], np.int32)
        cpu.submit(moe.forward_task(bsz.ctypes.data, K, ids.ctypes.data, wts.ctypes.data, xin.ctypes.data,
                                    out.ctypes.data, False))
        cpu.sync()
        r = ref(deq)
        err = float(np.linalg.norm(from_bf16(out) - r) / np.linalg.norm(r))
        say(step=method + " forward", ok=err < 0.05, class_=cls_name, rel_err=round(err, 5))

    for method in a.methods.split(","):
        name = {"BF16": ("AMXBF16_MOE", "AVX2BF16_MOE"), "FP8": ("AMXFP8_MOE", "AVX2FP8_MOE"),
                "GPTQ_INT4": ("AVX2GPTQInt4_MOE",), "AMXINT4": ("AMXInt4_MOE",), "LLAMAFILE": ("MOE",)}[method]
        cls_name = next((n for n in name if hasattr(ext.moe, n)), None)
        if cls_name is None:
            say(step=method, ok=None, note="no kernel class in this build")
            continue
        keep: list = []
        c = ext.moe.MOEConfig(E, K, H, INTER, mask.ctypes.data)
        c.layer_idx, c.pool, c.max_len = 0, cpu.backend_, 16
        if method == "LLAMAFILE":
            try:    # llama.cpp's Q8_0 blocks, as a GGUF holds them (the gguf package's own quantizer, numpy only)
                from gguf.constants import GGMLQuantizationType
                from gguf.quants import dequantize, quantize
            except ImportError:
                say(step=method, ok=None, class_=cls_name, note="class present; the gguf package is not on this path")
                continue
            q8 = GGMLQuantizationType.Q8_0
            qs = {n: np.ascontiguousarray(quantize(w[n], q8)) for n in w}
            keep.append(qs)
            gt = ext.kvcache.ggml_type
            c.m_block, c.group_min_len, c.group_max_len = 32, 10, 16
            c.gate_proj, c.up_proj, c.down_proj = (qs[n].ctypes.data for n in ("gate", "up", "down"))
            c.gate_type = c.up_type = c.down_type = gt.Q8_0
            c.hidden_type = gt.BF16
            moe = getattr(ext.moe, cls_name)(c)
            cpu.submit(moe.load_weights_task(p2l.ctypes.data))
            cpu.sync()
            say(step=method + " load", ok=True, class_=cls_name)
            forward(method, cls_name, moe, {n: dequantize(qs[n], q8).reshape(w[n].shape) for n in w})
            continue
        if method == "AMXINT4":
            say(step=method, ok=None, class_=cls_name, note="needs AVX-512 by its own requirement; not run")
            continue
        if method == "BF16":
            per = {n: [np.ascontiguousarray(bf16(w[n][e])) for e in range(E)] for n in w}
            deq = {n: np.stack([from_bf16(t) for t in per[n]]) for n in w}
            scales = {n: [None] * E for n in w}
        elif method == "FP8":
            per, scales, deq = {}, {}, {}
            for n in w:
                rows, cols = w[n].shape[1:]
                qs, ss, ds = [], [], []
                for e in range(E):
                    blk = w[n][e].reshape(rows // 128, 128, cols // 128, 128)
                    s = np.abs(blk).max(axis=(1, 3)) / 448.0
                    q = to_e4m3(blk / s[:, None, :, None], table)
                    qs.append(np.ascontiguousarray(q.reshape(rows, cols)))
                    ss.append(np.ascontiguousarray(s.astype(np.float32)))
                    ds.append((table[q] * s[:, None, :, None]).reshape(rows, cols))
                per[n], scales[n], deq[n] = qs, ss, np.stack(ds)
            c.quant_config.bits, c.quant_config.group_size, c.quant_config.zero_point = 8, 128, False
        else:   # GPTQ_INT4, symmetric, group 128: qweight [K/8, N] int32, scales [K/128, N] f32
            per, scales, deq = {}, {}, {}
            for n in w:
                qs, ss, ds = [], [], []
                for e in range(E):
                    wt = w[n][e].T                                  # [K, N]
                    kk, nn = wt.shape
                    g = wt.reshape(kk // 128, 128, nn)
                    s = np.abs(g).max(1) / 7.5
                    q = np.clip(np.round(g / s[:, None, :]) + 8, 0, 15).astype(np.uint32).reshape(kk // 8, 8, nn)
                    packed = np.zeros((kk // 8, nn), np.uint32)
                    for j in range(8):
                        packed |= q[:, j, :] << np.uint32(4 * j)
                    qs.append(np.ascontiguousarray(packed.view(np.int32)))
                    ss.append(np.ascontiguousarray(s.astype(np.float32)))
                    ds.append(((q.reshape(kk, nn).astype(np.float32) - 8) * np.repeat(s, 128, 0)).T)
                per[n], scales[n], deq[n] = qs, ss, np.stack(ds)
            c.quant_config.bits, c.quant_config.group_size, c.quant_config.zero_point = 4, 128, False
        keep += [per, scales]
        c.gate_projs, c.up_projs, c.down_projs = ([[t.ctypes.data for t in per[n]]] for n in ("gate", "up", "down"))
        c.gate_scales, c.up_scales, c.down_scales = ([[0 if t is None else t.ctypes.data for t in scales[n]]]
                                                     for n in ("gate", "up", "down"))
        moe = getattr(ext.moe, cls_name)(c)
        cpu.submit(moe.load_weights_task(p2l.ctypes.data))
        cpu.sync()
        say(step=method + " load", ok=True, class_=cls_name)
        forward(method, cls_name, moe, deq)
    say(step="done", ok=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
