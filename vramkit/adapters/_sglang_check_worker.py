"""Runs INSIDE .venv-sglang (never imported by vramkit itself): checks launch argument lists with SGLang's own code.

Protocol: JSON on stdin `{"cases": [{"case_id", "argv", "model_config_dir", "gpu_mem_mib"?}, ...]}`,
JSON on stdout `{"sglang_version", "import_s", "results": [...]}`. With `--serve` the worker stays up after
its one import: each line on stdin is such a request and each answer one line on stdout, until stdin closes
(vramkit/adapters/sglang_check.py `Checker`: one worker for a whole test run). Everything SGLang prints or logs goes
to stderr: file descriptor 1 is pointed at stderr for the whole run and the answer is written to a saved
copy of the real stdout at the end, so no library print can corrupt the JSON.

Per case, in the order `python -m sglang.launch_server` itself goes (`prepare_server_args`):
1. `argparse` + `ServerArgs.add_cli_args` parse the argv exactly as given (unknown or malformed flags fail here);
2. `ServerArgs.from_cli_args` with `device="cpu"`, the model path replaced by the local folder that holds the
   model's config.json (no download; the original value is reported back);
3. `ModelConfig.from_server_args` reads that config.json the way the server does (context length, YaRN, quant).

`gpu_mem_mib` (optional): SGLang sizes its defaults (chunked_prefill_size, decode CUDA-graph max_bs,
mem_fraction_static) from `get_device_memory_capacity()`, which on device "cpu" is the HOST RAM of the
checking machine. Given a value, that one hardware probe answers the target GPU's total memory (MiB, as
nvidia-smi reports it) instead, so those defaults follow the target's tier. Without it they follow host RAM.

A second kind of request rides the same import (issue 21): `"parses": [{"parse_id", "kind": "tool" | "reasoning",
"parser", "text", "tools"?, "chunk_chars"?}]` runs a model's output text through the pinned SGLang's own parser
classes, as its OpenAI chat endpoint does (entrypoints/openai/serving_chat.py): `FunctionCallParser(tools,
tool_call_parser)` for "tool" and `ReasoningParser(model_type=reasoning_parser)` for "reasoning", once whole
(`parse_non_stream`) and once streamed (`parse_stream_chunk`, the `stream: true` path: each special token whole,
the text between in `chunk_chars`-character pieces). Answer: `"parses": [{"parse_id", "ok", "error", "normal_text",
"calls": [{"name", "arguments"}], "reasoning_text", "stream": {same fields, assembled from the pieces}}]`.

A third (issue 19): `"gguf_files": ["/path/model.gguf", ...]` asks the transformers pinned beside SGLang for each
GGUF's config, as SGLang 0.5.15.post1 does for a GGUF checkpoint (`AutoConfig.from_pretrained(folder,
gguf_file=name)`). Answer: `"gguf": {"transformers_version", "architectures": [GGUF_CONFIG_MAPPING's keys],
"configs": [{"model_type", "hidden_size", ..., "rope_theta", "tie_word_embeddings"} (None where transformers
has no value) or {"error"}]}`.

A fourth: `"dummy_weights": {"names": [...], "shape": [rows, cols], "adapter": "/path/vramkit_kt_compat.py"}` fills
one float parameter per name (all of that shape) with the pinned SGLang's `--load-format dummy` initializer
(model_loader/loader.py's initialize_dummy_weights), once as pinned and once after the kit's adapter patched the
loader (`patch_dummy_loader`, VRAMKIT_DUMMY_SEED_BY_NAME). Answer: `"dummy": {"pinned": [...], "by_name": [...],
"by_name_again": [...], "low", "high"}`, each list one fingerprint per name (the sum of its values and its first
value) and low / high the extreme values the patched fill drew.

A fifth: `"gpu_prefill": {"adapter": "/path/vramkit_gpu_prefill.py"}` adds one dummy layer to the kit's GPU prompt
path (GpuPrefill.add_layer, through SGLang's own GPTQ marlin repack) and sends one forward through it (GpuPrefill.run)
into SGLang's marlin MoE entry, on CPU tensors: only the kernels are stood in for (the repack's per-expert kernel, the
workspace's device query, the custom-op registration of fused_marlin_moe (its Python body runs), and
moe_align_block_size, the first GPU work after fused_marlin_moe's shape checks, which
stops the forward there). Answer: `"gpu_prefill": {"outcome", "quant_info", "weight_bits", "global_num_experts",
"g_idx_shape", "staged_is_passed", "shapes", "planned_bytes", "bytes", "runner_config", "wants"}`. With `"format":
"fp8"` the same for a block-FP8 layer (no repack) into SGLang's triton MoE entry, whose fused_experts_impl checks
run and whose _prepare_fused_moe_run (the kernel configs and moe_align_block_size) stops the forward; the answer
names the quant info, use_fp8_w8a8, block_shape, the op reached (inplace or outplace), the dtypes and sizes.

Only stdlib and SGLang (with its dependencies) are imported here (the fourth and fifth requests: the kit's adapter
too).
"""
from __future__ import annotations

