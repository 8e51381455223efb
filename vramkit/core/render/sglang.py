"""A resolved Plan -> SGLang's argument list and a Docker Compose file. Pure: strings in, strings out.

Only flags SGLang 0.5.15.post1's parser accepts (tests/integration/test_sglang_parser.py runs every
rendered list through it). The knobs SGLang would otherwise probe from the card it runs on
(mem_fraction_static, chunked_prefill_size, the decode graph batch size) are always passed, resolved
for the TARGET card: on a big card emulating a small one, SGLang's own probe would pick wrong values.
"""
from __future__ import annotations

import json
import shlex

from vramkit.core.model.spec import ModelSpec
from vramkit.core.plan.knobs import SGLANG_FLAGS, render_args
from vramkit.core.plan.planner import Plan

HEALTH_START_PERIOD_S = 900           # first GPTQ start JIT-compiles marlin inside graph capture: 378 s on H100


CONTAINER_MODEL_DIR = "/models"       # where a folder model is bind-mounted (read-only) in the container


def model_path_for(model: ModelSpec) -> str:
    """What SGLang's --model-path gets: the Hugging Face id, or (a folder model) the folder itself."""
    return model.hf_id or str(model.config_dir)


def container_model_path(host_folder: str) -> str:
    """Where a host folder holding a model is mounted in the container."""
    return f"{CONTAINER_MODEL_DIR}/{host_folder.rstrip('/').rsplit('/', 1)[-1]}"


def shell_line(argv: list[str]) -> str:
    """One command line a POSIX shell reads back as exactly `argv` (JSON overrides stay one argument)."""
    return shlex.join(argv)


def yarn_override(model: ModelSpec, factor: float) -> str:
    """The YaRN form SGLang accepts: the rope dict WITH rope_theta (transformers 5 needs it) and a raised
    max_position_embeddings. The older form (original_max_position_embeddings + --context-length alone)
    is refused: SGLang derives the context from max_position_embeddings and drops the factor."""
    native = model.max_position_embeddings
    return json.dumps({
        "rope_scaling": {"rope_type": "yarn", "factor": factor, "original_max_position_embeddings": native,
                         "rope_theta": model.rope_theta},
        "max_position_embeddings": int(native * factor),
    }, separators=(",", ":"))


def sglang_args(model: ModelSpec, p: Plan, *, model_path: str, port: int, host: str = "127.0.0.1",
                load_format: str | None = None, extra: list[str] | None = None,
                folder_has_tokenizer: bool = False) -> list[str]:
    """SGLang launch_server arguments (without `python -m sglang.launch_server`): the address, then each
    knob as its declaration renders it (core/plan/knobs.py), the model's serving settings (knobs.Serving), then
    the flags the kit always sets. Dummy weights skip the tokenizer unless the model folder holds one
    (`folder_has_tokenizer`: then /v1/chat/completions works, text is noise)."""
    f = SGLANG_FLAGS
    a = [f["model_path"], model_path, f["host"], host, f["port"], str(port), *render_args(p.knobs, p)]
    if p.serving is not None:     # what clients and agents need: the short name, the tool-call/reasoning parsers
        a += p.serving.args()
    # prefill CUDA graphs stay off: ~85 s less start-up and no capture memory; every calibration run
    # (config/engine.toml) was measured so, and the planner's default fraction assumes it
    a += [f["disable_prefill_graphs"]]
    if p.yarn_factor:
        a += [f["model_override"], yarn_override(model, p.yarn_factor)]
    if load_format:
        a += [f["load_format"], load_format]
        if load_format == "dummy" and not folder_has_tokenizer:
            a += [f["skip_tokenizer_init"]]     # no tokenizer offline: requests send input_ids
    return a + list(extra or [])


# ----------------------------------------------------------------------------------------------
# compose
# ----------------------------------------------------------------------------------------------
def _q(s: str) -> str:
    """YAML double-quoted scalar (JSON string syntax is valid YAML)."""
    return json.dumps(s)


