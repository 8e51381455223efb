"""The order of `up` and `down`, and what `status` reads.

`up`: resolve the plan (the caller prints it); check everything that can be checked before touching
anything (runtime, GPU, fit, host RAM and memlock for pinned pools, the port); only then start; wait
for /health with the start-up phase reported; warm up; record the run. Any failure after the start
tears down what was started, so nothing is left half-running. Printing is the caller's (commands/launch.py):
these functions report through the `say`/`on_phase` callables they are given.
"""
from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from vramkit import catalog
from vramkit.core.checks import Check
from vramkit.core.host_plan import format_cpulist
from vramkit.core.plan import autofit
from vramkit.core.plan.autofit import AutoFit
from vramkit.core.plan.request import PlanRequest
from vramkit.errors import Exit, VramkitError
from vramkit.launch import checks as launch_checks
from vramkit.launch import steps
from vramkit.launch.hybrid import adapter_for
from vramkit.launch.resolve import Resolved, host_available, nvml_gpu, resolve


def gpu_snapshot():
    """One NVML reading for the whole start (None without NVML or GPUs)."""
    from vramkit.adapters import nvml
    snap = nvml.read_snapshot(with_processes=False)
    return None if snap.unavailable is not None or not snap.gpus else snap


def in_use(snap, ids: list[int]) -> int | None:
    """Bytes in use now on the fullest of the server's GPUs, the base of its VRAM budget; None when NVML did
    not say for any of them (the budget then says what it assumed instead: launch/steps.py `vram_budget`)."""
    used = [snap.gpus[i].in_use_bytes for i in ids if snap is not None and 0 <= i < len(snap.gpus)]
    known = [u for u in used if isinstance(u, int)]
    return max(known) if known else None


@dataclass
class Prepared:
    """Everything decided before a start: the plan, the GPUs, the command and compose file, the checks."""
    resolved: Resolved
    spec: steps.LaunchSpec
    gpu_ids: list[int]
    in_use_before: int | None      # None: NVML gave no reading before the start
    native: list[str]
    compose_text: str
    paths: dict[str, Path]
    checks: list[Check]
    autofit: AutoFit | None = None      # the steps down from the asked knobs, when the asked ones did not fit
    autofit_refused: str | None = None  # why auto-fit did not step (nothing fits, or --no-auto-fit)

    def failed(self, *, no_fit_check: bool = False) -> list[Check]:
        return [c for c in self.checks if not c.ok and c.fatal and not (no_fit_check and c.name == "fit")]


def prepare(request: PlanRequest, spec: steps.LaunchSpec, *, assume_gpu: bool = False,
            auto_fit: bool = True) -> Prepared:
    """Read the GPUs once, resolve the plan for them, build the command and run every pre-start check.
    Starts nothing. With a GPU present and neither --gpu nor --gpu-free-gib given, the plan is for the GPUs
    the server will use (--gpu auto), at the memory free now. When that plan does not fit the GPU and
    `auto_fit`, the knobs step down in core/plan/autofit.py's declared order to the largest that fits, and
    that is what is built and checked (Prepared.autofit says what changed)."""
    snap = gpu_snapshot()
    gpu_count = len(snap.gpus) if snap is not None else 0
    gpu_present = gpu_count > 0 or assume_gpu
    gpu = "auto" if request.gpu is None and gpu_present and request.gpu_free_gib is None else request.gpu
    # plan what --model-path loads
    request = replace(request, gpu=gpu, model=steps.model_to_plan(request.model, spec.model_path))

    def resolve_for(req: PlanRequest) -> Resolved:
        return resolve(req, read_gpu=lambda tp, link_for=None: nvml_gpu(tp, steps.server_gpu_ids(spec, tp), snap,
                                                                        link_for=link_for),
                       read_host=host_available)

    r = resolve_for(request)
    fit, refused = None, None
    if not autofit.gpu_fits(r.plan):
        if not auto_fit:
            refused = "--no-auto-fit: the asked knobs or nothing"
        else:
            fit = autofit.step_down(r.model, r.target, r.knobs, catalog.engine())
            if fit is None:
                refused = "nothing in the order " + ", ".join(autofit.STEP_ORDER) + " fits"
            else:       # the stepped-down knobs as if asked: the same resolution, the same checks
                r = resolve_for(replace(request, knobs=dict(request.knobs) | fit.knobs))
    ids = steps.server_gpu_ids(spec, r.plan.knobs.tp)
    native, compose_text = steps.build(r, spec)
    from vramkit.adapters import docker, host, native_python, process
    checks = launch_checks.preflight(r, spec, gpu_present=gpu_present, docker_check=docker.check_engine,
                                     host_ram=lambda: host.host_memory()[1], memlock=host.memlock_limit,
                                     port_free=process.port_free, gpu_count=gpu_count or None,
                                     sglang_import=native_python.probe_sglang, c_compiler=host.c_compiler)
    return Prepared(r, spec, ids, in_use(snap, ids), native, compose_text, steps.state_paths(spec.name), checks,
                    fit, refused)


