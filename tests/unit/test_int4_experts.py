"""The adapter's int4 CPU-expert kernel (services/sglang-kt/kt_compat/int4_experts.c + vramkit_int4_experts.py),
compiled here with the host's C compiler for each instruction set this CPU runs (AVX-512, AVX2, the compiler's generic
vectors) and checked against the GPTQ arithmetic in float64: what it computes, what it refuses, how it says so. Its
speed is measured on the GPU host (benchmarks/gpu/int4_experts_bench.py, moe-vs-llamacpp-int4/)."""
from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
KT_COMPAT = ROOT / "services" / "sglang-kt" / "kt_compat"
CC = shutil.which("cc") or shutil.which("gcc")
# a pool that missed a call would leave its caller waiting for ever (a worker started after the first call did, until
# 2026-11-29): the timeout makes that a failure
pytestmark = [pytest.mark.skipif(CC is None, reason="no C compiler on this machine (the kernel is compiled at start)"),
              pytest.mark.timeout(120)]


def _cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    return set(next((ln.split(":", 1)[1].split() for ln in text.splitlines() if ln.startswith("flags")), []))


FLAGS = _cpu_flags()
# (instruction set the build reports, its flags, whether this CPU runs it)
VARIANTS = [("avx512", ("-mavx512f", "-mf16c", "-mfma"), "avx512f" in FLAGS),
            ("avx2", ("-mavx2", "-mfma", "-mf16c"), {"avx2", "fma", "f16c"} <= FLAGS),
            # the AVX-512 build with the 8-wide builds' masked nibbles (VRAMKIT_INT4_ISA=masked: a speed candidate)
            ("avx512-masked", ("-mavx512f", "-mf16c", "-mfma", "-DV4_MASKED=1"), "avx512f" in FLAGS),
            ("generic", ("-march=x86-64",), True)]


@pytest.fixture(scope="module")
def vi():
    with pytest.MonkeyPatch.context() as mp:     # its siblings, as the server's path has them
        mp.syspath_prepend(str(KT_COMPAT))
        import vramkit_gpu_prefill
        import vramkit_int4_experts
        yield vramkit_int4_experts, vramkit_gpu_prefill


def _cflags(flags: tuple[str, ...]) -> tuple[str, ...]:
    return ("-O2", *flags, "-shared", "-fPIC", "-pthread")


@pytest.fixture(scope="module")
def lib_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("int4lib")


@pytest.fixture(scope="module")
def libs(vi, lib_dir):
    """Each build this CPU runs, compiled side by side (a compiler process each)."""
    from concurrent.futures import ThreadPoolExecutor
    mod, _ = vi
    runnable = [(isa, flags) for isa, flags, runs in VARIANTS if runs]
    with ThreadPoolExecutor(len(runnable)) as pool:
        paths = list(pool.map(lambda v: mod.build(lib_dir, cflags=_cflags(v[1]), cc=CC), runnable))
    return {isa: mod.Lib(path) for (isa, _), path in zip(runnable, paths, strict=True)}


E, K, H, INTER, G = 8, 3, 256, 128, 64      # a small layer: whole strips of 16, groups of 64


def _layer(gp, seed: int = 0):
    """Random GPTQ words (the dummy load's draw) and scales of either sign."""
    import torch
    raw = gp.dummy_gptq(seed, H, INTER, E, G)
    gen = torch.Generator().manual_seed(seed)
    for name in ("w13_scales", "w2_scales"):
        raw[name] = ((torch.rand(raw[name].shape, generator=gen) - 0.3) * 0.2).half()
    return raw


def _reference(raw, x, ids, w):
    """out[t] = sum_k w[t, k] * down_e(silu(gate_e(x[t])) * up_e(x[t])), W = (nibble - 8) * scale, in float64."""
    def values(q, s):
        q = q.numpy().view(np.uint32)
        nib = np.stack([(q >> (4 * j)) & 15 for j in range(8)], axis=2).reshape(q.shape[0], -1, q.shape[2])
        return (nib.astype(np.float64) - 8) * np.repeat(s.numpy().astype(np.float64), G, axis=1)
    w13, w2 = values(raw["w13_qweight"], raw["w13_scales"]), values(raw["w2_qweight"], raw["w2_scales"])
    out = np.zeros((x.shape[0], H))
    for t in range(x.shape[0]):
        for k in range(ids.shape[1]):
            e = ids[t, k]
            if 0 <= e < E:
                gu = x[t].astype(np.float64) @ w13[e]
                out[t] += w[t, k] * ((gu[:INTER] / (1 + np.exp(-gu[:INTER])) * gu[INTER:]) @ w2[e])
    return out


