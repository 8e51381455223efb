"""The pieces of a launch: what to start (LaunchSpec), the native command and compose file, waiting for
/health, warming up, the run record. `launch/up.py` puts them in order."""
from __future__ import annotations

import os
import shlex
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from vramkit import catalog
from vramkit.core import progress, sglang_log
from vramkit.core.plan.knobs import SGLANG_FLAGS
from vramkit.core.render.sglang import compose_yaml, container_model_path, sglang_args
from vramkit.errors import Exit, VramkitError
from vramkit.launch.hybrid import adapter_for
from vramkit.launch.settings import setting


@dataclass
class LaunchSpec:
    name: str
    runtime: str                  # docker | native
    host: str = "127.0.0.1"
    port: int = field(default_factory=lambda: catalog.sglang().port)   # the host port
    model_path: str | None = None # overrides the model's hf_id (a local folder)
    load_format: str | None = None
    extra_args: list[str] = field(default_factory=list)
    sglang_python: str = sys.executable   # RUNTIME=native's interpreter: adapters/native_python.py picks it
    sglang_python_from: str = ""          # where that choice came from, for the check line
    timeout_s: float = 1200.0
    dry_run: bool = False
    warmup_requests: int = 3
    gpu_ids: list[int] | None = None   # NVML indices (--gpus); None = the first `tp` cards


def server_gpu_ids(spec: LaunchSpec, tp: int) -> list[int]:
    """The GPUs (NVML's numbering) the server runs on: the first `tp` of --gpus, else the first `tp` cards."""
    if spec.gpu_ids is None:
        return list(range(tp))
    if len(spec.gpu_ids) < tp:
        raise VramkitError(f"--gpus names {len(spec.gpu_ids)} GPU(s) for tensor parallel size {tp}",
                           f"name {tp} (e.g. --gpus {','.join(map(str, range(tp)))}) or leave --gpus out",
                           Exit.BAD_INPUT)
    return list(spec.gpu_ids[:tp])


def state_paths(name: str) -> dict[str, Path]:
    from vramkit.adapters.state import state_dir
    d = state_dir()
    return {"log": d / f"{name}.log", "compose": d / f"{name}.compose.yml"}


# a model folder holding one of these, or a --tokenizer-path among the extra args, serves text (chat) with dummy weights
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")   # the last: sentencepiece alone


def model_folder(resolved, spec: LaunchSpec) -> tuple[str, str | None]:
    """(the model path, the folder on this host it names, or None for a Hugging Face id)."""
    from vramkit.launch.resolve import default_model_path
    model_path = spec.model_path or default_model_path(resolved.model)   # `vramkit pull`'s folder where there is one
    return model_path, str(Path(model_path).resolve()) if Path(model_path).is_dir() else None


def has_tokenizer(folder: str | None, extra_args: list[str]) -> bool:
    """Whether SGLang gets the model's tokenizer: --tokenizer-path among the extra args, or its files in the folder."""
    return SGLANG_FLAGS["tokenizer_path"] in extra_args or (
        folder is not None and any((Path(folder) / f).is_file() for f in TOKENIZER_FILES))


def build(resolved, spec: LaunchSpec) -> tuple[list[str], str]:
    """(the native command, the compose file text) for this launch."""
    model = resolved.model
    model_path, folder = model_folder(resolved, spec)
    # a folder on this host (a folder model, or --model-path DIR): natively SGLang reads it where it is; in a
    # container it is bind-mounted read-only and --model-path names the mount
    mount = (folder, container_model_path(folder)) if folder else None
    if folder:
        model_path = folder if spec.runtime == "native" else container_model_path(folder)
    argv = sglang_args(model, resolved.plan, model_path=model_path, host=spec.host if spec.runtime == "native"
                       else "0.0.0.0", port=spec.port if spec.runtime == "native" else catalog.sglang().port,
                       load_format=spec.load_format, extra=spec.extra_args,
                       folder_has_tokenizer=has_tokenizer(folder, spec.extra_args))
    native_argv, kt = argv, {}
    if resolved.hybrid is not None:
        native_argv = argv + resolved.hybrid.args(model_path)
    if (adapter := adapter_for(resolved.hybrid, resolved.plan)) is not None:
        kt = adapter.compose_parts(str(catalog.CONFIG_DIR.parent / "services" / "sglang-kt"))
    native = [spec.sglang_python, "-m", "sglang.launch_server", *native_argv]
    v = catalog.versions()
    n_gpu = resolved.plan.knobs.tp
    gpu_ids = server_gpu_ids(spec, n_gpu)
    compose = compose_yaml(project=spec.name, preset=resolved.preset or "custom", model=model,
                           gpu_name=resolved.gpu.label if resolved.gpu else "given free memory", p=resolved.plan,
                           image=kt.get("image", v.sglang_image), argv=argv + kt.get("args", []), gpu_ids=gpu_ids,
                           port=catalog.sglang().port, model_mount=mount, build_context=kt.get("build_context"),
                           build_args=kt.get("build_args"), extra_volumes=kt.get("extra_volumes", ()),
                           extra_env=kt.get("extra_env", ()),
                           source_note=f"Rendered by `vramkit up` for preset {resolved.preset or 'custom'}.")
    return native, compose


