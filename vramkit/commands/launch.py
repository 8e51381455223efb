"""`vramkit up | down | status | compose`: parsing and printing; the sequence is vramkit/launch/."""
from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from typing import Any

from vramkit import catalog
from vramkit.commands.plan import add_plan_arguments, render_plan, request_from_args
from vramkit.core import progress
from vramkit.core.plan.autofit import STEP_ORDER, gpu_reasons
from vramkit.errors import Exit, VramkitError, exit_code_lines
from vramkit.generated import stale_blocks
from vramkit.launch import reference, steps, up
from vramkit.launch.compose_files import stale_files
from vramkit.launch.env import env_flag, env_value, number
from vramkit.launch.settings import SETTINGS, setting


def _console():
    from rich.console import Console
    return Console(stderr=False)


def setting_value(args: argparse.Namespace, name: str) -> Any:
    """One launch setting (launch/settings.py): its flag, else VRAMKIT_<ENV>, else its default; checked."""
    s = setting(name)
    raw = getattr(args, s.name, None)
    if s.type is bool:
        return bool(raw) or env_flag(s.env)
    where = s.cli_flag
    if raw is None:
        raw, where = env_value(s.env), s.env_name
    if raw is None:
        return s.default
    if s.choices and raw not in s.choices:
        raise VramkitError(f"{where} {raw!r} is not one of {', '.join(s.choices)}", f"set {s.hint(s.choices[0])}",
                           Exit.BAD_INPUT)
    if s.type in (int, float):
        return number(raw, s.type, where, minimum=1, maximum=s.maximum, todo=f"set {s.hint()}")
    return raw


def launch_spec(args: argparse.Namespace) -> steps.LaunchSpec:
    """Flags first, then the VRAMKIT_* environment (launch/env.py), then the defaults (launch/settings.py)."""
    from vramkit.adapters.native_python import native_python
    try:
        extra = shlex.split(setting_value(args, "extra_args") or "")
    except ValueError as e:
        raise VramkitError(f"extra SGLang arguments: {e}", "check the quoting of --extra-args / "
                           "VRAMKIT_SGLANG_EXTRA_ARGS", Exit.BAD_INPUT) from None
    python, python_from = native_python(getattr(args, "sglang_python", None), env_value(setting("sglang_python").env))
    port = setting_value(args, "port")
    return steps.LaunchSpec(
        name=getattr(args, "name", None) or default_name(args),
        runtime=setting_value(args, "runtime"),
        port=catalog.sglang().port if port is None else port,
        model_path=setting_value(args, "model_path"), load_format=setting_value(args, "load_format"),
        extra_args=extra, sglang_python=python, sglang_python_from=python_from,
        timeout_s=setting_value(args, "timeout_s"), dry_run=setting_value(args, "dry_run"),
        gpu_ids=_gpu_ids(setting_value(args, "gpu_ids")))


def default_name(args: argparse.Namespace) -> str:
    """vramkit-<preset>: the preset asked for, or the one a request without --preset and --model plans
    (launch/reference.py, as commands/plan.py's request_from_args); vramkit-custom for a model alone."""
    preset = args.preset or (reference.PRESET if not getattr(args, "model", None) else None)
    return f"vramkit-{preset or 'custom'}"


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
    spec = launch_spec(args)
    prep = up.prepare(request_from_args(args), spec, assume_gpu=args.assume_gpu,
                      auto_fit=not (args.no_auto_fit or args.no_fit_check))
    if prep.autofit is not None:
        print_autofit(con, prep)
    for item in render_plan(prep.resolved):
        con.print(item)
    if prep.autofit is not None:
        con.print("[bold yellow]auto-fit[/bold yellow]: starting the stepped-down plan above (--no-auto-fit refuses "
                  "instead)")
    print_checks(prep, con)
    if spec.dry_run:
        con.print("[bold]DRY RUN[/bold]: nothing started. It would run:")
        if spec.runtime == "native":
            hy = prep.resolved.hybrid
            adapter = hy.adapter_env() if hy is not None else {}      # the kt-kernel adapter's settings
            print("".join(f"{k}={v} " for k, v in adapter.items()) + steps.shell_line(prep.native))
        else:
            print(f"# {prep.paths['compose']}\n{prep.compose_text}")
            print(f"docker compose -f {prep.paths['compose']} up -d")
        failed = prep.failed()
        if failed:
            con.print(f"[yellow]would stop at: {', '.join(c.name for c in failed)}[/yellow]")
        return 0
    up.refuse_failed(prep, no_fit_check=args.no_fit_check)
    t0 = time.monotonic()
    with con.status("waiting for SGLang") as status:
        up.start(prep, say=con.print,
                 on_phase=lambda ph: con.print(f"  SGLang: {ph} (at {progress.duration(time.monotonic() - t0)})"),
                 on_progress=status.update)
    con.print(f"[bold green]serving[/bold green] {prep.resolved.model.name} at http://{spec.host}:{spec.port} "
              f"(OpenAI API: http://{spec.host}:{spec.port}/v1)")
    return 0