def _run(mod, lib, raw, x, ids, w, threads: int):
    kern = mod.Kernel(lib, threads, report_every=0, pin=False)
    layer = kern.layer(raw, E, K, H, INTER, G)
    out = np.full((x.shape[0], H), np.nan, np.float32)
    job = kern.job(layer, x.shape[0], x.ctypes.data, ids.ctypes.data, w.ctypes.data, out.ctypes.data)
    lib.v4_run(job)
    return out


def _batch(n: int, seed: int = 1):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, H)).astype(np.float32)
    ids = np.stack([rng.choice(E, K, replace=False) for _ in range(n)]).astype(np.int32)
    ids[0, 1] = -1                      # SGLang's masked slot: adds nothing
    if n > 2:
        ids[2, 0] = E + 5               # an id outside the layer: adds nothing either
    return x, ids, rng.random((n, K)).astype(np.float32)


@pytest.mark.parametrize("isa", [v[0] for v in VARIANTS if v[2]])
def test_each_build_computes_the_gptq_values_as_float64_does(vi, libs, isa):
    mod, gp = vi
    lib = libs[isa]
    assert lib.isa == isa
    raw = _layer(gp)
    for n in (1, 3, 9):                 # one token, a chunk of the widest build's 4 and a remainder, several chunks
        x, ids, w = _batch(n)
        out, ref = _run(mod, lib, raw, x, ids, w, threads=3), _reference(raw, x, ids, w)
        assert np.abs(out - ref).max() <= 2e-6 * np.abs(ref).max(), (isa, n)


def test_the_result_does_not_depend_on_the_thread_count(vi, libs):
    mod, gp = vi
    lib = next(iter(libs.values()))
    raw = _layer(gp, seed=2)
    x, ids, w = _batch(5, seed=3)
    one = _run(mod, lib, raw, x, ids, w, threads=1)
    assert np.array_equal(one, _run(mod, lib, raw, x, ids, w, threads=4))     # each unit's sums in a fixed order


def test_a_batch_with_every_slot_masked_gives_zeros(vi, libs):
    mod, gp = vi
    x, ids, w = _batch(2)
    ids[:] = -1
    assert not _run(mod, next(iter(libs.values())), _layer(gp), x, ids, w, threads=2).any()


@pytest.mark.parametrize("quant, deferred, said", [
    ({"quant_method": "fp8"}, 0, "the checkpoint is fp8, not GPTQ-Int4"),
    ({"quant_method": "gptq", "bits": 4, "desc_act": True}, 0, "act-order or asymmetric GPTQ"),
    ({"quant_method": "gptq", "bits": 4, "sym": False}, 0, "act-order or asymmetric GPTQ"),
    ({"quant_method": "gptq", "bits": 4}, 2, "deferred experts"),
    ({"quant_method": "gptq", "bits": 4, "group_size": 96}, 0, "are not whole strips of 16 and groups of 96"),
])
def test_what_the_kernel_cannot_compute_is_refused_in_one_line(vi, quant, deferred, said):
    mod, _ = vi
    hf = {"hidden_size": 2048, "moe_intermediate_size": 768, "quantization_config": quant}
    why = mod.unsupported(hf, deferred)
    assert why is not None and said in why and "\n" not in why
    with pytest.raises(ValueError, match=f"{mod.ENV}=int4: "):
        mod.wrap(object(), 3, {**hf, "num_experts": 128, "num_experts_per_tok": 8}, "/nowhere", True, [], 4,
                 deferred, last=False)


def test_a_qwen3_coder_gptq_layer_is_accepted(vi):
    mod, _ = vi
    hf = {"hidden_size": 2048, "moe_intermediate_size": 768,
          "quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": 128, "sym": True, "desc_act": False}}
    assert mod.unsupported(hf, 0) is None


