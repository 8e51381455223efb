"""The hybrid MoE mode (issue 12): a plan whose experts beyond the GPU's share run on the CPU through
SGLang's KTransformers path (core/plan/kt_hybrid.py), resolved against this host: the model's config.json,
the CPU's instructions and cores (`make optimize`'s cpuset), the host's measured read bandwidth.

`apply()` runs after the dense plan. With kt_method set (preset `moe`, or --kt-method) it replaces the
dense plan's GPU figures with the hybrid ones; for a MoE model that does not fit it adds the hybrid mode
as an alternative beside layer offload, both speeds shown.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from pathlib import Path

from vramkit import catalog
from vramkit.core.memory.costs import KV_DTYPE_BYTES
from vramkit.core.plan import kt_hybrid as mo
from vramkit.core.plan.knobs import SGLANG_FLAGS
from vramkit.core.plan.planner import Alternative, HybridSection
from vramkit.core.plan.request import PlanRequest
from vramkit.errors import Exit, VramkitError
from vramkit.launch import reference

ENV_HOST_READ = "VRAMKIT_HOST_READ_GBS"      # `vramkit host --bandwidth` measures it; `make optimize-write` keeps it
DEFAULT_HOST_READ_GBS = reference.HOST_READ_GBS   # assumed when not measured (and the plan says so)
KT_SERVICE_DIR = catalog.CONFIG_DIR.parent / "services" / "sglang-kt"
KT_COMPAT_DIR = KT_SERVICE_DIR / "kt_compat"
KT_CONTAINER_DIR = "/kt-weights"


@dataclass
class Hybrid:
    plan: mo.HybridPlan
    weight_path: str | None        # --kt-weight-path (None: the model folder)
    isa_variant: str | None        # kt-kernel's variant for this CPU and method, None = it cannot run here
    isa_detail: str
    host_read_gbs: float
    host_read_source: str

    def args(self, model_path: str) -> list[str]:
        """--kt-weight-path (the other --kt-* flags render from the resolved knobs, core/plan/knobs.py): the given
        folder, else the model's own for FP8/BF16 (kt-kernel reads the checkpoint), else a placeholder that
        `vramkit up` refuses before starting (the kt-weights check)."""
        default = model_path if mo.KT_METHODS[self.plan.kt_method]["checkpoint"] else "$VRAMKIT_KT_WEIGHT_PATH"
        return [SGLANG_FLAGS["kt_weight_path"], self.weight_path or default]

    def checks(self, host_ram_available: int) -> list[tuple[str, bool, str]]:
        """(name, ok, detail) for `vramkit up`: the CPU can run the method, the experts fit host RAM, KT's
        converted layout is given where the method needs one."""
        hp = self.plan
        out = [("cpu-isa", self.isa_variant is not None, self.isa_detail),
               ("kt-host-ram", host_ram_available >= hp.host_ram_bytes + mo.SGLANG_HOST_BASE,
                f"{hp.host_ram_bytes / 2**30:.1f} GiB of CPU experts ({hp.kt_method}) + "
                f"{mo.SGLANG_HOST_BASE / 2**30:.1f} GiB for SGLang, {host_ram_available / 2**30:.1f} GiB available")]
        if mo.KT_METHODS[hp.kt_method]["checkpoint"] is None:
            ok = self.weight_path is not None and Path(self.weight_path).is_dir()
            out.append(("kt-weights", ok, f"{hp.kt_method} experts in {self.weight_path}" if ok else
                        f"--kt-method {hp.kt_method} reads KT's converted layout: none at {self.weight_path} -> "
                        "convert with tools/make_random_checkpoint.py MODEL_CFG DIR --kt-layout "
                        f"{hp.kt_method} --from MODEL_DIR (make kt-convert), then --kt-weight-path DIR"))
        return out

    def compose_parts(self, build_context: str) -> dict:
        """What the compose file needs beyond the dense service: the KT image (built from its Dockerfile),
        the CPU-expert folder mounted read-only, --kt-weight-path pointing at it inside the container."""
        host = self.weight_path or "${VRAMKIT_KT_WEIGHT_PATH:-./kt-weights}"
        return {"args": [SGLANG_FLAGS["kt_weight_path"], KT_CONTAINER_DIR], "build_context": build_context,
                "image": catalog.versions().sglang_kt_image,
                "extra_volumes": (f"{host}:{KT_CONTAINER_DIR}:ro  # the CPU experts ({self.plan.kt_method} layout), "
                                  "read into host RAM by kt-kernel at start",)}

    def native_env(self) -> dict[str, str]:
        """The kt-kernel adapter on the server's path (its sitecustomize installs the import hook)."""
        old = os.environ.get("PYTHONPATH", "")
        return {"PYTHONPATH": str(KT_COMPAT_DIR) + (os.pathsep + old if old else "")}

    def to_json(self) -> dict:
        return {**self.plan.to_json(), "weight_path": self.weight_path, "cpu_variant": self.isa_variant,
                "cpu_check": self.isa_detail, "host_read_gbs": self.host_read_gbs,
                "host_read_source": self.host_read_source}


