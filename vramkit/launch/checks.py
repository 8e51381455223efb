"""Every check before a start, each outside thing passed in as a function so tests drive the situations."""
from __future__ import annotations

from vramkit import catalog
from vramkit.core.checks import Check
from vramkit.core.plan.knobs import SGLANG_FLAGS
from vramkit.core.plan.planner import host_ram_need
from vramkit.errors import Exit, VramkitError
from vramkit.launch.settings import setting
from vramkit.launch.steps import TOKENIZER_FILES, LaunchSpec, has_tokenizer, model_folder, server_gpu_ids
from vramkit.units import bytes2human


def preflight(resolved, spec: LaunchSpec, *, gpu_present: bool, docker_check, host_ram, memlock, port_free,
              gpu_count: int | None = None, sglang_import=None, c_compiler=None) -> list[Check]:
    """Every check before starting; each adapter is passed in so tests can drive the situations.
    `sglang_import(python) -> Probe` (adapters/native_python.py): asked for RUNTIME=native only.
    `c_compiler() -> path or None`: the C compiler a native server builds the int4 decode kernel with, asked only where
    the plan decodes the CPU layers on it (kt_cpu_decode)."""
    p = resolved.plan
    checks: list[Check] = []
    if spec.runtime == "docker":
        try:
            docker_check()
            checks.append(Check.of("docker", True, "engine and NVIDIA runtime present"))
        except VramkitError as e:
            checks.append(Check.of("docker", False, e.what + " -> " + e.todo, e.code))
    n_gpu = p.knobs.tp
    if gpu_present and gpu_count is not None and gpu_count < n_gpu:
        checks.append(Check.of("gpus", False, f"tensor parallel size {n_gpu} needs {n_gpu} GPUs, NVML sees {gpu_count} "
                            f"-> --tp {gpu_count} or more cards", Exit.NO_GPU))
    elif gpu_present and gpu_count is not None:
        absent = [i for i in server_gpu_ids(spec, n_gpu) if i >= gpu_count]
        if absent:
            checks.append(Check.of("gpus", False, f"GPU {absent[0]} is not there: NVML sees {gpu_count} "
                                f"(0-{gpu_count - 1}) -> pick --gpus from `nvidia-smi -L`", Exit.NO_GPU))
    checks.append(Check.of("gpu", gpu_present, "NVML sees a GPU" if gpu_present else
                        "no NVIDIA GPU visible (NVML) -> run on a GPU host; `vramkit plan` works anywhere",
                        Exit.NO_GPU))
    if spec.runtime == "native" and sglang_import is not None:
        probe = sglang_import(spec.sglang_python)
        checks.extend(sglang_checks(spec, probe))
        if resolved.hybrid is not None and probe.ok:
            checks.append(kt_kernel_check(spec, probe, resolved.hybrid.plan.kt_kernel))
    if spec.runtime == "native" and c_compiler is not None and resolved.hybrid is not None \
            and resolved.hybrid.plan.cpu_decode == "int4":
        cc = c_compiler()
        # not fatal: without one the server starts and its CPU layers decode on kt-kernel (the adapter says so)
        checks.append(Check.of("int4-cc", cc is not None, f"C compiler {cc} builds the int4 decode kernel" if cc else
                               "no C compiler (cc, or $CC) for the int4 decode kernel: the CPU layers would decode on "
                               "kt-kernel, slower than planned -> install gcc, or --kt-cpu-decode kt",
                               Exit.BAD_INPUT, fatal=False))
    if p.host_ram_bytes:
        avail = host_ram()          # read again now: the plan's figure may be minutes old
        # the plan's pinned figure (host cache, offloaded weights, the moved embeddings); SGLang's reserve beside it
        _, reserve = host_ram_need(int(p.knobs.hicache_gb * 1e9), p.weights_pinned_host_bytes, catalog.engine())
        ok = avail - reserve >= p.host_ram_bytes
        checks.append(Check.of("host-ram", ok, f"{bytes2human(p.host_ram_bytes)} pinned needed"
                            + (f" + {bytes2human(reserve, digits=0)} SGLang keeps free" if reserve else "")
                            + f", {bytes2human(avail)} available", Exit.HOST_MEMORY))
        soft, _hard = memlock()
        if spec.runtime == "native" and soft is not None and soft < p.host_ram_bytes:
            # CUDA's own pinned allocations are not charged to RLIMIT_MEMLOCK on the drivers we ran
            # (benchmarks/gpu/nvml_vs_smi.py probes it), so this warns rather than refuses.
            checks.append(Check.of("memlock", False, f"memlock limit {bytes2human(soft)} < "
                                f"{bytes2human(p.host_ram_bytes)} "
                                f"pinned -> `ulimit -l unlimited` if pinning fails", Exit.HOST_MEMORY, fatal=False))
    if resolved.hybrid is not None:
        avail = host_ram()
        for name, ok, detail in resolved.hybrid.checks(avail):
            code = Exit.HOST_MEMORY if name == "kt-host-ram" else Exit.HOST_CPU if name == "cpu-isa" else Exit.BAD_INPUT
            checks.append(Check.of(name, ok, detail, code))
    if (tok := tokenizer_check(resolved, spec)) is not None:
        checks.append(tok)
    # host RAM has its own check (and exit code) above, read fresh; the rest of the planner's reasons here
    # (the hybrid mode's CPU too: its check above reads THIS host's CPU, whatever --cpu-isa the plan was for)
    reasons = [r for r in p.reasons if getattr(r, "kind", None) not in ("host_ram", "cpu")]
    checks.append(Check.of("fit", not reasons, "the plan fits" if not reasons else "; ".join(reasons) +
                           " -> `vramkit plan` lists what would fit", Exit.NO_FIT))
    busy = not port_free(spec.host, spec.port)
    busy_text = f"is in use -> stop what holds it or set {setting('port').hint()}"
    checks.append(Check.of("port", not busy, f"{spec.host}:{spec.port} " + (busy_text if busy else "free"),
                           Exit.PORT_BUSY))
    return checks


