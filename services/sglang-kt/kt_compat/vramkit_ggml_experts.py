"""llama.cpp's CPU MoE kernels for the layers whose experts all sit in host RAM (issue 18; opt-in, experimental).

With ``VRAMKIT_KT_GPU_LAYERS`` (whole layers' experts on the GPU, the rest all on the CPU) and
``VRAMKIT_KT_GGML=<a GGUF of the same model>``, each CPU layer's KT wrapper is wrapped: a decode batch (at most
``VRAMKIT_GGML_MAX_TOKENS`` tokens, 16 unless set) is computed by ggml, llama.cpp's CPU backend, on that GGUF's expert
blocks (Q4_K_M: Q4_K gate/up, Q4_K or Q6_K down, the types and buffers llama.cpp gives them); a prompt chunk still goes
to kt-kernel (its AMX prompt path). Why: timed alone on the GPU host at 12 threads, ggml's Q4_K layer took 0.54 ms
where kt-kernel 0.5.1 takes 0.76 (AMXINT8) and 0.78 (its own Q4_K path) (benchmarks/results/gpu/cpu-moe-kernels/).
Measured in the server it was even with AMXINT8 (73.25 against 72.61 tok/s, benchmarks/results/gpu/
moe-vs-llamacpp-ggml/run2), holding 10 GB more host RAM: so it stays opt-in, and the plan does not count it.

How it runs: as vramkit_host_experts.py says, the host function the shim's ``vk_run`` (ggml_experts.c). The
shim and ggml come from ``benchmarks/gpu/build_ggml.sh DIR cpu``
(``VRAMKIT_GGML_LIB_DIR=DIR/lib-native``); ggml runs on its own thread pool of ``VRAMKIT_GGML_THREADS`` threads
(--kt-cpuinfer's count unless set).

Refused (ValueError, one line): deferred experts on a ggml layer (its next layer would wait on a share ggml never
computes), an expert placement other than the trivial one (the GGUF holds experts in their logical order), a GGUF
whose layer is missing or of another shape.
"""
from __future__ import annotations

import ctypes
import os
import sys
from pathlib import Path

from vramkit_host_experts import HostExperts

GGUF_ENV = "VRAMKIT_KT_GGML"
LIB_ENV = "VRAMKIT_GGML_LIB_DIR"
THREADS_ENV = "VRAMKIT_GGML_THREADS"
MAX_TOKENS_ENV = "VRAMKIT_GGML_MAX_TOKENS"
REPORT_EVERY = 1024   # a server-log line every 1,024 layer calls (~80 tokens of 13 CPU layers): compute and gap times
# (the first GPU run, 2026-11-27, printed every 12,288 and its probe ended before the first line)
PROJ = ("gate", "up", "down")


class Shim:
    """libvramkit_ggml_experts.so (ggml_experts.c), typed."""

    P = ctypes.c_void_p
    SIGS = {
        "vk_engine_new": (P, [ctypes.c_int, ctypes.c_int, ctypes.c_long]),
        "vk_layer_new": (P, [P] + [ctypes.c_int] * 7),
        "vk_layer_set": (ctypes.c_int, [P, ctypes.c_int, P, ctypes.c_size_t]),
        "vk_layer_repacked": (ctypes.c_int, [P, ctypes.c_int]),
        "vk_job_new": (P, [P, ctypes.c_int, P, P, P, P]),
        "vk_max_tokens": (ctypes.c_int, []),
        "vk_run": (None, [P]),
        "vk_stats": (None, [P, ctypes.POINTER(ctypes.c_long), ctypes.POINTER(ctypes.c_double)]),
    }

    def __init__(self, lib_dir: str | Path):
        path = Path(lib_dir) / "libvramkit_ggml_experts.so"
        if not path.is_file():
            raise ValueError(f"{path} is missing: build it with benchmarks/gpu/build_ggml.sh DIR cpu and set "
                             f"{LIB_ENV}=DIR/lib-native")
        self.lib = ctypes.CDLL(str(path))      # RTLD_LOCAL: its ggml stays apart from kt-kernel's symbols
        for name, (res, args) in self.SIGS.items():
            fn = getattr(self.lib, name)
            fn.restype, fn.argtypes = res, args
            setattr(self, name, fn)
        self.run_ptr = ctypes.cast(self.lib.vk_run, ctypes.c_void_p).value
        self.max_tokens = self.vk_max_tokens()