def _cpu_flags() -> set[str]:
    from vramkit.adapters.host import cpu_flags
    return cpu_flags()


def _server_physical_cores() -> int:
    from vramkit.adapters.host import read_topology
    from vramkit.launch.steps import env_cpuset
    topo = read_topology()
    cpus = env_cpuset() or topo.allowed
    return max(1, len(topo.cores(cpus)))


def host_read_gbs(request: PlanRequest) -> tuple[float, str]:
    if request.host_read_gbs is not None:      # checked by core/plan/request.py
        return request.host_read_gbs, "--host-read-gbs"
    from vramkit.core.host_plan import read_env_value
    text = os.environ.get(ENV_HOST_READ)
    env_file = catalog.CONFIG_DIR.parent / ".env"
    if text is None and env_file.is_file():
        text = read_env_value(env_file.read_text(), ENV_HOST_READ)
    if text:
        return float(text), f"{ENV_HOST_READ} (measured by `vramkit host --bandwidth`)"
    return DEFAULT_HOST_READ_GBS, "assumed (dual-channel DDR5); measure with `vramkit host --bandwidth`"


def _checkpoint_format(cfg: dict) -> str:
    q = (cfg.get("quantization_config") or {}).get("quant_method")
    if q is None:
        return "bf16"
    if q == "fp8":
        return "fp8"
    raise VramkitError(f"hybrid MoE mode: checkpoint quantization {q!r} is not one kt-kernel 0.5.1 reads here",
                       "use the bf16 or block-FP8 checkpoint, or an AMXINT4/8 conversion with --kt-weight-path",
                       Exit.BAD_INPUT)


def _hybrid_plan(r, cfg: dict, method: str, request: PlanRequest,
                 server_cores: int | None = None) -> tuple[mo.HybridPlan, float, str]:
    fmt = _checkpoint_format(cfg)
    need = mo.KT_METHODS[method]["checkpoint"]
    if need is not None and need != fmt:
        raise VramkitError(f"--kt-method {method} reads a {need} checkpoint; {r.model.name} is {fmt}",
                           f"pick the {need} model, or --kt-method " + ("FP8" if fmt == "fp8" else "BF16"),
                           Exit.BAD_INPUT)
    k = r.plan.knobs
    s = mo.sizes(cfg, fmt, method, KV_DTYPE_BYTES.get(k.kv_dtype, r.model.dtype_bytes))
    bw, src = host_read_gbs(request)
    if r.gpu is None:
        raise VramkitError("the hybrid MoE plan needs the card's bandwidth and PCIe link",
                           "name a catalogued --gpu, or give --gpu-bandwidth-gbs and --gpu-pcie", Exit.BAD_INPUT)
    n_gpu = getattr(r.knobs, "kt_num_gpu_experts", "auto")
    hp = mo.plan_hybrid(
        s, kt_method=method, free_at_start_bytes=r.plan.free_at_start_bytes, mem_fraction=k.mem_fraction,
        context=r.knobs.context, concurrency=r.knobs.concurrency, gpu_bandwidth_bytes_s=r.gpu.bandwidth_bytes_s,
        pcie_bytes_s=r.gpu.pcie_bytes_s, host_read_bytes_s=bw * 1e9,
        host_ram_available_bytes=r.target.host_ram_available_bytes,
        server_physical_cores=server_cores or _server_physical_cores(),
        chunked_prefill=k.chunked_prefill if k.chunked_prefill and k.chunked_prefill > 0 else 8192,
        hidden_size=int(cfg["hidden_size"]), num_gpu_experts=None if n_gpu == "auto" else int(n_gpu))
    threads = getattr(r.knobs, "kt_cpuinfer", "auto")
    if threads != "auto":
        hp = replace(hp, cpuinfer_threads=int(threads))
    return hp, bw, src