def test_tensors_of_another_shape_are_refused_before_the_kernel_reads_them(vi, libs):
    mod, gp = vi
    raw = _layer(gp)
    raw["w2_scales"] = raw["w2_scales"][:, :1]
    kern = mod.Kernel(next(iter(libs.values())), 1, report_every=0, pin=False)
    with pytest.raises(ValueError, match=r"w2_scales is \(8, 1, 256\) torch.float16, the layer's is \(8, 2, 256\)"):
        kern.layer(raw, E, K, H, INTER, G)


def test_the_setting_takes_kt_or_int4_and_says_what_else_means(vi):
    mod, _ = vi
    assert mod.decode_kernel({}) == "kt" and mod.decode_kernel({mod.ENV: " int4 "}) == "int4"
    with pytest.raises(SystemExit) as e:
        mod.decode_kernel({mod.ENV: "int8"})
    assert str(e.value) == (f"vramkit_int4_experts: {mod.ENV}='int8': give kt (kt-kernel's method (--kt-method)) or "
                            "int4 (the GPTQ-Int4 values as they are (int4_experts.c))")


def test_the_isa_override_compiles_the_avx2_build_or_refuses_in_one_line(vi):
    """VRAMKIT_INT4_ISA=avx2 gives the flags of the AVX2 build checked above (an AVX2-only desktop's, forced on a
    bigger CPU for its speed), masked this CPU's own with the masked nibbles; unset is this CPU's own; another name is
    refused before anything compiles."""
    mod, _ = vi
    assert mod.cflags({}) == mod.CFLAGS and "-march=native" in mod.cflags({mod.ISA_ENV: " native "})
    avx2 = mod.cflags({mod.ISA_ENV: "avx2"})
    assert set(VARIANTS[1][1]) <= set(avx2) and not any(f.startswith("-march") for f in avx2)
    with pytest.raises(ValueError) as e:
        mod.cflags({mod.ISA_ENV: "avx512"})
    assert str(e.value) == f"{mod.ISA_ENV}='avx512': give native or avx2 or masked"
    masked = mod.cflags({mod.ISA_ENV: "masked"})
    assert "-march=native" in masked and "-DV4_MASKED=1" in masked


def test_a_missing_compiler_is_one_line_and_a_build_is_reused(vi, tmp_path, libs, lib_dir):
    mod, _ = vi
    with pytest.raises(ValueError, match=r"^no C compiler \(/no/such/cc\) to build int4_experts.c: install gcc"):
        mod.build(tmp_path / "cache", cc="/no/such/cc")
    assert (tmp_path / "cache").stat().st_mode & 0o077 == 0      # the kit's cache folder: its owner's alone
    built = sorted(lib_dir.glob("libvramkit_int4_experts-*.so"))
    assert len(built) == len(libs)                     # one file a build, named by the source, flags and CPU
    mtimes = [b.stat().st_mtime_ns for b in built]
    again = mod.build(lib_dir, cflags=_cflags(VARIANTS[-1][1]), cc=CC)     # the generic build, asked again
    assert again in built and [b.stat().st_mtime_ns for b in built] == mtimes