def print_checks(prep: up.Prepared, con=None) -> None:
    con = con or _console()
    for c in prep.checks:
        mark = "[green]ok[/green]" if c.ok else ("[red]FAIL[/red]" if c.fatal else "[yellow]warn[/yellow]")
        con.print(f"  {mark:>20} {c.name:9s} {c.detail}")


def print_autofit(con, prep: up.Prepared) -> None:
    """What auto-fit changed and why: the asked plan's reasons at the memory free now, then each step's cost."""
    from rich.markup import escape
    fit, r = prep.autofit, prep.resolved
    assert fit is not None
    held = r.plan.held_besides_server_bytes / 2**30
    con.print(f"[bold yellow]auto-fit[/bold yellow]: {r.preset or 'the asked plan'} does not fit the "
              f"{fit.asked.free_at_start_bytes / 2**30:.2f} GiB free at start ({r.free_source}; "
              f"{held:.2f} GiB of the card held besides the server):")
    for reason in gpu_reasons(fit.asked):
        con.print(f"  x {escape(str(reason))}")
    con.print("stepped down (order: " + ", ".join(STEP_ORDER) + "):")
    for line in fit.lines():
        con.print(f"  - {escape(line)}")


def cmd_down(args) -> int:
    name = args.name or default_name(args)
    if not up.down(name, say=lambda line: print(line, file=sys.stderr)):
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
    return 0        # nothing running is an answer, not a failure (one line above)


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
                        description="Start SGLang for a preset, planned for the memory free at start; when it "
                                    "no longer fits, step down (auto-fit) and say what changed.",
                        epilog="exit codes:\n  " + "\n  ".join(exit_code_lines()),
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    add_plan_arguments(up)
    up.add_argument("--name", help="service name (default vramkit-<preset>)")
    g = up.add_argument_group("launch settings (declared in vramkit/launch/settings.py)")
    for s in SETTINGS:
        make = f", make {s.make_var}=" if s.make_var else ""
        default = f", else {s.default}" if s.default not in (None, False) else ""
        where = f"(or ${s.env_name}{make})" if s.type is bool else f"(default ${s.env_name}{make}{default})"
        if s.type is bool:
            g.add_argument(s.cli_flag, dest=s.name, action="store_true", help=f"{s.help} {where}")
        else:
            g.add_argument(s.cli_flag, dest=s.name, choices=s.choices or None, help=f"{s.help} {where}")
    up.add_argument("--assume-gpu", action="store_true", help=argparse.SUPPRESS)
    up.add_argument("--no-fit-check", action="store_true",
                    help="start even when the planner says it does not fit (calibration runs measure exactly that; "
                         "no auto-fit)")
    up.add_argument("--no-auto-fit", action="store_true",
                    help="refuse (exit 10) when the plan does not fit the memory free at start, instead of stepping "
                         "down KV dtype, context, GPU experts, memory fraction (core/plan/autofit.py) to what fits")
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
