"""`vramkit client CLIENT`: a ready configuration for aider, Continue, Cline or the OpenAI SDK (issue 21).

Where the figures come from, first match wins:
  --url URL          the SGLang server there (its /server_info: served name, max_req_input_len, parser)
  plan arguments     the plan (--preset, --model, --gpu, knobs: as `vramkit plan` takes them)
  --name NAME        the server `vramkit up` recorded under that name
  nothing            the one server `vramkit up` recorded, else the plan of the default model
The API key: $VRAMKIT_API_KEY (or the variable --api-key-env names) when set, the key the server was started
with (`--extra-args '--api-key ...'`); without one SGLang accepts any key and the configurations say "none".
"""
from __future__ import annotations

import argparse
import json
import os

from vramkit import catalog
from vramkit.clients.configs import CLIENTS, ClientTarget, output_budget, render
from vramkit.commands.plan import add_plan_arguments, request_from_args
from vramkit.core.plan.request import flags
from vramkit.errors import Exit, VramkitError

DEFAULT_KEY_ENV = "VRAMKIT_API_KEY"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("client", help="a ready configuration for aider, Continue, Cline or the OpenAI SDK",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("client", choices=CLIENTS, help="which client to configure")
    p.add_argument("--url", help="ask the SGLang server at this address, e.g. http://127.0.0.1:30000")
    p.add_argument("--name", help="the server `vramkit up` recorded under this name (vramkit-<preset>)")
    p.add_argument("--port", type=int, help="the planned server's host port (default $VRAMKIT_PORT, else "
                                            "config/sglang.toml's)")
    p.add_argument("--api-key-env", default=DEFAULT_KEY_ENV, metavar="VAR",
                   help=f"environment variable holding the server's API key (default {DEFAULT_KEY_ENV})")
    p.add_argument("--json", action="store_true", help="the figures as one JSON object instead of the configuration")
    add_plan_arguments(p)
    p.set_defaults(func=run)


def _planned(args: argparse.Namespace, api_key: str | None) -> ClientTarget:
    from vramkit.launch.resolve import host_available, nvml_gpu, resolve
    r = resolve(request_from_args(args), read_gpu=nvml_gpu, read_host=host_available)
    p = r.plan
    if not p.fits:
        raise VramkitError(f"the plan for {r.model.name} does not fit, so no server would take requests",
                           "see `vramkit plan` with the same arguments for what would fit", Exit.NO_FIT)
    port = args.port or int(os.environ.get("VRAMKIT_PORT") or catalog.sglang().port)
    serving = p.serving
    window = p.max_request_tokens
    where = f"preset {r.preset}" if r.preset else r.model.name
    return ClientTarget(
        base_url=f"http://127.0.0.1:{port}/v1", model=serving.served_model_name if serving else r.model.name,
        context_window_tokens=window, output_tokens=output_budget(window), api_key=api_key,
        tool_calls=bool(serving and serving.tool_call_parser),
        source=f"planned: {where} on {r.gpu.label if r.gpu else 'the given free memory'}, longest prompt "
               f"{window:,} tokens (`vramkit plan`)")


def _running(url: str, api_key: str | None, what: str) -> ClientTarget:
    from vramkit.adapters.sglang_http import SglangClient
    with SglangClient(url, timeout_s=30.0, api_key=api_key) as c:
        info = c.server_info()
    window = info.get("max_req_input_len")
    name = info.get("served_model_name")
    if not isinstance(window, int) or window < 2 or not isinstance(name, str):
        raise VramkitError(f"SGLang at {url} did not say its max_req_input_len and served_model_name in "
                           "/server_info", "is it SGLang 0.5.15.post1? (`vramkit status`)", Exit.SERVICE_DOWN)
    return ClientTarget(base_url=url.rstrip("/") + "/v1", model=name, context_window_tokens=window,
                        output_tokens=output_budget(window), api_key=api_key,
                        tool_calls=bool(info.get("tool_call_parser")),
                        source=f"running: {what}, longest prompt {window:,} tokens (its /server_info)")


def _recorded(name: str | None) -> dict | None:
    from vramkit.adapters import state
    records = state.read_running(name)
    if name and not records:
        raise VramkitError(f"no server named {name} is recorded as running", "`vramkit status` lists them; or "
                           "give plan arguments (--preset ...) for the planned server", Exit.NOT_RUNNING)
    if len(records) > 1:
        names = ", ".join(str(r.get("name")) for r in records)
        raise VramkitError(f"several servers run ({names})", "pick one with --name", Exit.BAD_INPUT)
    return records[0] if records else None


def target_for(args: argparse.Namespace) -> ClientTarget:
    api_key = os.environ.get(args.api_key_env) or None
    if args.url:
        return _running(args.url, api_key, args.url)
    planned = any(getattr(args, f, None) is not None for f in flags())
    if not planned:
        record = _recorded(args.name)
        if record is not None:
            url = f"http://127.0.0.1:{record.get('port')}"
            return _running(url, api_key, f"{record.get('name')} at {url}")
    return _planned(args, api_key)


def run(args: argparse.Namespace) -> int:
    t = target_for(args)
    print(json.dumps(t.to_json(), indent=2) if args.json else render(args.client, t))
    return 0