class Engine:
    """The process's ggml backend and thread pool, and the layers loaded into it."""

    def __init__(self, shim: Shim, threads: int, repack: bool = True, report_every: int = REPORT_EVERY):
        self.shim = shim
        self.threads = threads
        self.ptr = shim.vk_engine_new(threads, int(repack), report_every)
        if not self.ptr:
            raise ValueError("ggml's CPU backend did not start")

    def layer(self, blocks: dict[str, tuple[int, object]], experts: int, used: int, hidden: int, inter: int) -> int:
        """A layer from its gate, up and down blocks: {name: (ggml type, a C-contiguous numpy array)}."""
        ptr = self.shim.vk_layer_new(self.ptr, experts, used, hidden, inter, *(blocks[p][0] for p in PROJ))
        if not ptr:
            raise ValueError("could not allocate a ggml layer's expert buffers (host RAM?)")
        for i, p in enumerate(PROJ):
            data = blocks[p][1]
            if self.shim.vk_layer_set(ptr, i, data.ctypes.data, data.nbytes) != 0:
                raise ValueError(f"the {p} blocks hold {data.nbytes} bytes, not the layer's shape")
        return ptr

    def stats(self) -> tuple[int, float]:
        calls, ms = ctypes.c_long(), ctypes.c_double()
        self.shim.vk_stats(self.ptr, ctypes.byref(calls), ctypes.byref(ms))
        return calls.value, ms.value


def gguf_blocks(reader, layer_idx: int, experts: int, hidden: int, inter: int) -> dict[str, tuple[int, object]]:
    """One layer's expert blocks from a GGUF (llama.cpp's names), checked against the model's shape."""
    by_name = {t.name: t for t in reader.tensors}
    out = {}
    for p in PROJ:
        name = f"blk.{layer_idx}.ffn_{p}_exps.weight"
        t = by_name.get(name)
        if t is None:
            raise ValueError(f"the GGUF has no {name}: it is not this model's")
        want = (hidden, inter, experts) if p != "down" else (inter, hidden, experts)
        if tuple(int(d) for d in t.shape) != want:
            raise ValueError(f"{name} is {tuple(int(d) for d in t.shape)}, the model's is {want}")
        out[p] = (int(t.tensor_type), t.data)
    return out


_ENGINE: list[Engine] = []
_READER: list = []


def engine(threads: int) -> Engine:
    if not _ENGINE:
        lib_dir = os.environ.get(LIB_ENV, "")
        if not lib_dir:
            raise ValueError(f"{GGUF_ENV} needs {LIB_ENV} (benchmarks/gpu/build_ggml.sh DIR cpu: DIR/lib-native)")
        _ENGINE.append(Engine(Shim(lib_dir), threads))
    return _ENGINE[0]


def reader(path: str):
    if not _READER:
        if not Path(path).is_file():
            raise ValueError(f"{GGUF_ENV}={path}: no such file")
        from gguf import GGUFReader
        _READER.append(GGUFReader(path))
    return _READER[0]


def wrap(kt, layer_idx: int, hf: dict, kt_threads: int | None, deferred: int, placed: bool) -> HostExperts:
    """The KT wrapper of CPU layer `layer_idx`, wrapped to run its decode batches on ggml (the environment says
    where the GGUF and the shim are)."""
    if deferred:
        raise ValueError(f"{GGUF_ENV}: layer {layer_idx} defers {deferred} experts a token; ggml layers defer none "
                         "(drop --kt-max-deferred-experts-per-token)")
    if placed:
        raise ValueError(f"{GGUF_ENV} takes the trivial expert placement only (drop --init-expert-location)")
    experts, used = int(hf["num_experts"]), int(hf["num_experts_per_tok"])
    hidden, inter = int(hf["hidden_size"]), int(hf["moe_intermediate_size"])
    threads = int(os.environ.get(THREADS_ENV) or kt_threads or os.cpu_count() or 1)
    eng = engine(threads)
    ptr = eng.layer(gguf_blocks(reader(os.environ[GGUF_ENV]), layer_idx, experts, hidden, inter),
                    experts, used, hidden, inter)
    max_tokens = min(int(os.environ.get(MAX_TOKENS_ENV) or 16), eng.shim.max_tokens)
    repacked = [eng.shim.vk_layer_repacked(ptr, i) for i in range(3)]
    print(f"vramkit_ggml_experts: layer {layer_idx}: ggml experts (gate/up/down repacked {repacked}, {threads} "
          f"threads) for batches of <= {max_tokens} tokens, kt-kernel above", file=sys.stderr, flush=True)
    return HostExperts(kt, eng.shim.run_ptr, lambda n, x, ids, w, out: eng.shim.vk_job_new(ptr, n, x, ids, w, out),
                       hidden, used, max_tokens)
