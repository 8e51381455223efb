"""`vramkit install-service`: systemd units for the native SGLang runtime and the embedding service.

Writes vramkit-sglang.service and vramkit-embed.service into --dir (default ~/.config/systemd/user):
restart on failure, LimitMEMLOCK for the pinned host pool, CPUAffinity from the cpusets `make
optimize-write` put in .env, logs to the journal. The SGLang unit runs exactly the command `vramkit up
--runtime native` would run with the same arguments (the same plan, auto-fit, checks and command: launch/up.py
`prepare`), and the install refuses where `vramkit up` would, with its exit code (a busy port excepted: the
unit starts later, and the server it replaces may hold the port now). --dry-run prints the units and the
checks and writes nothing. Then: systemctl --user daemon-reload && systemctl --user enable --now vramkit-sglang
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import replace
from pathlib import Path

from vramkit import catalog
from vramkit.errors import Exit, VramkitError
from vramkit.launch.settings import setting
from vramkit.launch.steps import env_cpuset

TEMPLATES = catalog.CONFIG_DIR.parent / "services" / "systemd"
UNITS = ("vramkit-sglang.service", "vramkit-embed.service")
EMBED_PORT = 8002
SERVICE_SETTINGS = ("port", "model_path", "load_format", "extra_args", "sglang_python", "gpu_ids", "dry_run")
# the checks `vramkit up` runs that do not bind a unit installed now (see the docstring)
NOT_AT_INSTALL = ("port",)


def register(sub) -> None:
    from vramkit.commands.plan import add_plan_arguments

    p = sub.add_parser("install-service", help="write systemd units for native SGLang and the embed service",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_plan_arguments(p)
    p.add_argument("--dir", type=Path, default=Path.home() / ".config" / "systemd" / "user",
                   help="where to write the units (default %(default)s)")
    p.add_argument("--embed-port", type=int, default=EMBED_PORT, help="embed service port (default %(default)s)")
    # the launch settings a unit fixes, as `vramkit up` takes them (declared in vramkit/launch/settings.py)
    for name in SERVICE_SETTINGS:
        s = setting(name)
        if s.type is bool:
            p.add_argument(s.cli_flag, dest=s.name, action="store_true", help=f"{s.help} (or ${s.env_name})")
        else:
            p.add_argument(s.cli_flag, dest=s.name, help=f"{s.help} (default ${s.env_name})")
    p.add_argument("--no-auto-fit", action="store_true", help="as `vramkit up --no-auto-fit`")
    p.add_argument("--assume-gpu", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--json", action="store_true", help="print what was written as JSON")
    p.set_defaults(func=run)


def _abs_python(path: str) -> str:
    p = Path(path).expanduser()
    if not p.is_absolute():
        p = Path.cwd() / p
    if not (p.is_file() and os.access(p, os.X_OK)):
        raise VramkitError(f"{p} is not an executable Python", "pass --sglang-python /abs/path/to/python",
                           Exit.BAD_INPUT)
    return str(p)             # not resolved: a venv's python symlink must stay the venv's


def prepare(args):
    """What `vramkit up --runtime native` would prepare for these arguments (launch/up.py): plan, checks, command."""
    from vramkit.commands.launch import launch_spec
    from vramkit.commands.plan import request_from_args
    from vramkit.launch import up
    from vramkit.launch.systemd_units import _no_control
    for name, value in vars(args).items():     # a line break in any value would start a directive of its own
        if isinstance(value, str):
            try:
                _no_control(f"--{name.replace('_', '-')}", value)
            except ValueError as e:
                raise VramkitError(str(e), "give values without line breaks", Exit.BAD_INPUT) from None
    spec = replace(launch_spec(args), runtime="native")
    return up.prepare(request_from_args(args), spec, assume_gpu=args.assume_gpu, auto_fit=not args.no_auto_fit)


def exec_argv(prep) -> list[str]:
    """The unit's ExecStart: `vramkit up`'s native command, its Python made absolute (systemd needs it)."""
    return [_abs_python(prep.native[0]), *prep.native[1:]]


def render_units(args, prep=None) -> dict[str, str]:
    from vramkit.core.host_plan import ENV_SERVER_CPUSET, ENV_SIDE_CPUSET
    from vramkit.launch import systemd_units as su
    from vramkit.launch.hybrid import KT_COMPAT_DIR, adapter_for
    from vramkit.units import bytes2human

    prep = prep or prepare(args)
    r = prep.resolved
    repo = str(catalog.CONFIG_DIR.parent)
    env = {"CUDA_VISIBLE_DEVICES": ",".join(map(str, prep.gpu_ids)), "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    if (adapter := adapter_for(r.hybrid, r.plan)) is not None:   # as `vramkit up` sets it, without this shell's own
        env |= adapter.native_env() | {"PYTHONPATH": str(KT_COMPAT_DIR)}         # PYTHONPATH
    # one Environment= line of quoted assignments (systemd.exec(5)); % starts a specifier
    environment = " ".join('"' + f"{k}={v}".replace("%", "%%").replace("\\", "\\\\").replace('"', '\\"') + '"'
                           for k, v in env.items())
    plan_line = (f"plan: {r.model.name} on {r.gpu.label if r.gpu else 'the given free memory'}, peak "
                 f"{bytes2human(r.plan.peak_vram_bytes)} per GPU, KV pool {r.plan.kv_pool_tokens:,} tokens "
                 f"(derived: the kit's planner)")
    common = {"repo": repo}
    sglang = su.render(_template("vramkit-sglang.service.in"), common | {
        "plan_line": plan_line, "sglang_version": catalog.versions().sglang_pip, "model": r.model.name,
        "preset": r.preset or "custom", "port": str(prep.spec.port),
        "environment": environment,
        "exec_start": su.exec_line(exec_argv(prep)), "pinned": bytes2human(r.plan.host_ram_bytes) + " planned",
        "cpu_affinity": su.cpu_affinity_line(env_cpuset(ENV_SERVER_CPUSET), ENV_SERVER_CPUSET)})
    me = _abs_python(sys.executable)
    embed_argv = [me, "-m", "vramkit", "embed", "serve", "--host", "127.0.0.1", "--port", str(args.embed_port),
                  "--data-dir", f"{repo}/.embed-data", "--allowed-roots", repo]
    embed = su.render(_template("vramkit-embed.service.in"), common | {
        "embed_port": str(args.embed_port), "exec_start": su.exec_line(embed_argv),
        "env_file": str(Path(args.dir).expanduser().absolute() / "vramkit-embed.env"),
        "cpu_affinity": su.cpu_affinity_line(env_cpuset(ENV_SIDE_CPUSET), ENV_SIDE_CPUSET)})
    return {UNITS[0]: sglang, UNITS[1]: embed}


def _template(name: str) -> str:
    try:
        return (TEMPLATES / name).read_text()
    except OSError as e:
        raise VramkitError(f"unit template {TEMPLATES / name} unreadable ({e.strerror})", "restore it from git",
                           Exit.BAD_FILE) from None


def run(args) -> int:
    from vramkit.commands.launch import print_checks
    from vramkit.launch import up

    prep = prepare(args)
    try:
        units = render_units(args, prep)
    except ValueError as e:          # a control character in a value (systemd_units refuses it)
        raise VramkitError(str(e), "give values without line breaks", Exit.BAD_INPUT) from None
    if prep.spec.dry_run:
        print_checks(prep)
        for name, text in units.items():
            print(f"# {name} (DRY RUN: not written)\n{text}")
        return 0
    up.refuse_failed(prep, skip=NOT_AT_INSTALL)
    out_dir = Path(args.dir).expanduser()
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        for name, text in units.items():
            tmp = out_dir / (name + ".tmp")
            tmp.write_text(text)
            tmp.replace(out_dir / name)
    except OSError as e:
        raise VramkitError(f"cannot write units into {out_dir} ({e.strerror})", "pass a writable --dir",
                           Exit.BAD_FILE) from None
    written = [str(out_dir / n) for n in units]
    if args.json:
        print(json.dumps({"written": written}, indent=2))
    else:
        user = out_dir.resolve() == (Path.home() / ".config" / "systemd" / "user").resolve()
        ctl = "systemctl --user" if user else "systemctl"
        print("wrote " + ", ".join(written))
        print(f"then: {ctl} daemon-reload && {ctl} enable --now vramkit-sglang   (logs: journalctl "
              f"{'--user ' if user else ''}-u vramkit-sglang -f)")
    return 0
