"""The CPU layers' decode on the GPTQ-Int4 values as the checkpoint has them (issue 18; opt-in:
``VRAMKIT_KT_CPU_DECODE=int4`` with whole layers, ``VRAMKIT_KT_GPU_LAYERS``).

Why: at 16 GiB the kit's token is its GPU work plus ~10 CPU layers, and kt-kernel's AMXINT8 layer reads 37.7 MB of
experts a token where the GPTQ-Int4 file holds them in 19.5 MB; a batch-1 layer is bound by host read bandwidth.
int4_experts.c (beside this file) computes a decode batch from the checkpoint's own 4-bit values and float16 scales in
float32, what SGLang's marlin MoE computes on the GPU layers (symmetric GPTQ, no act-order), so the CPU layers are as
lossless as the GPU's against the checkpoint (kt-kernel's AMXINT8 requantizes them per row: lossy). A prompt chunk
(more than ``VRAMKIT_INT4_MAX_TOKENS`` tokens, 16 unless set) still goes to kt-kernel, or to the GPU prompt path
(vramkit_gpu_prefill.py) where it is on.

The library is compiled at the first CPU layer with the host's C compiler (``$CC`` or cc, ``-O3 -march=native``:
AVX-512, AVX2 or the compiler's generic vectors, the server log says which) into ``VRAMKIT_INT4_LIB_DIR`` (default
``$XDG_CACHE_HOME/vramkit`` or ``~/.cache/vramkit``), named by a digest of the source, the flags and this CPU's model
and flags, so a rebuild happens only when one of them changes. ``VRAMKIT_INT4_ISA=avx2`` compiles the AVX2 build
instead of this CPU's own (what an AVX2-only desktop runs, measured on an AVX-512 host's cores; ``native``, the default,
is -march=native; ``masked`` is native with the AVX2 build's masked nibbles, an AVX-512 speed candidate). Its pool has
``VRAMKIT_INT4_THREADS`` threads (--kt-cpuinfer's count unless set): the caller (CUDA's host-function thread) and
the rest pinned one to a CPU of the process's affinity, one physical core each before any core's second thread
(core_order; kt-kernel's pool sleeps during decode: it gets no decode batch). ``VRAMKIT_INT4_PIN_CALLER=1`` pins the
caller too, at its first call, to the next core in that order (opt-in, not measured in a server yet: the log window
says in how many calls the caller ran on a worker's CPU).

Weights: each CPU layer's gate/up/down qweight and scales, read from the checkpoint's safetensors in the server's
physical expert order (or drawn as vramkit_gpu_prefill draws a dummy load's, the same values), repacked into the
kernel's strips: 0.29 GiB of host RAM a layer for Qwen3-30B-A3B, beside kt-kernel's own copy.

Refused in one line, before anything loads: a checkpoint that is not symmetric GPTQ-Int4 without act-order, deferred
experts (its state spans layers), a shape the kernel cannot split. Anything that fails while a layer loads leaves that
layer on kt-kernel and says so once (the adapter's caller).
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import subprocess
import sys
from pathlib import Path

from vramkit_host_experts import HostExperts, Share

ENV = "VRAMKIT_KT_CPU_DECODE"
LIB_ENV = "VRAMKIT_INT4_LIB_DIR"
THREADS_ENV = "VRAMKIT_INT4_THREADS"
MAX_TOKENS_ENV = "VRAMKIT_INT4_MAX_TOKENS"
PIN_CALLER_ENV = "VRAMKIT_INT4_PIN_CALLER"     # "1": the calling thread pinned to a core of its own (opt-in)
SOURCE = Path(__file__).with_name("int4_experts.c")
ISA_ENV = "VRAMKIT_INT4_ISA"
# the build each name compiles: this CPU's own, AVX2 forced, or this CPU's own with the 8-wide builds' masked nibbles
# (on an AVX-512 CPU a candidate for its own build: int4_experts.c V4_MASKED)
ISA_FLAGS = {"native": ("-march=native",), "avx2": ("-mavx2", "-mfma", "-mf16c"),
             "masked": ("-march=native", "-DV4_MASKED=1")}
# a server-log line every 1,024 layer calls: the kernel's time a call, the gap between calls, how far apart its threads
# finished (summed over a call's phases) and in how many calls the caller ran on a CPU a worker is pinned to
REPORT_EVERY = 1024
DECODES = {"kt": "kt-kernel's method (--kt-method)", "int4": "the GPTQ-Int4 values as they are (int4_experts.c)"}


def decode_kernel(environ: dict | None = None) -> str:
    """VRAMKIT_KT_CPU_DECODE: "kt" (unset) or "int4"; anything else stops the server at start with one line."""
    raw = (os.environ if environ is None else environ).get(ENV, "").strip() or "kt"
    if raw not in DECODES:
        raise SystemExit(f"vramkit_int4_experts: {ENV}={raw!r}: give "
                         + " or ".join(f"{k} ({v})" for k, v in DECODES.items()))
    return raw


def unsupported(hf: dict, deferred: int) -> str | None:
    """Why this server's CPU layers cannot decode on int4_experts.c (None: they can)."""
    q = hf.get("quantization_config") or {}
    if q.get("quant_method") != "gptq" or int(q.get("bits", 0)) != 4:
        return f"the checkpoint is {q.get('quant_method') or 'not quantized'}, not GPTQ-Int4"
    if q.get("desc_act") or not q.get("sym", True):
        return "act-order or asymmetric GPTQ (the kernel reads symmetric values in input order)"
    if deferred:
        return "deferred experts (--kt-max-deferred-experts-per-token) carry state from one layer to the next"
    hidden, inter, group = int(hf["hidden_size"]), int(hf["moe_intermediate_size"]), int(q.get("group_size", 128))
    if group % 8 or hidden % 16 or inter % 16 or hidden % group or inter % group:
        return f"hidden {hidden} / intermediate {inter} are not whole strips of 16 and groups of {group}"
    return None


