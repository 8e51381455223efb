"""`vramkit up | down | status | compose`: presets to running servers and committed compose files."""
from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from pathlib import Path

from vramkit import catalog, launcher
from vramkit.commands.plan import add_plan_arguments, host_available, nvml_gpu, render_plan, resolve
from vramkit.core.render import SGLANG_PORT, compose_yaml, sglang_args
from vramkit.errors import Exit, VramkitError

REPO_ROOT = catalog.CONFIG_DIR.parent
COMPOSE_GPU = "rtx-5060-ti-16gb"      # committed compose files are rendered for the first user's card


def _console():
    from rich.console import Console
    return Console(stderr=False)


def _snapshot():
    """One NVML reading for the whole start (None without NVML or GPUs)."""
    from vramkit.adapters import nvml
    snap = nvml.read_snapshot(with_processes=False)
    return None if snap.unavailable is not None or not snap.gpus else snap


def _in_use(snap, ids: list[int]) -> int:
    """Bytes in use now on the fullest of the server's GPUs (0 when unknown): the base of its VRAM budget."""
    used = [snap.gpus[i].in_use_bytes for i in ids if snap is not None and 0 <= i < len(snap.gpus)]
    return max([u for u in used if isinstance(u, int)], default=0)


def _spec(args) -> launcher.LaunchSpec:
    extra = shlex.split(args.extra_args or os.environ.get("SGLANG_EXTRA_ARGS", ""))
    return launcher.LaunchSpec(
        name=args.name or f"vramkit-{args.preset or 'custom'}", runtime=args.runtime, port=args.port,
        model_path=args.model_path, load_format=args.load_format, extra_args=extra,
        sglang_python=args.sglang_python, timeout_s=args.timeout, dry_run=args.dry_run,
        gpu_ids=_gpu_ids(args.gpus))


def _gpu_ids(text: str | None) -> list[int] | None:
    if not text:
        return None
    try:
        ids = [int(x) for x in text.split(",")]
    except ValueError:
        raise VramkitError(f"--gpus {text!r} is not a list of GPU indices", "e.g. --gpus 0 or --gpus 0,1",
                           Exit.BAD_INPUT) from None
    if min(ids) < 0 or len(set(ids)) != len(ids):
        raise VramkitError(f"--gpus {text!r}: indices must be distinct and >= 0", "e.g. --gpus 0,1", Exit.BAD_INPUT)
    return ids