import argparse
import copy
import json
import logging
import os
import re
import sys
import time
import warnings

_ANSI = re.compile(r"\x1b\[[0-9;]*m")

# ServerArgs fields worth comparing with the planner (read after __post_init__ resolved them on cpu).
_SERVER_ARG_FIELDS = (
    "model_path", "tokenizer_path", "device", "load_format", "dtype", "quantization", "kv_cache_dtype",
    "context_length", "mem_fraction_static", "max_running_requests", "max_total_tokens",
    "chunked_prefill_size", "max_prefill_tokens", "page_size", "schedule_policy", "disable_radix_cache",
    "attention_backend", "prefill_attention_backend", "decode_attention_backend", "sampling_backend",
    "grammar_backend", "tp_size", "dp_size", "pp_size", "cpu_offload_gb", "enable_hierarchical_cache",
    "hicache_ratio", "hicache_size", "hicache_write_policy", "hicache_io_backend", "hicache_mem_layout",
    "enable_torch_compile", "torch_compile_max_bs", "skip_tokenizer_init", "json_model_override_args",
    "host", "port", "served_model_name", "tool_call_parser", "reasoning_parser", "chat_template",
    "init_expert_location", "ep_dispatch_algorithm",
)


class _ParserRefused(Exception):
    """argparse's error(), raised instead of printing usage and exiting."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise _ParserRefused(message)


class _Capture(logging.Handler):
    """Collects WARNING+ log records of the case being checked (SGLang's deprecation notes are warnings)."""

    def __init__(self):
        super().__init__(level=logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record):
        try:
            self.messages.append(_ANSI.sub("", record.getMessage()).strip())
        except Exception:  # a bad log call must not fail the check
            pass


def _plain(value):
    """JSON-safe copy: enums by value, dtypes and other objects by str."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if hasattr(value, "value") and isinstance(value.value, (str, int)):
        return value.value
    return str(value)


def _error_line(exc: BaseException) -> str:
    """SGLang's own words, first line: argparse's message as is, anything else as `Type: message`."""
    text = _ANSI.sub("", str(exc)).strip() or type(exc).__name__
    first = text.splitlines()[0].strip()
    if first.startswith("Warning: "):  # ModelConfig prefixes its context-length refusal with "Warning: "
        first = first[len("Warning: "):]
    if isinstance(exc, _ParserRefused):
        return first
    return f"{type(exc).__name__}: {first}"


_PARSERS: dict[type, _Parser] = {}


def _parser(ServerArgs) -> _Parser:
    """`ServerArgs.add_cli_args` on a fresh parser, once per worker: it builds the same parser every time
    (~0.1 s, its type hints evaluated field by field) and parse_args leaves a parser as it found it."""
    if ServerArgs not in _PARSERS:
        parser = _Parser(prog="sglang serve")
        ServerArgs.add_cli_args(parser)
        _PARSERS[ServerArgs] = parser
    return _PARSERS[ServerArgs]


def _check_one(case, ServerArgs, ModelConfig, server_args_module, capture):
    case_id = case["case_id"]
    argv = [str(a) for a in case["argv"]]
    out = {"case_id": case_id, "ok": False, "stage": "parse", "error": "", "warnings": [],
           "deprecations": [], "model_path_given": None, "device_given": None, "resolved": {}}
    capture.messages = []
    env_before = dict(os.environ)
    probe = server_args_module.get_device_memory_capacity
    try:
        # a deep copy of what was parsed: no default object is shared between cases
        ns = argparse.Namespace(**copy.deepcopy(vars(_parser(ServerArgs).parse_args(argv))))
        if case.get("model_config_dir") is None:  # parser-only check
            out["ok"] = True
            out["stage"] = "done"
            return out

        out["stage"] = "server_args"
        out["model_path_given"] = ns.model_path
        out["device_given"] = ns.device
        config_dir = case["model_config_dir"]
        if ns.tokenizer_path in (None, ns.model_path):
            ns.tokenizer_path = config_dir
        ns.model_path = config_dir
        ns.device = "cpu"
        gpu_mem_mib = case.get("gpu_mem_mib")
        if gpu_mem_mib is not None:
            server_args_module.get_device_memory_capacity = lambda device=None: float(gpu_mem_mib)
        sa = ServerArgs.from_cli_args(ns)
        server_args_module.get_device_memory_capacity = probe

        out["stage"] = "model_config"
        mc = ModelConfig.from_server_args(sa)

        resolved = {name: _plain(getattr(sa, name, None)) for name in _SERVER_ARG_FIELDS}
        cg = getattr(sa, "cuda_graph_config", None)
        for phase in ("decode", "prefill"):
            pc = getattr(cg, phase, None)
            for key in ("backend", "max_bs"):
                resolved[f"cuda_graph_{phase}_{key}"] = _plain(getattr(pc, key, None))
        resolved["gpu_mem_mib_used_for_defaults"] = gpu_mem_mib
        hf = mc.hf_text_config
        resolved.update({
            "context_len": mc.context_len,
            "model_dtype": _plain(mc.dtype),
            "model_quantization": _plain(getattr(mc, "quantization", None)),
            "num_hidden_layers": getattr(mc, "num_hidden_layers", None),
            "num_attention_heads": getattr(mc, "num_attention_heads", None),
            "num_key_value_heads_per_rank": mc.get_num_kv_heads(sa.tp_size),
            "head_dim": getattr(mc, "head_dim", None),
            "hidden_size": getattr(mc, "hidden_size", None),
            "max_position_embeddings": getattr(hf, "max_position_embeddings", None),
            "rope_scaling": _plain(getattr(hf, "rope_scaling", None)),
            # what the KV pool configurator reads (model_executor/pool_configurator.py)
            "attention_arch": _plain(getattr(mc, "attention_arch", None)),
            "kv_lora_rank": getattr(mc, "kv_lora_rank", None),
            "qk_rope_head_dim": getattr(mc, "qk_rope_head_dim", None),
            "v_head_dim": getattr(mc, "v_head_dim", None),
            "is_hybrid_swa": bool(getattr(mc, "is_hybrid_swa", False)),
            "swa_layers": len(getattr(mc, "swa_attention_layer_ids", None) or []),
            "full_layers": len(getattr(mc, "full_attention_layer_ids", None) or []),
            "disable_hybrid_swa_memory": bool(getattr(sa, "disable_hybrid_swa_memory", False)),
            "swa_full_tokens_ratio": getattr(sa, "swa_full_tokens_ratio", None),
        })
        out["resolved"] = resolved
        out["ok"] = True
        out["stage"] = "done"
    except BaseException as exc:  # SystemExit, AssertionError, ValueError...: every refusal is a result
        if isinstance(exc, KeyboardInterrupt):
            raise
        out["error"] = _error_line(exc)
    finally:
        server_args_module.get_device_memory_capacity = probe
        os.environ.clear()
        os.environ.update(env_before)
        out["warnings"] = list(capture.messages)
        out["deprecations"] = [m for m in capture.messages if "deprecated" in m.lower()]
    return out


def _calls(items) -> list[dict]:
    """SGLang's ToolCallItems -> [{"name", "arguments"}]; streamed pieces of one call (same tool_index) joined."""
    out: dict[int, dict] = {}
    for item in items:
        call = out.setdefault(item.tool_index, {"name": None, "arguments": ""})
        if item.name:
            call["name"] = item.name
        call["arguments"] += item.parameters or ""
    return [out[i] for i in sorted(out)]


# A special token (<|call|>, </think>, <tool_call>, [TOOL_CALLS]) is one token, so one streamed delta: it never
# arrives split, and SGLang's streaming detectors rely on that (they buffer only a prefix of one).
_SPECIAL = re.compile(r"(<\|[a-z_]+\|>|</?[a-z_]+>|\[[A-Z_]+\])")


def _pieces(text: str, step: int) -> list[str]:
    """`text` as a server streams it: each special token whole, the text between in `step`-character pieces."""
    out = []
    for part in _SPECIAL.split(text):
        if _SPECIAL.fullmatch(part):
            out.append(part)
        else:
            out += [part[i:i + step] for i in range(0, len(part), step)]
    return [p for p in out if p]


def _parse_one(req, FunctionCallParser, ReasoningParser, Tool):
    """One model output through SGLang's own parser for `req["parser"]`, whole and streamed."""
    out = {"parse_id": req["parse_id"], "ok": False, "error": "", "normal_text": "", "calls": [],
           "reasoning_text": "", "stream": {}}
    text, step = req["text"], max(1, int(req.get("chunk_chars") or 7))
    try:
        if req["kind"] == "tool":
            tools = [Tool(**t) for t in req.get("tools") or []]
            normal, calls = FunctionCallParser(tools, req["parser"]).parse_non_stream(text)
            out.update(normal_text=normal, calls=_calls(calls))
            streamer = FunctionCallParser(tools, req["parser"])
            s_normal, s_calls = "", []
            for piece in _pieces(text, step):
                n, c = streamer.parse_stream_chunk(piece)
                s_normal += n or ""
                s_calls += c
            out["stream"] = {"normal_text": s_normal, "calls": _calls(s_calls)}
        elif req["kind"] == "reasoning":
            reasoning, normal = ReasoningParser(model_type=req["parser"], stream_reasoning=False).parse_non_stream(text)
            out.update(reasoning_text=reasoning or "", normal_text=normal or "")
            streamer = ReasoningParser(model_type=req["parser"], stream_reasoning=True)
            s_reasoning, s_normal = "", ""
            for piece in _pieces(text, step):
                r, n = streamer.parse_stream_chunk(piece)
                s_reasoning += r or ""
                s_normal += n or ""
            out["stream"] = {"reasoning_text": s_reasoning, "normal_text": s_normal}
        else:
            raise ValueError(f"unknown parse kind {req['kind']!r}")
        out["ok"] = True
    except BaseException as exc:  # an unknown parser name is SGLang's ValueError: a result, not a crash
        if isinstance(exc, KeyboardInterrupt):
            raise
        out["error"] = _error_line(exc)
    return out


_GGUF_FIELDS = ("model_type", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                "num_key_value_heads", "vocab_size", "max_position_embeddings", "tie_word_embeddings")


def _gguf(files: list[str]) -> dict:
    import transformers
    from transformers import AutoConfig
    from transformers.integrations.ggml import GGUF_CONFIG_MAPPING

    configs = []
    for f in files:
        folder, name = os.path.split(f)
        try:
            c = AutoConfig.from_pretrained(folder, gguf_file=name)
        except Exception as e:  # noqa: BLE001 - the reason goes back to the caller
            configs.append({"error": _error_line(e)})
            continue
        theta = (getattr(c, "rope_parameters", None) or {}).get("rope_theta")   # None: transformers gave none
        configs.append({k: getattr(c, k, None) for k in _GGUF_FIELDS}
                       | {"rope_theta": float(theta) if theta is not None else None})
    return {"transformers_version": transformers.__version__, "architectures": sorted(GGUF_CONFIG_MAPPING),
            "configs": configs}


def _dummy(req: dict) -> dict:
    import importlib.util

    import torch
    from sglang.srt.model_loader import loader

    spec = importlib.util.spec_from_file_location("vramkit_kt_compat", req["adapter"])
    compat = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(compat)

    def fill() -> tuple[list, float, float]:
        model = torch.nn.Module()    # one parameter under each name, as SGLang's state dict names it
        for name in req["names"]:
            parent = model
            *path, leaf = name.split(".")
            for part in path:
                if not hasattr(parent, part):
                    parent.add_module(part, torch.nn.Module())
                parent = getattr(parent, part)
            parent.register_parameter(leaf, torch.nn.Parameter(torch.empty(*req["shape"]), requires_grad=False))
        loader.initialize_dummy_weights(model)
        ps = [model.get_parameter(name) for name in req["names"]]
        return ([[round(float(p.double().sum()), 9), float(p.flatten()[0])] for p in ps],
                min(float(p.min()) for p in ps), max(float(p.max()) for p in ps))

    orig = loader.initialize_dummy_weights
    try:
        pinned, _, _ = fill()
        compat.patch_dummy_loader(loader)
        by_name, low, high = fill()
        again, _, _ = fill()
    finally:
        loader.initialize_dummy_weights = orig
        loader.__dict__.pop("_vramkit_dummy_patched", None)
    return {"pinned": pinned, "by_name": by_name, "by_name_again": again, "low": low, "high": high}


class _PastShapeChecks(Exception):
    """Raised where SGLang's fused_marlin_moe has checked its tensors' shapes and would start the GPU's work."""


def _undecorated(module):
    """A fresh copy of one of SGLang's modules with its register_custom_op decorators left out: the Python functions
    it registers as torch ops (for CUDA and meta tensors only), callable on CPU tensors."""
    import importlib.util

    import sglang.srt.utils.custom_op as custom_op
    orig = custom_op.register_custom_op
    custom_op.register_custom_op = lambda fn=None, **kw: fn if fn is not None else (lambda f: f)
    try:
        spec = importlib.util.spec_from_file_location(f"_vramkit_{module.__name__.rsplit('.', 1)[1]}", module.__file__)
        copy = importlib.util.module_from_spec(spec)
        copy.__package__ = module.__package__      # its relative imports resolve in SGLang's package
        spec.loader.exec_module(copy)
    finally:
        custom_op.register_custom_op = orig
    return copy


def _adapter(path: str):
    """The kit's vramkit_gpu_prefill.py, loaded from its file (it is not on this interpreter's path)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location("vramkit_gpu_prefill", path)
    gp = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gp)
    return gp


PREFILL_SHAPE = (256, 128, 4)     # the small layer both formats are checked on: hidden, expert intermediate, experts


def _add_and_forward(engine, hidden: int, experts: int) -> str:
    """Layer 3 added to the GPU prompt path, then one 16-token forward through it: how far SGLang's MoE entry got."""
    import torch
    from sglang.srt.layers.moe.moe_runner.base import MoeRunnerConfig
    from sglang.srt.layers.moe.token_dispatcher.standard import StandardDispatchOutput
    from sglang.srt.layers.moe.topk import StandardTopKOutput
    engine.add_layer(3, list(range(experts)))
    weights, ids = torch.rand(16, experts).topk(2)
    topk = StandardTopKOutput(weights, ids.int(), torch.zeros(16, experts))
    try:
        engine.run(3, StandardDispatchOutput(hidden_states=torch.zeros(16, hidden, dtype=torch.float16),
                                             hidden_states_scale=None, topk_output=topk), MoeRunnerConfig())
        return "returned"
    except _PastShapeChecks:
        return "past_shape_checks"
    except AssertionError as exc:
        return f"AssertionError: {exc}"


# the moe preset's checkpoint's quantization_config (block FP8, dynamic activation scales)
FP8_QUANT = {"quant_method": "fp8", "weight_block_size": [128, 128], "activation_scheme": "dynamic", "fmt": "e4m3"}


def _engine(gp, quantization: dict, env: dict | None = None, dtype: str = "bfloat16"):
    """The adapter's GpuPrefill for PREFILL_SHAPE's layer with `quantization` and a model `dtype`, built under `env`
    (its settings: VRAMKIT_KT_PREFILL_*), as for a dummy load."""
    from unittest import mock
    h, i, e = PREFILL_SHAPE
    with mock.patch.dict(os.environ, env or {}):
        return gp.GpuPrefill(8, {"hidden_size": h, "moe_intermediate_size": i, "num_experts": e,
                                 "quantization_config": quantization, "torch_dtype": dtype}, "", dummy=True)


def _prefill_through(gp, quantization: dict, stand_ins: list, entry_module, entry_name: str,
                     env: dict | None = None) -> tuple:
    """The adapter `gp`'s GpuPrefill on PREFILL_SHAPE's layer with `quantization`, one layer added and one forward
    sent (_add_and_forward) on CPU tensors. For the call: `stand_ins` ((object, attribute, value)) beside the two
    every format needs (the staging set's device and the pinning, on the CPU here), and the MoE entry
    `entry_module.entry_name` wrapped to record what it is handed; all put back after; `env`: the adapter's settings
    while the engine is built. Returns the engine, what the entry was handed (seen: d, q, r) and how far the forward
    got."""
    import contextlib
    from unittest import mock

    import torch
    h, _, e = PREFILL_SHAPE
    engine = _engine(gp, quantization, env)
    seen: dict = {}
    orig_entry, orig_empty_like = getattr(entry_module, entry_name), torch.empty_like

    def entry(d, q, r):
        seen.update(d=d, q=q, r=r)
        return orig_entry(d, q, r)
    with contextlib.ExitStack() as stack:
        for obj, name, value in [*stand_ins, (entry_module, entry_name, entry),
                                 (torch, "empty_like", lambda t, *a, device=None, **kw: orig_empty_like(t, *a, **kw)),
                                 (engine, "_pin", lambda t: t), (engine, "device", "cpu")]:
            stack.enter_context(mock.patch.object(obj, name, value))
        outcome = _add_and_forward(engine, h, e)
    return engine, seen, outcome


def _prefill_answer(engine, seen: dict, outcome: str, planned: dict) -> dict:
    """What both formats answer: how far the forward got, the payload's class, the layer's shapes and bytes beside
    the adapter's `planned` ones, and which forwards the path takes."""
    q = seen["q"]
    return {"outcome": outcome, "quant_info": f"{type(q).__module__}.{type(q).__name__}",
            "shapes": {n: list(t.shape) for n, t in engine.host[3].items()}, "planned_bytes": planned,
            "bytes": {n: t.numel() * t.element_size() for n, t in engine.host[3].items()},
            "wants": [engine.wants(3, 16), engine.wants(3, 7), engine.wants(4, 16)]}


def _gpu_prefill(req: dict) -> dict:
    import functools

    import sglang.srt.hardware_backend.gpu.quantization.gptq_kernels as kernels
    import sglang.srt.layers.moe.fused_moe_triton as fused
    import sglang.srt.layers.moe.fused_moe_triton.fused_marlin_moe as fmm
    import sglang.srt.layers.moe.moe_runner.marlin as marlin
    import sglang.srt.layers.quantization.marlin_utils as marlin_utils
    import torch

    def align(*args, **kwargs):
        raise _PastShapeChecks()

    gp = _adapter(req["adapter"])
    # the CPU stands in for the GPU: only the kernels are replaced (the repack's per-expert one by a scalar, so the
    # layer's shapes are SGLang's own allocation), the adapter's dummy layer goes through its own add_layer
    stand_ins = [(kernels, "gptq_marlin_repack", lambda b, perm, size_k, size_n, bits: torch.zeros((), dtype=b.dtype)),
                 (gp, "to_marlin", functools.partial(gp.to_marlin, device="cpu")),
                 (marlin_utils, "marlin_make_workspace",
                  lambda device, max_blocks_per_sm=1: torch.zeros(1, dtype=torch.int)),
                 (fused, "moe_align_block_size", align),
                 (fmm, "fused_marlin_moe", _undecorated(fmm).fused_marlin_moe)]  # its Python body, not the CUDA op
    group = 32
    engine, seen, outcome = _prefill_through(
        gp, {"quant_method": "gptq", "bits": 4, "group_size": group, "sym": True, "desc_act": False}, stand_ins,
        marlin, "fused_experts_none_to_marlin")
    q = seen["q"]
    return _prefill_answer(engine, seen, outcome, gp.layer_bytes(*PREFILL_SHAPE, group)) | {
        "weight_bits": q.weight_bits, "global_num_experts": q.global_num_experts,
        "g_idx_shape": list(q.w13_g_idx.shape), "staged_is_passed": q.w13_qweight is engine.stage["w13_qweight"],
        "runner_config": type(seen["r"]).__name__}


def _gpu_prefill_fp8(req: dict, as_int8: bool = False) -> dict:
    """The block-FP8 half of the fifth request: a dummy FP8 layer (no repack on CUDA; `as_int8`: requantized to int8
    as VRAMKIT_KT_PREFILL_FP8=int8 does) and one forward into SGLang's triton MoE entry; fused_experts_impl's checks
    run (its custom-op registration left out), the first GPU work after them (_prepare_fused_moe_run: the kernel
    configs and moe_align_block_size) stops the forward. For int8, the layer beside what SGLang's own moe_wna16
    allocates for 8-bit experts of that shape (MoeWNA16Method.create_weights)."""
    import sglang.srt.layers.moe.moe_runner.triton as triton_runner
    import sglang.srt.layers.moe.moe_runner.triton_utils.fused_moe as fm
    import torch

    gp = _adapter(req["adapter"])
    body = _undecorated(fm)
    ops: dict = {}

    def prepare(*args, **kwargs):
        raise _PastShapeChecks()

    def which(name):
        def op(*args, **kwargs):
            ops["op"] = name
            return getattr(body, name)(*args, **kwargs)
        return op
    stand_ins = [(body, "_prepare_fused_moe_run", prepare),
                 (fm, "inplace_fused_experts", which("inplace_fused_experts")),
                 (fm, "outplace_fused_experts", which("outplace_fused_experts"))]
    block = tuple(FP8_QUANT["weight_block_size"])
    engine, seen, outcome = _prefill_through(gp, FP8_QUANT, stand_ins, triton_runner, "fused_experts_none_to_triton",
                                             {gp.FP8_AS_ENV: "int8" if as_int8 else "w8a8"})
    q = seen["q"]
    planned = gp.int8_layer_bytes(*PREFILL_SHAPE) if as_int8 else gp.fp8_layer_bytes(*PREFILL_SHAPE, block)
    first = "w13_qweight" if as_int8 else "w13_weight"
    out = _prefill_answer(engine, seen, outcome, planned) | {
        "use_fp8_w8a8": q.use_fp8_w8a8, "use_int8_w8a16": q.use_int8_w8a16, "block_shape": q.block_shape,
        "op": ops.get("op"), "inplace": seen["r"].inplace,
        "staged_is_passed": q.w13_weight is engine.stage[first] and q.w2_scale is engine.stage[
            "w2_scales" if as_int8 else "w2_weight_scale_inv"],
        "dtypes": {n: str(t.dtype) for n, t in engine.host[3].items()}}
    if as_int8:
        from sglang.srt.layers.quantization.moe_wna16 import MoeWNA16Config, MoeWNA16Method
        layer = torch.nn.Module()
        h, i, e = PREFILL_SHAPE
        MoeWNA16Method(MoeWNA16Config("gptq", 8, 128, False, False, None, {})).create_weights(
            layer, e, h, i, torch.bfloat16, weight_loader=lambda *a, **k: None)
        out["sglang_8bit"] = {n: [list(getattr(layer, n).shape), str(getattr(layer, n).dtype)]
                              for n in ("w13_qweight", "w2_qweight", "w13_scales", "w2_scales")}
    return out


def align_reference(topk_ids, block_size: int, num_experts: int):
    """moe_align_block_size's contract (sgl_kernel's CUDA op) in Python: the routed (token, slot) indices grouped by
    expert, each expert's run padded to `block_size` with the index one past the last, the expert of each block, and
    the padded total."""
    import torch
    flat = topk_ids.flatten()
    order, experts = [], []
    for e in range(num_experts):
        idx = (flat == e).nonzero().flatten().tolist()
        if idx:
            idx += [flat.numel()] * (-len(idx) % block_size)
            order += idx
            experts += [e] * (len(idx) // block_size)
    return (torch.tensor(order, dtype=torch.int32), torch.tensor(experts, dtype=torch.int32),
            torch.tensor([len(order)], dtype=torch.int32))


def triton_moe_on_cpu():
    """A context in which SGLang's triton MoE runs on CPU tensors, in Triton's interpreter (TRITON_INTERPRET=1 set
    before triton is imported): its Python bodies instead of the torch ops it registers for CUDA tensors,
    moe_align_block_size by its contract (align_reference), and a device name for the kernel-config lookup. Shared
    with benchmarks/gpu/gpu_prefill_bench.py --interpret."""
    import contextlib
    from unittest import mock

    import sglang.srt.layers.moe.moe_runner.triton_utils.fused_moe as fm
    import sglang.srt.layers.moe.moe_runner.triton_utils.fused_moe_triton_config as cfg
    body = _undecorated(fm)
    stack = contextlib.ExitStack()
    for obj, name, value in ((body, "moe_align_block_size", align_reference),
                             (fm, "outplace_fused_experts", body.outplace_fused_experts),
                             (cfg, "get_device_name", lambda *a: "cpu_interpreter")):
        stack.enter_context(mock.patch.object(obj, name, value))
    return stack


def _interpreter_fp8_cast() -> dict:
    """Triton's interpreter's float32 -> e4m3 cast beside torch's, on values that round up to the next power of two
    (7.95, 31.4, 125.6): where the mantissa's rounding carries into the exponent. The reason the interpreted w8a8
    figure is set aside (its activations go through that cast)."""
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def cast(x_ptr, y_ptr, n: tl.constexpr):
        offs = tl.arange(0, n)
        tl.store(y_ptr + offs, tl.load(x_ptr + offs).to(tl.float8e4nv))
    x = torch.tensor([7.95, -31.4, 125.6, 3.0, 0.3, 100.0, -1.5, 200.0])
    y = torch.empty(8, dtype=torch.float8_e4m3fn)
    cast[(1,)](x, y, 8)
    return {"values": x.tolist(), "interpreter": y.float().tolist(),
            "torch": x.to(torch.float8_e4m3fn).float().tolist()}


def _gpu_prefill_numbers(req: dict) -> dict:
    """The sixth request: the block-FP8 prompt path's numbers through SGLang's own triton MoE kernels, run on the CPU
    by Triton's interpreter (the checker starts with TRITON_INTERPRET=1). One random layer (PREFILL_SHAPE, FP8 blocks
    of 128 quantized from N(0, 0.02) weights), 16 float16 tokens routed to 2 experts each, through GpuPrefill.run as
    w8a8 (FP8 weights and activations) and as int8 (the values requantized, float16 inputs), each against float32 on
    the FP8 values. Stand-ins: moe_align_block_size by its contract (align_reference) and the kernel-config lookup's
    device name (triton_moe_on_cpu); bfloat16 is left out (the interpreter computes it wrong: float16 is what it is
    checked with)."""

    import torch
    from sglang.srt.layers.moe.moe_runner.base import MoeRunnerConfig
    from sglang.srt.layers.moe.token_dispatcher.standard import StandardDispatchOutput
    from sglang.srt.layers.moe.topk import StandardTopKOutput
    from sglang.srt.runtime_context import get_context
    from sglang.srt.server_args import ServerArgs

    gp = _adapter(req["adapter"])
    get_context().set_server_args(ServerArgs.__new__(ServerArgs))    # the triton MoE reads it (its defaults)
    h, i, e = PREFILL_SHAPE
    gen = torch.Generator().manual_seed(7)

    def fp8(w):
        b = w.view(w.shape[0], w.shape[1] // 128, 128, w.shape[2] // 128, 128)
        scale = b.abs().amax(dim=(-3, -1)) / 448.0
        return (b / scale[:, :, None, :, None]).to(torch.float8_e4m3fn).view(w.shape), scale
    layer = {}
    for name, shape in (("w13", (e, 2 * i, h)), ("w2", (e, h, i))):
        layer[f"{name}_weight"], layer[f"{name}_weight_scale_inv"] = fp8(torch.randn(shape, generator=gen) * 0.02)
    values = {n: gp.fp8_values(layer[f"{n}_weight"], layer[f"{n}_weight_scale_inv"], (128, 128))
              for n in ("w13", "w2")}
    x = (torch.randn(16, h, generator=gen) * 0.5).half()
    weights, ids = torch.softmax(torch.randn(16, e, generator=gen), -1).topk(2)
    ref = torch.zeros(16, h)
    for t in range(16):
        for j in range(2):
            up = values["w13"][int(ids[t, j])] @ x[t].float()
            act = torch.nn.functional.silu(up[:i]) * up[i:]
            ref[t] += float(weights[t, j]) * (values["w2"][int(ids[t, j])] @ act)
    out: dict = {"interpreter": os.environ.get("TRITON_INTERPRET") == "1", "fp8_cast": _interpreter_fp8_cast()}
    for arith in ("w8a8", "int8"):
        engine = _engine(gp, FP8_QUANT, {gp.FP8_AS_ENV: arith}, "float16")
        engine.host[3] = gp.int8_from_fp8(layer, (128, 128), torch.float16) if arith == "int8" else dict(layer)
        engine.stage = {n: torch.empty_like(t) for n, t in engine.host[3].items()}
        topk = StandardTopKOutput(weights, ids.int(), torch.zeros(16, e))
        with triton_moe_on_cpu():
            got = engine.run(3, StandardDispatchOutput(hidden_states=x.clone(), hidden_states_scale=None,
                                                       topk_output=topk), MoeRunnerConfig()).hidden_states
        out[arith] = {"rel_l2": float((got.float() - ref).norm() / ref.norm()), "dtype": str(got.dtype)}
    return out


def main() -> int:
    serve = "--serve" in sys.argv[1:]
    request = {} if serve else json.loads(sys.stdin.read() or "{}")
    real_stdout = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # from here on, anything printed lands on stderr
    sys.stdout = sys.stderr

    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    # SGLang only WARNS about a context length above the model's when it believes it runs in its own CI
    # (SGLANG_IS_IN_CI) or is told to allow it: the check must see what a user's server does.
    for name in ("SGLANG_IS_IN_CI", "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"):
        os.environ.pop(name, None)

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="[sglang-check] %(message)s")
    warnings.simplefilter("ignore")  # import-time UserWarnings about CUDA-only kernels: noise on a CPU
    capture = _Capture()
    logging.getLogger().addHandler(capture)

    t0 = time.monotonic()
    import sglang
    import sglang.srt.server_args as server_args_module
    from sglang.srt.configs.model_config import ModelConfig

    # The target is a CUDA GPU: SGLang registers "mxfp4" (gpt-oss) there at import time
    # (layers/quantization/__init__.py: `if is_cpu() or is_cuda() ...`), which this CPU-only checker is not.
    # The same dict object is what ModelConfig validates against, so add it as the CUDA import would.
    from sglang.srt.layers import quantization as _quant
    from sglang.srt.layers.quantization.mxfp4 import Mxfp4Config
    from sglang.srt.server_args import ServerArgs
    _quant.QUANTIZATION_METHODS.setdefault("mxfp4", Mxfp4Config)

    import_s = time.monotonic() - t0

    def answer(request) -> None:
        # prepare_server_args() would reconfigure logging per case; keep ours (stderr + capture).
        results = []
        for case in request.get("cases", []):
            t = time.monotonic()
            result = _check_one(case, ServerArgs, ModelConfig, server_args_module, capture)
            result["check_s"] = round(time.monotonic() - t, 3)
            results.append(result)

        parses = []
        if request.get("parses"):
            from sglang.srt.entrypoints.openai.protocol import Tool
            from sglang.srt.function_call.function_call_parser import FunctionCallParser
            from sglang.srt.parser.reasoning_parser import ReasoningParser
            parses = [_parse_one(req, FunctionCallParser, ReasoningParser, Tool) for req in request["parses"]]

        gguf = _gguf(request["gguf_files"]) if request.get("gguf_files") else None
        dummy = _dummy(request["dummy_weights"]) if request.get("dummy_weights") else None
        prefill = None
        if request.get("gpu_prefill_numbers"):
            prefill = _gpu_prefill_numbers(request["gpu_prefill_numbers"])
        elif request.get("gpu_prefill"):
            req = request["gpu_prefill"]
            prefill = _gpu_prefill_fp8(req, req.get("format") == "fp8-int8") \
                if req.get("format") in ("fp8", "fp8-int8") else _gpu_prefill(req)
        json.dump({"sglang_version": getattr(sglang, "__version__", "?"), "import_s": round(import_s, 2),
                   "results": results, "parses": parses} | ({"gguf": gguf} if gguf else {})
                  | ({"dummy": dummy} if dummy else {}) | ({"gpu_prefill": prefill} if prefill else {}), real_stdout)
        real_stdout.write("\n")
        real_stdout.flush()

    if not serve:
        answer(request)
        return 0
    real_stdout.write(json.dumps({"ready": True, "import_s": round(import_s, 2)}) + "\n")
    real_stdout.flush()
    for line in sys.stdin:
        if line.strip():
            answer(json.loads(line))
    return 0


if __name__ == "__main__":
    sys.exit(main())