def cflags(environ: dict | None = None) -> tuple[str, ...]:
    """The compiler flags VRAMKIT_INT4_ISA asks for (native unless set); ValueError in one line for another name."""
    isa = (os.environ if environ is None else environ).get(ISA_ENV, "").strip() or "native"
    if isa not in ISA_FLAGS:
        raise ValueError(f"{ISA_ENV}={isa!r}: give " + " or ".join(ISA_FLAGS))
    return ("-O3", *ISA_FLAGS[isa], "-shared", "-fPIC", "-pthread")


CFLAGS = cflags({})     # this CPU's own build


def _cpu_id() -> str:
    """This CPU's model and flags (what -march=native compiles for)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor()
    lines = [ln for ln in text.splitlines() if ln.startswith(("model name", "flags"))]
    return "\n".join(dict.fromkeys(lines))


def build(out_dir: str | Path | None = None, cflags: tuple[str, ...] = CFLAGS, cc: str | None = None,
          source: Path = SOURCE) -> Path:
    """The library for this CPU, compiled once into out_dir (the environment's, else the cache); ValueError in one
    line where the compiler is missing or fails. `source`: another revision of the kernel (a bench's before/after)."""
    cc = cc or os.environ.get("CC") or "cc"
    if out_dir is None:
        cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        out_dir = os.environ.get(LIB_ENV) or cache / "vramkit"
    out = Path(out_dir)
    key = hashlib.sha256(source.read_bytes() + " ".join((cc, *cflags)).encode() + _cpu_id().encode()).hexdigest()[:16]
    lib = out / f"libvramkit_int4_experts-{key}.so"
    if lib.is_file():
        return lib
    out.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = lib.with_suffix(f".{os.getpid()}.tmp")
    try:
        done = subprocess.run([cc, *cflags, str(source), "-o", str(tmp)], capture_output=True, text=True,
                              timeout=300, check=False)
    except FileNotFoundError:
        raise ValueError(f"no C compiler ({cc}) to build {source.name}: install gcc, or set CC") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        tmp.unlink(missing_ok=True)
        raise ValueError(f"{cc} could not build {source.name}: {last}")
    os.replace(tmp, lib)
    return lib


class Lib:
    """libvramkit_int4_experts.so, typed."""

    P = ctypes.c_void_p
    SIGS = {
        "v4_pool_new": (P, [ctypes.c_int, ctypes.POINTER(ctypes.c_int), ctypes.c_long]),
        "v4_pool_free": (None, [P]),
        "v4_pool_threads": (ctypes.c_int, [P]),
        "v4_pool_pin_caller": (None, [P, ctypes.c_int]),
        "v4_layer_new": (P, [P] + [ctypes.c_int] * 5),
        "v4_layer_set": (None, [P, P, P, P, P]),
        "v4_layer_bytes": (ctypes.c_size_t, [P]),
        "v4_layer_free": (None, [P]),
        "v4_job_new": (P, [P, ctypes.c_int, P, P, P, P]),
        "v4_run": (None, [P]),
        "v4_pool_async": (ctypes.c_int, [P]),
        "v4_start": (None, [P]),
        "v4_wait": (None, [P]),
        "v4_isa": (ctypes.c_char_p, []),
        "v4_max_tokens": (ctypes.c_int, []),
    }

    def __init__(self, path: str | Path):
        self.lib = ctypes.CDLL(str(path))
        for name, (res, args) in self.SIGS.items():
            fn = getattr(self.lib, name)
            fn.restype, fn.argtypes = res, args
            setattr(self, name, fn)
        self.run_ptr = ctypes.cast(self.lib.v4_run, ctypes.c_void_p).value
        # a call in two halves (the GPU's share of the layer between them): host functions too
        self.start_ptr = ctypes.cast(self.lib.v4_start, ctypes.c_void_p).value
        self.wait_ptr = ctypes.cast(self.lib.v4_wait, ctypes.c_void_p).value
        self.isa = self.v4_isa().decode()
        self.max_tokens = self.v4_max_tokens()


def core_order(cpus, sys_root: str | Path = "/sys") -> list[int]:
    """`cpus` one physical core at a time: each core's lowest-numbered thread in CPU order, then the cores' other
    threads. SMT siblings are numbered side by side on some hosts (Intel desktops: 0 and 1 one core) and a core count
    apart on others (most AMD and servers): either way the first n of this order are n cores where the host has
    them. CPU order where /sys does not say (a container without it)."""
    first, rest, seen = [], [], set()
    for c in sorted(cpus):
        topo = Path(sys_root, "devices", "system", "cpu", f"cpu{c}", "topology")
        try:
            key = ((topo / "physical_package_id").read_text().strip(), (topo / "core_id").read_text().strip())
        except OSError:
            return sorted(cpus)
        (rest if key in seen else first).append(c)
        seen.add(key)
    return first + rest


def pinned_cpus(threads: int, cpus=None, sys_root: str | Path = "/sys") -> list[int]:
    """The CPUs the pool's workers (threads - 1 of them) are pinned to: this process's affinity (or `cpus`), one
    physical core each first (core_order), so a compute-bound pool does not share a core's two threads while other
    cores idle."""
    order = core_order(os.sched_getaffinity(0) if cpus is None else cpus, sys_root)
    return [order[i % len(order)] for i in range(max(0, threads - 1))]


class Kernel:
    """The process's library and thread pool, and the layers loaded into it."""

    def __init__(self, lib: Lib, threads: int, report_every: int = REPORT_EVERY, pin: bool = True,
                 pin_caller: bool = False):
        """`pin_caller`: the thread that calls the kernel (CUDA's host-function thread in the server) pinned, at its
        first call, to the next core in the workers' order, so it shares none of theirs (pin only)."""
        self.lib = lib
        cpus = pinned_cpus(threads + 1 if pin_caller else threads) if pin else []
        caller = cpus.pop() if pin and pin_caller else -1
        arr = (ctypes.c_int * max(1, len(cpus)))(*cpus) if cpus else None
        self.pool = lib.v4_pool_new(threads, arr, report_every)
        if not self.pool:
            raise ValueError(f"the int4 kernel's pool of {threads} threads did not start")
        self.threads = lib.v4_pool_threads(self.pool)
        self.caller_cpu = caller
        if caller >= 0:
            lib.v4_pool_pin_caller(self.pool, caller)

    def layer(self, raw: dict, experts: int, used: int, hidden: int, inter: int, group: int) -> int:
        """A layer from its raw GPTQ tensors (vramkit_gpu_prefill.shapes: w13/w2 qweight int32, scales float16, as
        SGLang's FusedMoE holds them before its repack; experts in the server's physical order)."""
        import torch
        import vramkit_gpu_prefill as gp
        t = {}
        for name, (shape, dtype) in gp.shapes(hidden, inter, experts, group).items():
            v, want = raw[name], getattr(torch, dtype)
            if tuple(v.shape) != shape or v.dtype != want:
                raise ValueError(f"{name} is {tuple(v.shape)} {v.dtype}, the layer's is {shape} {want}")
            t[name] = v.contiguous()
        ptr = self.lib.v4_layer_new(self.pool, experts, used, hidden, inter, group)
        if not ptr:
            raise ValueError("could not allocate an int4 layer (host RAM, or a shape of no whole strips)")
        self.lib.v4_layer_set(ptr, *(t[k].data_ptr() for k in ("w13_qweight", "w13_scales", "w2_qweight",
                                                               "w2_scales")))
        return ptr

    def job(self, layer: int, n: int, x: int, ids: int, w: int, out: int) -> int:
        return self.lib.v4_job_new(layer, n, x, ids, w, out)


_KERNEL: list[Kernel] = []
_READER: list = []


def kernel(threads: int) -> Kernel:
    if not _KERNEL:
        pin_caller = os.environ.get(PIN_CALLER_ENV, "").strip() == "1"
        _KERNEL.append(Kernel(Lib(build(cflags=cflags())), threads, pin_caller=pin_caller))
    return _KERNEL[0]


def shape(hf: dict) -> tuple[int, int, int, int]:
    """A GPTQ MoE layer's (experts, hidden, expert width, group) from the server's config.json."""
    return (int(hf["num_experts"]), int(hf["hidden_size"]), int(hf["moe_intermediate_size"]),
            int(hf["quantization_config"].get("group_size", 128)))


def raw_layer(hf: dict, model_path: str, dummy: bool, layer_idx: int, order: list[int], last: bool) -> dict:
    """One CPU layer's raw GPTQ tensors: read from the checkpoint (its files closed after the last CPU layer), or a
    dummy load's draw; the GPU prompt path's where it took the layer first (vramkit_gpu_prefill.gptq_layer)."""
    import vramkit_gpu_prefill as gp
    experts, hidden, inter, group = shape(hf)
    if not dummy and not _READER:
        _READER.append(gp.Reader(model_path))
    try:
        return gp.gptq_layer(layer_idx, order, hidden, inter, experts, group, None if dummy else _READER[0])
    finally:
        if last and _READER:
            _READER[0].close()


def wrap(kt, layer_idx: int, hf: dict, model_path: str, dummy: bool, order: list[int], kt_threads: int | None,
         deferred: int, last: bool, bus: dict | None = None) -> HostExperts:
    """The KT wrapper of CPU layer `layer_idx`, wrapped so its decode batches run on int4_experts.c. `bus`: the GPU
    prompt path's pinned marlin copy of the layer, for VRAMKIT_INT4_GPU_SHARE (vramkit_gpu_share.py)."""
    why = unsupported(hf, deferred)
    if why is not None:
        raise ValueError(f"{ENV}=int4: {why}")
    (experts, hidden, inter, group), used = shape(hf), int(hf["num_experts_per_tok"])
    threads = int(os.environ.get(THREADS_ENV) or kt_threads or os.cpu_count() or 1)
    k = kernel(threads)
    ptr = k.layer(raw_layer(hf, model_path, dummy, layer_idx, order, last), experts, used, hidden, inter, group)
    max_tokens = min(int(os.environ.get(MAX_TOKENS_ENV) or 16), k.lib.max_tokens)
    pinned = f", the caller pinned to CPU {k.caller_cpu}" if k.caller_cpu >= 0 else ""
    share, shared = None, ""
    import vramkit_gpu_share
    if (frac := vramkit_gpu_share.fraction()) is not None:
        if bus is None:
            shared = (f"; {vramkit_gpu_share.ENV}={frac} not used: it reads the GPU prompt path's host copy of the "
                      "layer (--kt-gpu-prefill)")
        else:
            try:
                if k.lib.v4_pool_async(k.pool) != 0:
                    raise RuntimeError("the int4 kernel's coordinator thread did not start")
                share = Share(vramkit_gpu_share.BusExperts(bus, experts, layer=layer_idx), frac, k.lib.start_ptr,
                              k.lib.wait_ptr)
                shared = f"; {frac:.2f} of each batch's experts on the GPU over the bus ({vramkit_gpu_share.ENV})"
            except Exception as exc:    # noqa: BLE001 -- any failure: this layer decodes on the CPU alone
                first = (str(exc).strip().splitlines() or [""])[0][:200]
                shared = f"; {vramkit_gpu_share.ENV} not used: {type(exc).__name__}: {first}"
    print(f"vramkit_int4_experts: layer {layer_idx}: decode batches of <= {max_tokens} tokens on the GPTQ-Int4 values "
          f"({k.lib.v4_layer_bytes(ptr) / 2**30:.2f} GiB, {k.threads} threads{pinned}, {k.lib.isa}), kt-kernel above"
          + shared, file=sys.stderr, flush=True)
    return HostExperts(kt, k.lib.run_ptr, lambda n, x, ids, w, out: k.job(ptr, n, x, ids, w, out), hidden, used,
                       max_tokens, share)