def wait_healthy(client, spec: LaunchSpec, *, is_alive, read_log, on_phase=None, sleep=time.sleep,
                 clock=time.monotonic, on_progress=None, last_start_s: float | None = None) -> float:
    """Poll /health until 200; raise START_FAILED if the server exits, HEALTH_TIMEOUT after timeout_s.
    `on_phase(label)` once per new phase; `on_progress(line)` every poll: the phase, its place in the order,
    the shards loaded, the time elapsed and the ETA from `last_start_s` (core/progress.py)."""
    t0 = clock()
    last_phase = None
    while True:
        status = client.health()
        if status == 200:
            return clock() - t0
        text = read_log()
        index, ph = sglang_log.phase_at(text)
        if on_phase and ph != last_phase:
            on_phase(ph)
            last_phase = ph
        if on_progress:
            loading = sglang_log.shards(text) if ph == "loading weights" else None
            on_progress(progress.start_line(ph, index, len(sglang_log.PHASES), clock() - t0, last_start_s, loading))
        if not is_alive():
            where = state_paths(spec.name)["log"] if spec.runtime == "native" else "docker logs " + spec.name
            raise VramkitError(f"SGLang exited during start-up ({ph}): {sglang_log.last_error(text)}", f"see {where}",
                               Exit.START_FAILED)
        if clock() - t0 > spec.timeout_s:
            raise VramkitError(f"SGLang did not become healthy within {spec.timeout_s:.0f} s (last phase: {ph})",
                               f"raise {setting('timeout_s').hint()}, or read the log", Exit.HEALTH_TIMEOUT)
        sleep(2.0)


def embed_warning(plan, log_text: str) -> str | None:
    """Where the plan moved the token embeddings to host RAM (kt_embed_host) but the started server's log does not
    show the adapter moving them: what happened and what the pool came to against the plan (None: as planned, or
    nothing was moved). The adapter leaves the table on the GPU rather than fail the load (vramkit_host_embed.py),
    and the pool is then that much smaller than the plan."""
    if not plan.host_embed_bytes:
        return None
    figures = sglang_log.parse(log_text).values
    if figures.get("embed_moved") is not None:
        return None
    stayed = sglang_log.EMBED_STAYED
    said = next((ln.split(stayed, 1)[1].strip() for ln in log_text.splitlines() if stayed in ln), None)
    why = said or "the kit's adapter did not report the move (it is not on SGLang's path)"
    pool = figures.get("max_total_num_tokens")
    return (f"the token embeddings stayed on the GPU: {why}; KV pool "
            + (f"{int(pool):,} tokens" if pool is not None else "not logged")
            + f" against the plan's {plan.kv_pool_tokens:,} -> `--kt-embed-host off` plans the server as it runs")


def int4_warning(plan, log_text: str) -> str | None:
    """Where the plan decodes the CPU layers on the kit's int4 kernel (kt_cpu_decode) but the started server's log
    does not show it taking them: what happened (the adapter's own line, or that it did not report) and what that
    means (None: as planned, or nothing planned). The adapter leaves those layers on kt-kernel rather than fail the
    load (vramkit_int4_experts.py), so the server decodes slower than the plan's estimate."""
    h = plan.hybrid
    if h is None or h.cpu_decode != "int4":
        return None
    figures = sglang_log.parse(log_text).values
    if sglang_log.int4_decoded(figures):
        return None
    gave_up = next((ln.split("vramkit_int4_experts: ", 1)[1].strip() for ln in log_text.splitlines()
                    if sglang_log.INT4_GAVE_UP in ln), None)
    why = gave_up or "the kit's adapter did not report the int4 kernel (it is not on SGLang's path)"
    return (f"the CPU layers' decode is not all on the int4 kernel: {why}; it decodes slower than the plan's "
            f"~{h.decode_tok_s:.0f} tok/s -> `--kt-cpu-decode kt` plans the server as it runs")


def warm_up(client, spec: LaunchSpec, vocab_size: int) -> list[float]:
    """A few short generations so the first user request does not pay one-time costs."""
    lat = []
    for i in range(spec.warmup_requests):
        ids = [(17 + 31 * j + i) % vocab_size for j in range(64)]
        r = client.generate(input_ids=ids, max_new_tokens=16, stream=False) if spec.load_format == "dummy" \
            or SGLANG_FLAGS["skip_tokenizer_init"] in spec.extra_args \
            else client.generate(text="def fibonacci(n):", max_new_tokens=16, stream=False)
        if not r.ok:
            raise VramkitError(f"warm-up request failed: {r.error}", "see the server log", Exit.START_FAILED)
        lat.append(r.latency_s)
    return lat