def compose_yaml(*, project: str, preset: str, model: ModelSpec, gpu_name: str, p: Plan, image: str,
                 argv: list[str], gpu_ids: list[int], source_note: str, port: int,
                 model_mount: tuple[str, str] | None = None, build_context: str | None = None,
                 build_args: dict[str, str] | None = None, extra_volumes: tuple[str, ...] = (),
                 extra_env: tuple[str, ...] = ()) -> str:
    """One compose file for one preset: the SGLang service with every odd setting explained.
    `model_mount` (host folder, container path): a folder model, bind-mounted read-only; argv's
    --model-path names the container path. `build_context`: the image is built from that folder (the
    hybrid MoE image, services/sglang-kt), with `build_args` (its KT_KERNEL where the CPU needs another
    release than the Dockerfile's); `extra_volumes`: "host:container:mode  # why" lines (KT's CPU-expert folder);
    `extra_env`: "NAME: value  # why" lines (the kit's kt-kernel adapter's settings)."""
    mount = ""
    if model_mount:
        mount = (f"\n      - {_q(f'{model_mount[0]}:{model_mount[1]}:ro')}"
                 f"  # the model folder, read-only: SGLang only reads it")
    cmd = "\n".join(f"      - {_q(x)}" for x in ["python3", "-m", "sglang.launch_server", *argv])
    ids = ", ".join(_q(str(i)) for i in gpu_ids)
    pinned = p.host_ram_bytes > 0
    why = "  # the pinned SGLang image + kt-kernel + the kit's adapter (its Dockerfile)\n"
    build = ""
    if build_context and build_args:
        build = (f"    build:{why}      context: {build_context}\n      args:\n"
                 + "".join(f"        {k}: {_q(v)}  # this CPU's kt-kernel release (config/versions.toml)\n"
                           for k, v in build_args.items()))
    elif build_context:
        build = f"    build: {build_context}{why}"
    more = "".join(f"      - {v}\n" for v in extra_volumes)
    env_more = "".join(f"      {e}\n" for e in extra_env)
    return f"""\
# {source_note}
# Plan: {model.name} on {gpu_name}: weights {p.weights_bytes / 2**30:.2f} GiB, KV pool {p.kv_pool_tokens:,} tokens,
# longest prompt {p.max_request_tokens:,} tokens, predicted peak {p.peak_vram_bytes / 2**30:.2f} GiB per GPU.
name: {project}
services:
  sglang:
    image: {image}
{build}    container_name: {project}
    command:
{cmd}
    ports:
      - "127.0.0.1:${{VRAMKIT_PORT:-{port}}}:{port}"  # loopback only: SGLang's API has no auth by default
    environment:
      HF_TOKEN: ${{HF_TOKEN:-}}  # from your shell, never written here; gated models (Llama) need it
      HF_HOME: /root/.cache/huggingface
      TVM_FFI_CACHE_DIR: /root/.cache/tvm-ffi  # SGLang's JIT kernels (GPTQ marlin: minutes to build) survive restarts
{env_more}    volumes:
      - ${{VRAMKIT_HF_CACHE:-~/.cache/huggingface}}:/root/.cache/huggingface  # model weights, downloaded once
      - vramkit-jit-cache:/root/.cache/tvm-ffi{mount}
{more}    ipc: host  # SGLang's tokenizer, scheduler and detokenizer processes share tensors through /dev/shm
    ulimits:
      memlock: -1  # {"the host KV pool / offloaded weights are pinned (page-locked) RAM" if pinned else "pinned host buffers (KV copies) must not hit the memlock limit"}
      stack: 67108864
    cpuset: ${{VRAMKIT_SGLANG_CPUSET:-}}  # `make optimize` writes the cores nearest the GPU into .env; empty = all
    deploy:
      resources:
        reservations:
          devices:
            - driver: nvidia
              device_ids: [{ids}]  # tensor parallel size {p.knobs.tp}: one card per rank
              capabilities: [gpu]
    healthcheck:
      # /health answers 503 while SGLang loads, compiles and captures graphs, 200 once it serves
      test: ["CMD", "python3", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:{port}/health', timeout=4)"]
      interval: 10s
      timeout: 6s
      retries: 3
      start_period: {HEALTH_START_PERIOD_S}s  # first GPTQ start compiles kernels inside graph capture (378 s measured)
    restart: on-failure:3  # an out-of-memory start fails the same way each time: stop after 3, don't crash-loop
volumes:
  vramkit-jit-cache:
"""
