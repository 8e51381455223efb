"""`vramkit up | down | status | compose`: parsing and printing; the sequence is vramkit/launch/."""
from __future__ import annotations

import argparse
import json
import os
import shlex
import sys

from vramkit.commands.plan import add_plan_arguments, render_plan
from vramkit.core.render import SGLANG_PORT
from vramkit.errors import Exit, VramkitError
from vramkit.launch import steps, up
from vramkit.launch.compose_files import stale_files


def _console():
    from rich.console import Console
    return Console(stderr=False)


def _spec(args) -> steps.LaunchSpec:
    extra = shlex.split(args.extra_args or os.environ.get("SGLANG_EXTRA_ARGS", ""))
    return steps.LaunchSpec(
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
    prep = up.prepare(args, spec, assume_gpu=args.assume_gpu)
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
    stale = stale_files(write=not args.check)
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
