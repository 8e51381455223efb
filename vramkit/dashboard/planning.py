"""The dashboard's one door to the planner: the plan explorer's request -> the kit's own plan
resolution (the same `resolve` that `vramkit plan` and `vramkit up` use), and the prediction for a
server that is already running. No memory arithmetic here: that is the planner's
(vramkit/core/plan/planner.py) and the bar's (vramkit/dashboard/view.py).
"""
from __future__ import annotations

import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

from vramkit import catalog
from vramkit.core import sglang_log
from vramkit.core.plan.knobs import VALID_KV_DTYPES, specs
from vramkit.core.plan.request import TARGET_FIELDS, request_from_text
from vramkit.dashboard.view import knobs_from_server_info, memory_segments
from vramkit.errors import Exit, VramkitError
from vramkit.launch import reference
from vramkit.launch.resolve import plan_json, resolve

# The explorer's fields: what to run (the request's fields, core/plan/request.py, as `vramkit plan` names
# them) and every declared knob (core/plan/knobs.py). Values stay text; `request_from_text` checks them.
EXPLORER_TARGET_FIELDS = ("preset", "model", "gpu", "gpu_free_gib", "other_used_gib", "host_ram_gib")


def fields() -> dict[str, str]:
    """field name -> its `vramkit plan` flag."""
    return {n: TARGET_FIELDS[n][0] for n in EXPLORER_TARGET_FIELDS} | {s.name: s.cli_flag for s in specs()}


def catalog_view() -> dict:
    """What the explorer's pickers offer: models, GPUs, presets with their knobs, KV dtypes."""
    return {
        "models": [{"name": n, "note": m.note} for n, m in catalog.models().items()],
        "gpus": [{"name": n, "label": g.label, "memory_total_bytes": g.memory_total_bytes}
                 for n, g in catalog.gpus().items()],
        "presets": [{"name": n, "description": p.description, "model": p.model, "knobs": dict(p.knobs)}
                    for n, p in catalog.presets().items()],
        "kv_dtypes": list(VALID_KV_DTYPES),
        "knobs": [{"name": s.name, "flag": s.cli_flag, "unit": s.unit, "help": s.help, "range": s.range_text(),
                   "choices": list(s.choices), "type": s.type.__name__, "server_arg": s.server_arg}
                  for s in specs()],
        "default_gpu": reference.GPU,
        "fields": list(fields()),
    }


MAX_VALUE_CHARS = 512     # a query value: a folder path at most (issue 20 item 4 bounds every input)


def parse_params(raw: dict[str, str]) -> dict[str, Any]:
    """Query parameters -> the explorer's request; empty ones are left to the preset / SGLang's defaults.
    An unknown field or an overlong value is refused here; a bad value by `resolve`, as on the command line.
    A model folder must hold a readable config.json; why not is never said (missing, not a folder, not
    readable read the same), so the page cannot probe the file system through error text."""
    known = fields()
    out: dict[str, Any] = {}
    for key, text in raw.items():
        if key not in known:
            raise VramkitError(f"unknown plan field {key[:40]!r}", f"use one of: {', '.join(known)}",
                               Exit.BAD_INPUT)
        if isinstance(text, str) and len(text) > MAX_VALUE_CHARS:
            raise VramkitError(f"plan field {key} is {len(text)} characters long",
                               f"give at most {MAX_VALUE_CHARS}", Exit.BAD_INPUT)
        if text not in ("", None):
            out[key] = text
    model = out.get("model")
    if isinstance(model, str) and catalog.looks_like_folder(model) and not _config_readable(model):
        raise VramkitError(f"model folder {model}: no readable config.json there",
                           "give a folder that holds the model's config.json, or a catalogued name",
                           Exit.BAD_INPUT)
    return out


def _config_readable(folder: str) -> bool:
    try:
        path = Path(folder).expanduser()
        path = path if path.name == "config.json" else path / "config.json"
        with open(path, "rb") as fh:
            fh.read(1)
        return True
    except (OSError, ValueError):
        return False


def vramkit_command(params: dict[str, Any]) -> str:
    """`vramkit up ...` with exactly the explorer's choices: the command that starts this plan."""
    flags = fields()
    parts = ["vramkit", "up"]
    for key, value in params.items():
        parts += [flags[key], str(value)]
    return shlex.join(parts)


def plan_view(params: dict[str, Any], read_gpu: Callable | None, read_host: Callable | None,
              card_total_bytes: int | None = None) -> dict:
    """The explorer's answer: the plan (as `vramkit plan --json`), its memory bar, and the commands."""
    r = resolve(request_from_text(params), read_gpu=read_gpu, read_host=read_host)
    d = plan_json(r)
    total = r.gpu.memory_total_bytes if r.gpu else card_total_bytes
    d["gpu_label"] = r.gpu.label if r.gpu else "the given free memory"
    d["memory"] = memory_segments(d, total, r.target.host_ram_available_bytes)
    d["command"] = "python -m sglang.launch_server " + shlex.join(d["sglang_args"])
    d["vramkit_command"] = vramkit_command(params)
    d["request"] = params
    return d


def running_params(record: dict, server_info: dict | None, log_figures: dict | None) -> dict[str, Any]:
    """The explorer fields that re-plan a running server: its model and preset from the kit's state
    record, its knobs from SGLang's own /server_info, the free memory SGLang saw when it began loading
    weights from its log ("Load weight begin. avail mem", measured), and from the same log whether the kit's
    adapter moved the token embeddings to host RAM and decoded the CPU layers on its int4 kernel (kt_embed_host and
    kt_cpu_decode are not SGLang flags: the log says what ran).
    Without that log line the plan is for the card NVML names (`gpu auto` is not used: with the server up,
    NVML's free memory is not the start's)."""
    params: dict[str, Any] = {}
    if record.get("preset"):
        params["preset"] = record["preset"]
    if record.get("model"):
        params["model"] = record["model"]
    elif server_info and server_info.get("model_path"):
        params["model"] = str(server_info["model_path"])     # a folder with config.json, or a catalogued name
    if server_info:
        for k, v in knobs_from_server_info(server_info).items():
            params[k] = v
    figs = log_figures or {}
    if figs.get("load_begin_avail") is not None:
        params["gpu_free_gib"] = figs["load_begin_avail"]
    if figs.get("weights") is not None:      # the load ended: the adapter's line, if any, came before the pool
        params["kt_embed_host"] = "on" if figs.get("embed_moved") is not None else "off"
        # the CPU layers' decode: the int4 kernel where the adapter said it took them (and gave up on none)
        params["kt_cpu_decode"] = "int4" if sglang_log.int4_decoded(figs) else "kt"
    return params