def test_calls_from_several_threads_at_once_give_each_its_own_result(vi, libs):
    """Host functions of two CUDA streams may run on two driver threads: the pool takes one call at a time, so four
    threads calling at once (ctypes lets go of the GIL) get what each gets alone, and none waits for ever. (Without
    the lock one call in ~800 of this came out wrong on the dev host: this run may not catch that; it holds the lock
    to giving every call its own result.)"""
    import threading
    mod, gp = vi
    lib = next(iter(libs.values()))           # the widest build this CPU runs: the lock is the same in each
    kern = mod.Kernel(lib, 2, report_every=0, pin=False)
    h, inter = 1024, 512                      # calls of a few hundred microseconds: the four threads' calls overlap
    layer = kern.layer(gp.dummy_gptq(4, h, inter, E, G), E, K, h, inter, G)
    rng = np.random.default_rng(5)
    batches = [(rng.standard_normal((n, h)).astype(np.float32),
                np.stack([rng.choice(E, K, replace=False) for _ in range(n)]).astype(np.int32),
                rng.random((n, K)).astype(np.float32)) for n in (1, 2, 3, 4)]
    outs = [np.zeros((len(b[0]), h), np.float32) for b in batches]
    jobs = [kern.job(layer, len(x), x.ctypes.data, ids.ctypes.data, w.ctypes.data, o.ctypes.data)
            for (x, ids, w), o in zip(batches, outs, strict=True)]
    alone = []
    for job, o in zip(jobs, outs, strict=True):
        lib.v4_run(job)
        alone.append(o.copy())

    wrong: list[int] = []

    def hammer(job, out, want):
        for _ in range(50):
            out.fill(np.nan)                 # each call must write its whole output again
            lib.v4_run(job)
            wrong.append(int(not np.array_equal(out, want)))
    threads = [threading.Thread(target=hammer, args=args) for args in zip(jobs, outs, alone, strict=True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(wrong) == 200 and sum(wrong) == 0


def test_a_cpu_layer_is_drawn_once_for_the_gpu_prompt_path_and_the_int4_kernel(vi, monkeypatch):
    """Both take each CPU layer's raw GPTQ tensors: the second gets the first's (one draw, ~1 s a layer of the coder;
    one read of a real checkpoint) until the adapter releases the layer; another layer is drawn afresh."""
    mod, gp = vi
    drawn: list[int] = []
    real = gp.dummy_gptq
    monkeypatch.setattr(gp, "dummy_gptq", lambda i, *a: drawn.append(i) or real(i, *a))
    hf = {"hidden_size": H, "moe_intermediate_size": INTER, "num_experts": E,
          "quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": G}}
    order = list(range(E))
    gp.release()
    first = gp.gptq_layer(7, order, H, INTER, E, G)                   # as the GPU prompt path asks for it
    assert mod.raw_layer(hf, "/nowhere", True, 7, order, last=False) is first and drawn == [7]
    gp.release()
    assert mod.raw_layer(hf, "/nowhere", True, 7, order, last=False) is not first and drawn == [7, 7]
    mod.raw_layer(hf, "/nowhere", True, 8, order, last=True)
    assert drawn == [7, 7, 8]
    gp.release()


def _sys_tree(root, cores_of: dict[int, tuple[int, int]]):
    for cpu, (pkg, core) in cores_of.items():
        topo = root / "devices" / "system" / "cpu" / f"cpu{cpu}" / "topology"
        topo.mkdir(parents=True)
        (topo / "physical_package_id").write_text(f"{pkg}\n")
        (topo / "core_id").write_text(f"{core}\n")


@pytest.mark.parametrize("layout, cores_of, threads, want", [
    # an Intel desktop: a core's two threads numbered side by side; 4 workers on 4 cores, a fifth on a second thread
    ("siblings side by side", {c: (0, c // 2) for c in range(8)}, 5, [0, 2, 4, 6]),
    ("siblings side by side", {c: (0, c // 2) for c in range(8)}, 6, [0, 2, 4, 6, 1]),
    # most AMD desktops and servers: the second threads a core count apart
    ("siblings apart", {c: (0, c % 4) for c in range(8)}, 6, [0, 1, 2, 3, 4]),
    # no SMT (the GPU host): CPU order, wrapping round past the last CPU
    ("one thread a core", {c: (0, c) for c in range(4)}, 6, [0, 1, 2, 3, 0]),
])
def test_the_pool_s_workers_take_one_thread_of_each_core_first(vi, tmp_path, layout, cores_of, threads, want):
    """The pool's pinned workers (threads - 1; the caller is the CUDA host-function thread) land on distinct physical
    cores before any core's second thread, whatever order the host numbers its SMT siblings in."""
    mod, _ = vi
    _sys_tree(tmp_path, cores_of)
    assert mod.pinned_cpus(threads, cpus=set(cores_of), sys_root=tmp_path) == want, layout


def test_without_topology_the_pool_pins_in_cpu_order(vi, tmp_path):
    mod, _ = vi
    assert mod.pinned_cpus(4, cpus={5, 1, 3}, sys_root=tmp_path) == [1, 3, 5]


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs: the caller apart from the worker")
def test_the_log_window_says_when_the_caller_shared_a_worker_s_cpu(vi, libs, capfd):
    """The server log's line every report_every calls says how far apart the threads finished and in how many calls
    the caller (CUDA's host-function thread) ran on a CPU a worker is pinned to: a worker pinned to this thread's
    only CPU clashes in every call, one pinned to another CPU in none; and with pin_caller (VRAMKIT_INT4_PIN_CALLER)
    the caller is pinned at its first call to a core of its own."""
    import re
    mod, gp = vi
    lib = next(iter(libs.values()))
    c0, c1 = sorted(os.sched_getaffinity(0))[:2]
    mine = os.sched_getaffinity(0)
    raw = _layer(gp)
    x, ids, w = _batch(2)
    out = np.zeros((2, H), np.float32)

    def four_calls(kern) -> str:
        """What the pool logs over one window of four calls from this thread."""
        job = kern.job(kern.layer(raw, E, K, H, INTER, G), 2, x.ctypes.data, ids.ctypes.data, w.ctypes.data,
                       out.ctypes.data)
        for _ in range(4):
            lib.v4_run(job)
        return capfd.readouterr().err
    said = {}
    try:
        for case, worker_cpu, caller_cpu in (("shared", c0, c0), ("apart", c0, c1)):
            os.sched_setaffinity(0, {worker_cpu})          # the pool pins its worker within this thread's CPUs
            kern = mod.Kernel(lib, 2, report_every=4)
            os.sched_setaffinity(0, {caller_cpu})
            said[case] = four_calls(kern)
        # VRAMKIT_INT4_PIN_CALLER: the caller pinned, at its first call, to the core after the worker's
        both = {c0, c1}
        os.sched_setaffinity(0, both)
        kern = mod.Kernel(lib, 2, report_every=4, pin_caller=True)
        assert kern.caller_cpu in both
        said["pinned"] = four_calls(kern)
        pinned_to = os.sched_getaffinity(0)
    finally:
        os.sched_setaffinity(0, mine)
    assert pinned_to == {kern.caller_cpu}
    for case, clashes in (("shared", 4), ("apart", 0), ("pinned", 0)):
        m = re.search(r"calls 1-4: [\d.]+ ms a call computing on 2 threads .*, threads finishing ([\d.]+) ms apart "
                      r"a call, the caller on a worker's CPU in (\d+) calls", said[case])
        assert m, said[case]
        assert int(m.group(2)) == clashes and float(m.group(1)) >= 0


def test_a_call_started_and_waited_for_gives_what_one_call_gives(vi, libs):
    """v4_start hands the job to the pool's coordinator and returns; v4_wait returns once the output is written: the
    same numbers as v4_run, call after call and after the coordinator went to sleep; a job handed over just before
    the pool is freed still completes (a lost hand-off would hang here: the module's timeout)."""
    mod, gp = vi
    lib = next(iter(libs.values()))
    raw = _layer(gp)
    batches = [_batch(3, seed) for seed in range(12)]
    wants = [_run(mod, lib, raw, *b, 1) for b in batches]      # first: no pool spinning beside them on a small host
    kern = mod.Kernel(lib, 2, report_every=0, pin=False)
    layer = kern.layer(raw, E, K, H, INTER, G)
    assert lib.v4_pool_async(kern.pool) == 0 and lib.v4_pool_async(kern.pool) == 0     # once, then a no-op
    for i, ((x, ids, w), want) in enumerate(zip(batches, wants, strict=True)):
        if i % 6 == 5:
            time.sleep(0.05)        # past the coordinator's 20 ms of spinning: the next call wakes it from its futex
        out = np.full((3, H), np.nan, np.float32)
        job = kern.job(layer, 3, x.ctypes.data, ids.ctypes.data, w.ctypes.data, out.ctypes.data)
        lib.v4_start(job)
        lib.v4_wait(job)
        np.testing.assert_array_equal(out, want)
    lib.v4_pool_free(kern.pool)
    for _ in range(10):     # a job handed over and the pool freed at once, right after a call: it still runs first
        kern = mod.Kernel(lib, 2, report_every=0, pin=False)
        layer = kern.layer(raw, E, K, H, INTER, G)
        lib.v4_pool_async(kern.pool)
        out = np.full((3, H), np.nan, np.float32)
        job = kern.job(layer, 3, x.ctypes.data, ids.ctypes.data, w.ctypes.data, out.ctypes.data)
        lib.v4_start(job)
        lib.v4_wait(job)
        out[:] = np.nan
        lib.v4_start(job)
        lib.v4_pool_free(kern.pool)
        np.testing.assert_array_equal(out, wants[-1])