def refuse_failed(prep: Prepared, *, no_fit_check: bool = False, skip: tuple[str, ...] = ()) -> None:
    """The first fatal failed check (not named in `skip`) as one error (its own exit code); nothing has been
    started."""
    failed = [c for c in prep.failed(no_fit_check=no_fit_check) if c.name not in skip]
    if failed:
        first = failed[0]
        what, _, todo = first.detail.partition(" -> ")
        if first.name == "fit" and prep.autofit_refused:
            what += f" (auto-fit: {prep.autofit_refused})"
        raise VramkitError(f"not starting: {first.name}: {what}", todo or "see the checks above", Exit(first.code))


def start(prep: Prepared, *, say: Callable[[str], None], on_phase: Callable[[str], None] | None = None,
          on_progress: Callable[[str], None] | None = None) -> dict:
    """Start, wait for /health, warm up, record; tear down on any failure. Returns the run record.
    `on_progress` gets a progress line every poll (the ETA from the last start of this server here)."""
    from vramkit.adapters import docker, process
    from vramkit.adapters.sglang_http import SglangClient
    from vramkit.adapters.state import last_start_seconds, save_start_seconds
    r, spec, paths = prep.resolved, prep.spec, prep.paths
    pid = None
    compose_path = None
    pin_note = None             # native runs with VRAMKIT_SGLANG_CPUSET: "ok" or "failed: why"
    client = SglangClient(f"http://{spec.host}:{spec.port}", timeout_s=120)
    try:
        if spec.runtime == "native":
            paths["log"].parent.mkdir(parents=True, exist_ok=True)
            paths["log"].write_text("")
            cpus = steps.env_cpuset()
            # NVML numbers cards by PCI bus; CUDA, unless told, fastest first: PCI_BUS_ID makes them agree
            env = ({"CUDA_VISIBLE_DEVICES": ",".join(map(str, prep.gpu_ids)), "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
                   if "CUDA_VISIBLE_DEVICES" not in os.environ else {})
            if (adapter := adapter_for(r.hybrid, r.plan)) is not None:
                env.update(adapter.native_env())    # the kit's SGLang adapter on the server's path
            pid = process.start_background(prep.native, paths["log"], env=env or None)
            say(f"started pid {pid}; log {paths['log']}")
            if cpus:
                why = pin(pid, cpus)
                pin_note = f"failed: {why}" if why else "ok"
                say(f"pinned to CPUs {format_cpulist(cpus)}" if not why else
                    f"[yellow]warning[/yellow]: pinning to CPUs {format_cpulist(cpus)} failed ({why}); the server "
                    f"runs on every CPU -> check VRAMKIT_SGLANG_CPUSET against `nproc`, or `vramkit host --pin {pid}`")

            def is_alive() -> bool:
                return process.alive(pid)

            def read_log() -> str:
                return paths["log"].read_text(errors="replace")
        else:
            compose_path = paths["compose"]
            compose_path.parent.mkdir(parents=True, exist_ok=True)
            compose_path.write_text(prep.compose_text)
            say("docker compose up: a first start pulls (or builds) the image; Docker's progress follows")
            docker.up(compose_path, on_line=lambda line: (on_progress or say)(f"docker: {line}"))

            def is_alive() -> bool:
                return docker.container_status(spec.name) in ("running", "created", "restarting")

            def read_log() -> str:
                return docker.logs(spec.name)
        key = start_key(prep)
        took = steps.wait_healthy(client, spec, is_alive=is_alive, read_log=read_log, on_phase=on_phase,
                                  on_progress=(lambda line: on_progress(f"SGLang: {line}")) if on_progress else None,
                                  last_start_s=last_start_seconds(key))
        save_start_seconds(key, took)
        say(f"healthy after {took:.0f} s")
        log_now = read_log()
        for warned in (steps.embed_warning(r.plan, log_now), steps.int4_warning(r.plan, log_now)):
            if warned is not None:
                say(f"[yellow]warning[/yellow]: {warned}")
        lat = steps.warm_up(client, spec, r.model.vocab_size)
        say("warm-up: " + ", ".join(f"{x * 1000:.0f} ms" for x in lat))
    except BaseException:
        for problem in teardown(pid, compose_path):
            say(f"[red]clean-up[/red]: {problem}")
        raise
    finally:
        client.close()
    rec = steps.record(r, spec, pid, compose_path, in_use_before_start=prep.in_use_before, cpu_pin=pin_note,
                       auto_fit=prep.autofit.lines() if prep.autofit else None, start_s=round(took, 1))
    if prep.in_use_before is None:
        say(f"[yellow]note[/yellow]: no NVML reading before the start; vram-safe's budget assumes "
            f"{rec['vram_budget_basis']}")
    return rec


def start_key(prep: Prepared) -> str:
    """What makes two starts comparable for the ETA: the runtime and the command (model, knobs, load format)."""
    import hashlib
    return f"{prep.spec.runtime}:" + hashlib.sha256(" ".join(prep.native[1:]).encode()).hexdigest()[:16]


def pin(pid: int, cpus: tuple[int, ...]) -> str | None:
    """Pin a just-started server (every thread; children inherit it); None when it took, else why not."""
    import psutil

    from vramkit.adapters.host import pin_process
    try:
        result = pin_process(pid, cpus)
    except (OSError, psutil.Error) as e:
        return getattr(e, "strerror", None) or str(e) or type(e).__name__
    if result["failed"]:
        return "; ".join(result["failed"][:3])
    return None


def teardown(pid: int | None, compose_path: Path | None) -> list[str]:
    """Stop what a failed start left; what could not be stopped, in words (the caller reports it)."""
    from vramkit.adapters import docker, process
    problems = []
    if pid is not None:
        process.stop(pid)
    if compose_path is not None:
        try:
            docker.down(compose_path)
        except VramkitError as e:
            problems.append(e.line().removeprefix("vramkit: "))
    return problems


def down(name: str, say: Callable[[str], None]) -> bool:
    """Stop what vramkit recorded under `name` and drop the record; False when nothing was recorded.
    When `docker compose down` fails, the error is raised and the record kept, so `down` can be run again.
    A native server's processes are waited for until the GPU no longer lists them (`gpu_released`); `say` gets the
    warning when they outlast RELEASE_WAIT_S."""
    from vramkit.adapters import docker, process
    from vramkit.adapters.state import clear_running, read_running
    entries = read_running(name)
    if not entries:
        return False
    e = entries[0]
    if e.get("pid"):
        pids = process.tree_pids(int(e["pid"]))
        process.stop(int(e["pid"]))
        if not gpu_released(pids, timeout_s=RELEASE_WAIT_S):
            say(f"vramkit: warning: the GPU still lists {name}'s processes {sorted(pids)} {RELEASE_WAIT_S:.0f} s "
                "after they were stopped; a plan made now would see their memory as used (check nvidia-smi)")
    if e.get("compose_file"):
        docker.down(Path(e["compose_file"]))
    clear_running(name)
    return True


RELEASE_WAIT_S = 60.0


def gpu_released(pids: set[int], timeout_s: float = RELEASE_WAIT_S, poll_s: float = 0.5,
                 clock: Callable[[], float] | None = None, sleep: Callable[[float], None] | None = None) -> bool:
    """Wait until no GPU lists one of `pids`: True once none does, or when NVML cannot list processes (nothing to
    wait on); False after timeout_s. The driver frees a stopped server's memory after its processes go, and a
    plan read in between sees the card still full. On the H100 host (2026-11-27) a start right after `down` read
    0.35 GiB free and was refused (benchmarks/results/gpu/moe-vs-llamacpp-ggml/run1)."""
    import time

    from vramkit.adapters import nvml
    from vramkit.core.na import is_na
    clock = clock or time.monotonic
    sleep = sleep or time.sleep
    deadline = clock() + timeout_s
    while True:
        snap = nvml.read_snapshot(with_processes=True)
        if snap.unavailable is not None:
            return True
        listed = [g.processes for g in snap.gpus if not is_na(g.processes)]
        if not listed or not {p.pid for procs in listed for p in procs} & pids:
            return True
        if clock() >= deadline:
            return False
        sleep(poll_s)


def running() -> list[dict]:
    """Each recorded run with whether its process lives and what /health answers."""
    from vramkit.adapters import process
    from vramkit.adapters.sglang_http import SglangClient
    from vramkit.adapters.state import read_running
    out = []
    for e in read_running():
        alive = process.alive(int(e["pid"])) if e.get("pid") else None
        with SglangClient(f"http://{e.get('host', '127.0.0.1')}:{e['port']}") as c:
            health = c.health()
        out.append({**e, "process_alive": alive, "health": health})
    return out