def apply(r, request: PlanRequest, *, server_cores: int | None = None, cpu_flags: set[str] | None = None):
    """The hybrid plan on top of the dense one (see the module docstring). `server_cores`/`cpu_flags`
    stand for this host's (committed compose files are rendered for a reference desktop)."""
    method = getattr(r.knobs, "kt_method", None)
    try:
        cfg = json.loads((Path(r.model.config_dir) / "config.json").read_text())
    except (OSError, ValueError):
        return r
    if not cfg.get("num_experts"):
        if method:
            raise VramkitError(f"--kt-method {method}: {r.model.name} has no experts", "drop the kt_* knobs",
                               Exit.BAD_INPUT)
        return r
    if not method:
        if not r.plan.fits:      # a MoE that does not fit: offer the hybrid mode beside layer offload
            try:
                hp, _, src = _hybrid_plan(r, cfg, "FP8" if _checkpoint_format(cfg) == "fp8" else "BF16", request,
                                          server_cores)
            except VramkitError:
                return r
            alt = Alternative(
                change=f"experts in host RAM (--kt-method {hp.kt_method}, or AMXINT4 after conversion): "
                       f"{hp.num_gpu_experts} experts/layer on the GPU, the rest on {hp.cpuinfer_threads} CPU threads",
                knobs={"kt_method": hp.kt_method, "kt_num_gpu_experts": hp.num_gpu_experts}, fits=hp.fits,
                decode_tok_s_ceiling=round(hp.decode_tok_s, 1),
                cost=f"{hp.host_ram_bytes / 2**30:.1f} GiB host RAM; decode ~{hp.decode_tok_s:.0f} tok/s (derived, "
                     f"host bandwidth {src}) against layer offload ~{hp.offload_decode_tok_s:.1f} tok/s")
            # ranked: first when it fits and decodes faster than every other fitting alternative
            others = [a.decode_tok_s_ceiling or 0 for a in r.plan.alternatives if a.fits]
            first = hp.fits and hp.decode_tok_s > max(others, default=0)
            alts = list(r.plan.alternatives)
            alts.insert(0 if first else len(alts), alt)
            r.plan = replace(r.plan, alternatives=tuple(alts))
        return r
    hp, bw, src = _hybrid_plan(r, cfg, method, request, server_cores)
    variant, detail = mo.isa_check(method, _cpu_flags() if cpu_flags is None else cpu_flags)
    weight_path = request.kt_weight_path or os.environ.get("VRAMKIT_KT_WEIGHT_PATH") or None
    p = r.plan
    s1 = mo.sizes(cfg, _checkpoint_format(cfg), method, 1)
    per_n = int(s1.moe_layers * s1.gpu_expert_bytes * mo.KT_GPU_EXPERT_FACTOR)
    kv_bytes = hp.kv_pool_tokens * p.kv_bytes_per_token
    # the dense plan's other terms (CUDA context, graphs, activations, req_to_token) stay; weights and KV change
    delta = hp.gpu_weights_bytes + kv_bytes - p.weights_bytes - p.kv_pool_bytes
    by_component = {"non-expert": hp.gpu_weights_bytes - hp.num_gpu_experts * per_n,
                    f"experts ({hp.num_gpu_experts}/layer)": hp.num_gpu_experts * per_n}
    notes = [*p.notes, *hp.notes,
             f"hybrid MoE: {hp.num_gpu_experts} experts/layer on the GPU, the rest in host RAM "
             f"({hp.host_ram_bytes / 2**30:.1f} GiB as {method}) on {hp.cpuinfer_threads} threads; decode "
             f"~{hp.decode_tok_s:.0f} tok/s (derived; host read {bw:g} GB/s, {src}) against "
             f"~{hp.offload_decode_tok_s:.1f} tok/s with layer offload ({hp.offload_gib} GiB over PCIe)",
             f"this host's CPU for {method}: " + (f"kt-kernel's {detail}" if variant else detail
                                                  + " (`vramkit up` refuses here, exit 22)")]
    r.plan = replace(
        p, peak_vram_bytes=p.peak_vram_bytes + delta, startup_free_bytes=p.startup_free_bytes - delta,
        headroom_bytes=p.headroom_bytes - delta, weights_bytes=hp.gpu_weights_bytes,
        kv_pool_tokens=hp.kv_pool_tokens, kv_pool_bytes=kv_bytes, weights_by_component=by_component,
        weights_on_gpu_by_component=by_component, weights_load_overhead_bytes=0,
        max_request_tokens=min(p.context_len - 1, hp.kv_pool_tokens - 1) - 5,
        max_concurrent_requests=hp.kv_pool_tokens // max(1, r.knobs.context), fits=hp.fits,
        reasons=tuple(hp.reasons), decode_tok_s_ceiling=round(hp.decode_tok_s, 1),
        knobs=replace(p.knobs, kt_num_gpu_experts=hp.num_gpu_experts, kt_cpuinfer=hp.cpuinfer_threads),
        notes=tuple(notes),
        hybrid=HybridSection(kt_method=method, num_gpu_experts=hp.num_gpu_experts,
                             cpuinfer_threads=hp.cpuinfer_threads, host_ram_bytes=hp.host_ram_bytes,
                             decode_tok_s=hp.decode_tok_s, offload_decode_tok_s=hp.offload_decode_tok_s,
                             host_read_gbs=bw, host_read_source=src))
    r.hybrid = Hybrid(hp, weight_path, variant, detail, bw, src)
    return r