def vram_budget(resolved, in_use_before_start: int | None) -> tuple[int, str]:
    """What `vram-safe` should allow per GPU once this server runs, and what it rests on: what was in use
    before it started (driver reserve, other processes; measured by NVML) plus the planner's peak, plus the
    5 % the calibration test allows. Without a reading, the plan's own assumption of what the card holds
    besides the server (card total - free at start - CUDA context) stands in, and the basis says so."""
    p = resolved.plan
    if in_use_before_start is not None:
        return int(in_use_before_start + p.peak_vram_bytes * 1.05), "in use before the start (NVML) + peak x 1.05"
    assumed = p.held_besides_server_bytes
    return (int(assumed + p.peak_vram_bytes * 1.05),
            f"the plan's assumed {assumed / 2**30:.2f} GiB held besides the server (not read) + peak x 1.05")


def record(resolved, spec: LaunchSpec, pid: int | None, compose_path: Path | None,
           in_use_before_start: int | None = None, cpu_pin: str | None = None,
           auto_fit: list[str] | None = None, start_s: float | None = None) -> dict:
    budget, basis = vram_budget(resolved, in_use_before_start)
    from vramkit.adapters.state import write_running
    data = {
        "name": spec.name, "preset": resolved.preset, "model": resolved.model.name, "runtime": spec.runtime,
        "host": spec.host, "port": spec.port, "pid": pid,
        "compose_file": str(compose_path) if compose_path else None,
        "log": str(state_paths(spec.name)["log"]) if spec.runtime == "native" else None,
        "gpu_indices": server_gpu_ids(spec, resolved.plan.knobs.tp),
        "vram_budget_bytes": budget, "vram_budget_basis": basis,
        "hicache_bytes": int(resolved.plan.knobs.hicache_gb * 1e9),
        "cpu_pin": cpu_pin,          # None: no VRAMKIT_SGLANG_CPUSET (or docker: compose's cpuset); "ok"; "failed: why"
        "auto_fit": auto_fit,        # None: started as asked; else what auto-fit changed and what it costs
        "start_s": start_s,          # seconds from the start to /health (the next start's ETA)
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    write_running(spec.name, data)
    return data


def env_cpuset(name: str | None = None) -> tuple[int, ...]:
    """A cpuset (default VRAMKIT_SGLANG_CPUSET) from the environment or the repo's .env (written by
    `make optimize-write`)."""
    from vramkit.core.host_plan import ENV_SERVER_CPUSET, parse_cpulist, read_env_value
    name = name or ENV_SERVER_CPUSET
    text = os.environ.get(name)
    env_file = catalog.CONFIG_DIR.parent / ".env"
    if text is None and env_file.is_file():
        text = read_env_value(env_file.read_text(), name)
    try:
        return parse_cpulist(text or "")
    except ValueError as e:
        raise VramkitError(f"{name}: {e}", f"fix it in the environment or {env_file}", Exit.BAD_INPUT) from None


def shell_line(cmd: list[str]) -> str:
    return " ".join(shlex.quote(c) for c in cmd)


# ModelSpec fields that are the model's shape (what the planner reads); names and paths are not.
_NOT_SHAPE = {"name", "hf_id", "config_dir", "note", "serving"}   # serving: names and parsers, not the shape


def model_to_plan(model_arg: str | None, model_path: str | None) -> str | None:
    """What the planner plans when --model-path (MODEL_PATH) says what SGLang loads: that, not the preset's model.

    Issue 10: `LOAD_FORMAT=dummy MODEL_PATH=config/models/<name>` planned the preset's 14B, recorded its VRAM
    budget, and launched the other folder. Now:
    - a local folder with config.json: plan that folder (with --model too, both must have the same shape);
    - the hf_id of a catalogued model: plan that model;
    - anything else (a Hugging Face id vramkit does not know): --model must say which model it is.
    Returns the value for --model (unchanged when there is no --model-path).
    """
    if not model_path:
        return model_arg
    folder = Path(model_path)
    if (folder / "config.json").is_file():
        if model_arg:
            named, loaded = catalog.model(model_arg), catalog.read_model_config(folder)
            differs = sorted(k for k in vars(loaded) if k not in _NOT_SHAPE and getattr(loaded, k) != getattr(named, k))
            if differs:
                raise VramkitError(f"--model {model_arg} and --model-path {model_path} are different models "
                                   f"({', '.join(differs[:3])} differ)",
                                   "drop --model: the folder's config.json is what SGLang loads and is planned",
                                   Exit.BAD_INPUT)
        return str(folder)
    by_hf_id = [m.name for m in catalog.models().values() if m.hf_id == model_path]
    if by_hf_id:
        if model_arg and model_arg not in by_hf_id:
            raise VramkitError(f"--model {model_arg} and --model-path {model_path} ({by_hf_id[0]}) are different "
                               "models", "drop one of them", Exit.BAD_INPUT)
        return model_arg or by_hf_id[0]
    if model_arg:
        return model_arg
    what = "a folder without config.json" if folder.is_dir() else "not a folder here nor a catalogued hf_id"
    raise VramkitError(f"--model-path {model_path}: {what}: its shape is unknown, so the start cannot be planned",
                       "give a folder holding the model's config.json, or say which model it is with --model "
                       "(vramkit plan --list)", Exit.BAD_INPUT)
