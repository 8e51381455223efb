"""`vramkit install-service`: systemd units for the native SGLang runtime and the embedding service.

Writes vramkit-sglang.service and vramkit-embed.service into --dir (default ~/.config/systemd/user):
restart on failure, LimitMEMLOCK for the pinned host pool, CPUAffinity from the cpusets `make
optimize-write` put in .env, logs to the journal. The SGLang command is the plan's, resolved now for the
card named (--gpu, default the preset's card; `--gpu auto` reads it), exactly as `vramkit up` renders it.
Then: systemctl --user daemon-reload && systemctl --user enable --now vramkit-sglang
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from pathlib import Path

from vramkit import catalog
from vramkit.errors import Exit, VramkitError
from vramkit.launch.settings import setting
from vramkit.launch.steps import env_cpuset

TEMPLATES = catalog.CONFIG_DIR.parent / "services" / "systemd"
UNITS = ("vramkit-sglang.service", "vramkit-embed.service")
EMBED_PORT = 8002
SERVICE_SETTINGS = ("port", "model_path", "load_format", "extra_args", "sglang_python", "gpu_ids")


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
        p.add_argument(s.cli_flag, dest=s.name, help=f"{s.help} (default ${s.env_name})")
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


def render_units(args) -> dict[str, str]:
    from vramkit.commands.launch import setting_value
    from vramkit.commands.plan import request_from_args
    from vramkit.core.host_plan import ENV_SERVER_CPUSET, ENV_SIDE_CPUSET
    from vramkit.core.render.sglang import sglang_args
    from vramkit.launch import systemd_units as su
    from vramkit.launch.resolve import host_available, nvml_gpu, resolve
    from vramkit.units import bytes2human

    request = request_from_args(args)
    r = resolve(request, read_gpu=nvml_gpu, read_host=host_available)
    if not r.plan.fits:
        raise VramkitError(f"the plan does not fit {r.gpu.label if r.gpu else 'the card'}: {'; '.join(r.plan.reasons)}",
                           "`vramkit plan` lists what would fit; install with those knobs", Exit.NO_FIT)
    repo = str(catalog.CONFIG_DIR.parent)
    python = _abs_python(setting_value(args, "sglang_python") or sys.executable)
    port = setting_value(args, "port") or catalog.sglang().port
    argv = [python, "-m", "sglang.launch_server",
            *sglang_args(r.model, r.plan, model_path=setting_value(args, "model_path") or r.model.hf_id,
                         port=port, load_format=setting_value(args, "load_format"),
                         extra=shlex.split(setting_value(args, "extra_args") or ""))]
    tp = r.plan.knobs.tp
    gpu_ids = setting_value(args, "gpu_ids") or ",".join(str(i) for i in range(tp))
    plan_line = (f"plan: {r.model.name} on {r.gpu.label if r.gpu else 'the given free memory'}, peak "
                 f"{bytes2human(r.plan.peak_vram_bytes)} per GPU, KV pool {r.plan.kv_pool_tokens:,} tokens "
                 f"(derived: the kit's planner)")
    common = {"repo": repo}
    sglang = su.render(_template("vramkit-sglang.service.in"), common | {
        "plan_line": plan_line, "sglang_version": catalog.versions().sglang_pip, "model": r.model.name,
        "preset": r.preset or "custom", "port": str(port), "gpu_ids": gpu_ids,
        "exec_start": su.exec_line(argv), "pinned": bytes2human(r.plan.host_ram_bytes) + " planned",
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
    try:
        units = render_units(args)
    except ValueError as e:          # a control character in a value (systemd_units refuses it)
        raise VramkitError(str(e), "give values without line breaks", Exit.BAD_INPUT) from None
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
