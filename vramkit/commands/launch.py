"""`vramkit up | down | status | compose`: parsing and printing; the sequence is vramkit/launch/."""
from __future__ import annotations

import argparse
import json
import shlex

from vramkit import catalog
from vramkit.commands.plan import add_plan_arguments, render_plan, request_from_args
from vramkit.errors import Exit, VramkitError
from vramkit.generated import stale_blocks
from vramkit.launch import steps, up
from vramkit.launch.compose_files import stale_files
from vramkit.launch.env import env_flag, env_number, env_value, number

RUNTIMES = ("docker", "native")


def _console():
    from rich.console import Console
    return Console(stderr=False)


def _spec(args) -> steps.LaunchSpec:
    """Flags first, then the VRAMKIT_* environment (launch/env.py), then the defaults."""
    from vramkit.adapters.native_python import native_python
    runtime = args.runtime or env_value("RUNTIME") or "docker"
    if runtime not in RUNTIMES:
        raise VramkitError(f"runtime {runtime!r} is not one of {', '.join(RUNTIMES)}",
                           "set --runtime or VRAMKIT_RUNTIME to docker or native", Exit.BAD_INPUT)
    try:
        extra = shlex.split(args.extra_args or env_value("SGLANG_EXTRA_ARGS") or "")
    except ValueError as e:
        raise VramkitError(f"extra SGLang arguments: {e}", "check the quoting of --extra-args / "
                           "VRAMKIT_SGLANG_EXTRA_ARGS", Exit.BAD_INPUT) from None
    python, python_from = native_python(args.sglang_python, env_value("SERVER_PYTHON"))
    return steps.LaunchSpec(
        name=args.name or f"vramkit-{args.preset or 'custom'}", runtime=runtime,
        port=number(args.port, int, "--port", minimum=1) if args.port is not None else
        env_number("PORT", int, catalog.sglang().port, minimum=1),
        model_path=args.model_path or env_value("MODEL_PATH"), load_format=args.load_format or env_value("LOAD_FORMAT"),
        extra_args=extra, sglang_python=python, sglang_python_from=python_from,
        timeout_s=number(args.timeout, float, "--timeout", minimum=1) if args.timeout is not None else
        env_number("TIMEOUT", float, 1200.0, minimum=1),
        dry_run=args.dry_run or env_flag("DRY_RUN"), gpu_ids=_gpu_ids(args.gpus or env_value("GPUS")))


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
    prep = up.prepare(request_from_args(args), spec, assume_gpu=args.assume_gpu)
    for item in render_plan(prep.resolved):
        con.print(item)
    for c in prep.checks:
        mark = "[green]ok[/green]" if c.ok else ("[red]FAIL[/red]" if c.fatal else "[yellow]warn[/yellow]")
        con.print(f"  {mark:>20} {c.name:9s} {c.detail}")
    if spec.dry_run:
        con.print("[bold]DRY RUN[/bold]: nothing started. It would run:")
        if spec.runtime == "native":
            print(steps.shell_line(prep.native))
        else:
            print(f"# {prep.paths['compose']}\n{prep.compose_text}")
            print(f"docker compose -f {prep.paths['compose']} up -d")
        failed = prep.failed()
        if failed:
            con.print(f"[yellow]would stop at: {', '.join(c.name for c in failed)}[/yellow]")
        return 0
    up.refuse_failed(prep, no_fit_check=args.no_fit_check)
    with con.status("waiting for SGLang") as status:
        up.start(prep, say=con.print, on_phase=lambda ph: status.update(f"SGLang: {ph}"))
    con.print(f"[bold green]serving[/bold green] {prep.resolved.model.name} at http://{spec.host}:{spec.port} "
              f"(OpenAI API: http://{spec.host}:{spec.port}/v1)")
    return 0


def cmd_down(args) -> int:
    name = args.name or f"vramkit-{args.preset or 'custom'}"
    if not up.down(name):
        print(f"vramkit: {name} is not running (nothing recorded); nothing to stop")
        return 0
    print(f"stopped {name}")
    return 0


def cmd_status(args) -> int:
    out = up.running()
    if args.json:
        print(json.dumps(out, indent=2))
    elif not out:
        print("nothing started by vramkit is recorded as running")
    else:
        for e in out:
            print(f"{e['name']}: {e['runtime']} {e['model']} preset={e['preset']} port={e['port']} "
                  f"health={e['health']} pid={e.get('pid')}")
    return 0 if out else int(Exit.NOT_RUNNING)


def cmd_compose(args) -> int:
    stale = stale_files(write=not args.check) + stale_blocks(write=not args.check)
    if args.check:
        if stale:
            raise VramkitError(f"generated files out of date: {', '.join(stale)}", "run `make compose` and commit",
                               Exit.BAD_FILE)
        print("compose files and generated tables are up to date")
    else:
        print("wrote " + (", ".join(stale) if stale else "nothing (all up to date)"))
    return 0


def register(sub) -> None:
    up = sub.add_parser("up", help="plan, check, start SGLang, wait for health, warm up",
                        description="Start SGLang for a preset. Exit codes: 10 no fit, 11 no GPU, 12 no Docker, "
                                    "13 port busy, 14 host memory, 15 start failed, 16 health timeout, "
                                    "21 unsupported model, 23 RUNTIME=native's Python cannot import SGLang "
                                    "(make setup-gpu), 64 bad input.")
    add_plan_arguments(up)
    up.add_argument("--name", help="service name (default vramkit-<preset>)")
    up.add_argument("--runtime", choices=RUNTIMES, help="docker or native (default $VRAMKIT_RUNTIME, else docker)")
    up.add_argument("--port", help="host port of SGLang's API (default $VRAMKIT_PORT, else config/sglang.toml's)")
    up.add_argument("--model-path", help="local folder or HF id instead of the model's hf_id; it is what gets "
                                         "planned (default $VRAMKIT_MODEL_PATH)")
    up.add_argument("--load-format", help="'dummy': real shapes, random weights, no download, no tokenizer "
                                          "(default $VRAMKIT_LOAD_FORMAT)")
    up.add_argument("--extra-args", help="more SGLang flags (default $VRAMKIT_SGLANG_EXTRA_ARGS)")
    up.add_argument("--sglang-python", help="the Python that runs SGLang, native runtime (default "
                                            "$VRAMKIT_SERVER_PYTHON, else .venv-gpu/bin/python from make setup-gpu); "
                                            "checked to import SGLang before anything starts")
    up.add_argument("--timeout", help="seconds to wait for /health (default $VRAMKIT_TIMEOUT, else 1200)")
    up.add_argument("--gpus", help="GPU indices, e.g. 0,1 (default $VRAMKIT_GPUS)")
    up.add_argument("--dry-run", action="store_true", help="plan and check, start nothing "
                                                           "(or VRAMKIT_DRY_RUN=1/true/yes)")
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

    co = sub.add_parser("compose", help="write the committed docker-compose.qwen*.yml files and the generated "
                                        "tables from config/")
    co.add_argument("--check", action="store_true", help="exit 65 if a committed file is stale")
    co.set_defaults(func=cmd_compose)