def cmd_up(args) -> int:
    con = _console()
    spec = _spec(args)
    snap = _snapshot()
    gpu_count = len(snap.gpus) if snap is not None else 0
    gpu_present = gpu_count > 0 or args.assume_gpu
    if args.gpu is None and gpu_present and args.gpu_free_gib is None:
        args.gpu = "auto"
    r = resolve(args, read_gpu=lambda tp: nvml_gpu(tp, launcher.server_gpu_ids(spec, tp), snap),
                read_host=host_available)
    ids = launcher.server_gpu_ids(spec, r.plan.knobs["tp"])
    in_use_before = _in_use(snap, ids)
    for item in render_plan(r):
        con.print(item)
    native, compose_text = launcher.build(r, spec)
    paths = launcher.state_paths(spec.name)
    from vramkit.adapters import docker, host, process
    checks = launcher.preflight(r, spec, gpu_present=gpu_present, docker_check=docker.check_engine,
                                host_ram=lambda: host.host_memory()[1], memlock=host.memlock_limit,
                                port_free=process.port_free, gpu_count=gpu_count or None)
    for c in checks:
        mark = "[green]ok[/green]" if c.ok else ("[red]FAIL[/red]" if c.fatal else "[yellow]warn[/yellow]")
        con.print(f"  {mark:>20} {c.name:9s} {c.detail}")
    if spec.dry_run:
        con.print("[bold]DRY RUN[/bold]: nothing started. It would run:")
        if spec.runtime == "native":
            print(launcher.shell_line(native))
        else:
            print(f"# {paths['compose']}\n{compose_text}")
            print(f"docker compose -f {paths['compose']} up -d")
        failed = [c for c in checks if not c.ok and c.fatal]
        if failed:
            con.print(f"[yellow]would stop at: {', '.join(c.name for c in failed)}[/yellow]")
        return 0
    failed = [c for c in checks if not c.ok and c.fatal and not (args.no_fit_check and c.name == "fit")]
    if failed:
        first = failed[0]
        what, _, todo = first.detail.partition(" -> ")
        raise VramkitError(f"not starting: {first.name}: {what}", todo or "see the checks above", first.code)

    from vramkit.adapters.sglang_http import SglangClient
    pid = None
    compose_path = None
    client = SglangClient(f"http://{spec.host}:{spec.port}", timeout_s=120)
    try:
        if spec.runtime == "native":
            paths["log"].parent.mkdir(parents=True, exist_ok=True)
            paths["log"].write_text("")
            # NVML numbers cards by PCI bus; CUDA, unless told, fastest first: PCI_BUS_ID makes them agree
            pid = process.start_background(native, paths["log"], cpus=launcher.env_cpuset(),
                                           env={"CUDA_VISIBLE_DEVICES": ",".join(map(str, ids)),
                                                "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
                                           if "CUDA_VISIBLE_DEVICES" not in os.environ else None)
            con.print(f"started pid {pid}; log {paths['log']}")
            is_alive = lambda: process.alive(pid)  # noqa: E731
            read_log = lambda: paths["log"].read_text(errors="replace")  # noqa: E731
        else:
            compose_path = paths["compose"]
            compose_path.parent.mkdir(parents=True, exist_ok=True)
            compose_path.write_text(compose_text)
            docker.up(compose_path)
            is_alive = lambda: docker.container_status(spec.name) in ("running", "created", "restarting")  # noqa
            read_log = lambda: docker.logs(spec.name)  # noqa: E731
        with con.status("waiting for SGLang") as status:
            took = launcher.wait_healthy(client, spec, is_alive=is_alive, read_log=read_log,
                                         on_phase=lambda ph: status.update(f"SGLang: {ph}"))
        con.print(f"healthy after {took:.0f} s")
        lat = launcher.warm_up(client, spec, r.model.vocab_size)
        con.print("warm-up: " + ", ".join(f"{x * 1000:.0f} ms" for x in lat))
    except BaseException:
        _teardown(spec, pid, compose_path)
        raise
    finally:
        client.close()
    launcher.record(r, spec, pid, compose_path, in_use_before_start=in_use_before)
    con.print(f"[bold green]serving[/bold green] {r.model.name} at http://{spec.host}:{spec.port} "
              f"(OpenAI API: http://{spec.host}:{spec.port}/v1)")
    return 0


def _teardown(spec, pid, compose_path) -> None:
    from vramkit.adapters import docker, process
    if pid is not None:
        process.stop(pid)
    if compose_path is not None:
        docker.down(compose_path)


def cmd_down(args) -> int:
    from vramkit.adapters import docker, process
    from vramkit.adapters.state import clear_running, read_running
    name = args.name or f"vramkit-{args.preset or 'custom'}"
    entries = read_running(name)
    if not entries:
        print(f"vramkit: {name} is not running (nothing recorded); nothing to stop")
        return 0
    e = entries[0]
    if e.get("pid"):
        process.stop(int(e["pid"]))
    if e.get("compose_file"):
        docker.down(Path(e["compose_file"]))
    clear_running(name)
    print(f"stopped {name}")
    return 0


def cmd_status(args) -> int:
    from vramkit.adapters import process
    from vramkit.adapters.sglang_http import SglangClient
    from vramkit.adapters.state import read_running
    entries = read_running()
    out = []
    for e in entries:
        alive = process.alive(int(e["pid"])) if e.get("pid") else None
        with SglangClient(f"http://{e.get('host', '127.0.0.1')}:{e['port']}") as c:
            health = c.health()
        out.append({**e, "process_alive": alive, "health": health})
    if args.json:
        print(json.dumps(out, indent=2))
    elif not out:
        print("nothing started by vramkit is recorded as running")
    else:
        for e in out:
            print(f"{e['name']}: {e['runtime']} {e['model']} preset={e['preset']} port={e['port']} "
                  f"health={e['health']} pid={e.get('pid')}")
    return 0 if out else int(Exit.NOT_RUNNING)


# ----------------------------------------------------------------------------------------------
# committed compose files
# ----------------------------------------------------------------------------------------------
def compose_files() -> dict[Path, str]:
    """docker-compose.qwen[-preset].yml for each preset, rendered for the reference 16 GB card."""
    from vramkit.core.planner import Knobs, Target, plan
    from vramkit.units import GiB
    engine = catalog.engine()
    gpu = catalog.gpu(COMPOSE_GPU)
    out = {}
    for preset in catalog.presets().values():
        model = catalog.model(preset.model)
        p = plan(model, Target(gpu=gpu, host_ram_available_bytes=64 * GiB), Knobs(**preset.knobs), engine,
                 with_alternatives=False)
        argv = sglang_args(model, p, model_path=model.hf_id, host="0.0.0.0", port=SGLANG_PORT)
        fname = "docker-compose.qwen.yml" if preset.name == "baseline" else f"docker-compose.qwen-{preset.name}.yml"
        text = compose_yaml(project=f"vramkit-{preset.name}", preset=preset.name, model=model, gpu_name=gpu.label,
                            p=p, image=catalog.versions().sglang_image, argv=argv, gpu_ids=[0],
                            source_note=f"GENERATED by `make compose` from config/presets.toml [{preset.name}] for "
                                        f"{gpu.label}: do not edit (`make start-qwen-*` re-renders for your card).")
        out[REPO_ROOT / fname] = text
    return out


def cmd_compose(args) -> int:
    stale = []
    for path, text in compose_files().items():
        current = path.read_text() if path.exists() else None
        if current != text:
            stale.append(path.name)
            if not args.check:
                path.write_text(text)
    if args.check:
        if stale:
            raise VramkitError(f"compose files out of date: {', '.join(stale)}", "run `make compose` and commit",
                               Exit.BAD_FILE)
        print("compose files are up to date")
    else:
        print("wrote " + (", ".join(stale) if stale else "nothing (all up to date)"))
    return 0


def register(sub) -> None:
    up = sub.add_parser("up", help="plan, check, start SGLang, wait for health, warm up",
                        description="Start SGLang for a preset. Exit codes: 10 no fit, 11 no GPU, 12 no Docker, "
                                    "13 port busy, 14 host memory, 15 start failed, 16 health timeout.")
    add_plan_arguments(up)
    up.add_argument("--name", help="service name (default vramkit-<preset>)")
    up.add_argument("--runtime", choices=["docker", "native"], default=os.environ.get("RUNTIME", "docker"))
    up.add_argument("--port", type=int, default=int(os.environ.get("PORT", SGLANG_PORT)))
    up.add_argument("--model-path", default=os.environ.get("MODEL_PATH") or None,
                    help="local folder or HF id instead of the model's hf_id")
    up.add_argument("--load-format", default=os.environ.get("LOAD_FORMAT") or None,
                    help="'dummy': real shapes, random weights, no download, no tokenizer")
    up.add_argument("--extra-args", help="more SGLang flags (default $SGLANG_EXTRA_ARGS)")
    up.add_argument("--sglang-python", default=os.environ.get("SGLANG_PYTHON", sys.executable))
    up.add_argument("--timeout", type=float, default=float(os.environ.get("TIMEOUT", 1200)))
    up.add_argument("--gpus", default=os.environ.get("GPUS"), help="GPU indices, e.g. 0,1")
    up.add_argument("--dry-run", action="store_true", default=os.environ.get("DRY_RUN") == "1")
    up.add_argument("--assume-gpu", action="store_true", help=argparse.SUPPRESS)
    up.add_argument("--no-fit-check", action="store_true",
                    help="start even when the planner says it does not fit (calibration runs measure exactly that)")
    up.set_defaults(func=cmd_up)

    down = sub.add_parser("down", help="stop a server vramkit started")
    down.add_argument("--preset")
    down.add_argument("--name")
    down.set_defaults(func=cmd_down)

    st = sub.add_parser("status", help="what vramkit started and whether it answers")
    st.add_argument("--json", action="store_true")
    st.set_defaults(func=cmd_status)

    co = sub.add_parser("compose", help="write the committed docker-compose.qwen*.yml files from config/")
    co.add_argument("--check", action="store_true", help="exit 65 if a committed file is stale")
    co.set_defaults(func=cmd_compose)