def tokenizer_check(resolved, spec: LaunchSpec) -> Check | None:
    """A model folder with real weights and no tokenizer: SGLang starts, but has no tokenizer of this model for text
    (dummy weights get --skip-tokenizer-init instead, core/render/sglang.py). Seen on the H100 host (2026-11-27,
    benchmarks/results/gpu/moe-budget/hotcheck/gpu-host-flags/): four such servers died at their first request with
    "CUDA error: invalid argument"; the same servers with --skip-tokenizer-init (and SGLang's default KV splits, the
    other flag that differed) ran."""
    _path, folder = model_folder(resolved, spec)
    if folder is None or spec.load_format == "dummy" or has_tokenizer(folder, spec.extra_args) \
            or SGLANG_FLAGS["skip_tokenizer_init"] in spec.extra_args:
        return None
    return Check.of("tokenizer", False, f"{folder} holds no tokenizer ({' / '.join(TOKENIZER_FILES)}): SGLang would "
                    "have none of this model's for text -> copy the checkpoint's tokenizer files into it, or "
                    f"--extra-args '{SGLANG_FLAGS['tokenizer_path']} DIR' (or '{SGLANG_FLAGS['skip_tokenizer_init']}': "
                    "token ids only)", Exit.BAD_INPUT)


def kt_kernel_check(spec: LaunchSpec, probe, planned: str) -> Check:
    """RUNTIME=native, the hybrid MoE mode: the kt-kernel release beside SGLang is the one the plan is for (this
    CPU's: config/versions.toml; 0.5.1's avx2 build dies with SIGILL on an AVX2-only CPU, 0.7.0 is not what the
    AMX / AVX-512 figures were measured on)."""
    fix = f"make setup-kt-native (kt-kernel {planned} for this CPU, into {spec.sglang_python})"
    if probe.kt_kernel is None:
        return Check.of("kt-kernel", False, f"{spec.sglang_python} has no kt-kernel -> {fix}", Exit.NO_SGLANG)
    if probe.kt_kernel != planned:
        return Check.of("kt-kernel", False, f"kt-kernel {probe.kt_kernel} is installed, the plan is for {planned} "
                        f"-> {fix}", Exit.HOST_CPU)
    return Check.of("kt-kernel", True, f"kt-kernel {planned}")


def sglang_checks(spec: LaunchSpec, probe) -> list[Check]:
    """RUNTIME=native: the interpreter must import SGLang (issue 10: it was .venv's, which never has it, and
    the start failed with exit 15 and an empty reason); a release other than the pinned one only warns."""
    from vramkit.adapters.native_python import FIX
    where = f"{spec.sglang_python} ({spec.sglang_python_from})" if spec.sglang_python_from else spec.sglang_python
    if not probe.ok:
        return [Check.of("sglang", False, f"{where} cannot import SGLang ({probe.detail}) -> {FIX}", Exit.NO_SGLANG)]
    out = [Check.of("sglang", True, f"sglang {probe.version} in {where}")]
    pinned = catalog.versions().sglang_pip
    if probe.version != pinned:
        out.append(Check.of("sglang-pin", False, f"sglang {probe.version} is not the pinned {pinned} that every flag "
                            "is checked against -> make setup-gpu installs the pinned one", Exit.NO_SGLANG,
                            fatal=False))
    return out
