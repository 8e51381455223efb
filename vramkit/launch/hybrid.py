"""The hybrid MoE mode's outside side (issue 12): the CPU the plan runs on, and what a launch adds.

The plan itself is core's (core/plan/planner.py plans the KTransformers split like any plan; core/plan/kt_hybrid.py
holds KT's facts): this module only reads this host (its CPU's instructions through /proc/cpuinfo, its
server cpuset's physical cores, the read bandwidth `vramkit host --bandwidth` measured per thread count),
or takes the host the user plans for (--cpu-isa, --host-read-gbs), and turns a planned hybrid section into
--kt-weight-path, the pre-start checks, the compose parts and the adapter's environment.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from vramkit import catalog
from vramkit.core.plan import knobs as knob_decl
from vramkit.core.plan import kt_hybrid as kt
from vramkit.core.plan.knobs import SGLANG_FLAGS
from vramkit.launch import reference

ENV_HOST_READ = "VRAMKIT_HOST_READ_GBS"     # `vramkit host --bandwidth --write`: "THREADS:GBS,..." (or one GBS)
KT_SERVICE_DIR = catalog.CONFIG_DIR.parent / "services" / "sglang-kt"
KT_COMPAT_DIR = KT_SERVICE_DIR / "kt_compat"
KT_CONTAINER_DIR = "/kt-weights"
KT_PLACEMENT_INSIDE = "/kt-placement.json"
PLACEMENT_DISPATCH_ENV = "VRAMKIT_KT_PLACEMENT_DISPATCH"   # "0": kt_compat's placement dispatch off (its docstring)
LAYERS_ENV = knob_decl.by_name()["kt_gpu_layers"].env        # whole layers on the GPU (kt_compat's docstring)
PREFILL_ENV = knob_decl.by_name()["kt_gpu_prefill"].env      # the CPU layers' prompt on the GPU (vramkit_gpu_prefill)
PIN_ENV = knob_decl.by_name()["kt_prefill_pin"].env          # how that path page-locks its host copies
FP8_ENV = knob_decl.by_name()["kt_prefill_fp8"].env          # how it computes block-FP8 experts
EMBED_ENV = knob_decl.by_name()["kt_embed_host"].env         # the token embeddings in pinned host RAM
INT4_ENV = knob_decl.by_name()["kt_cpu_decode"].env          # the CPU layers' decode on the GPTQ-Int4 values
LAYERS_FLAG = knob_decl.by_name()["kt_gpu_layers"].cli_flag
# The desktop the committed compose files and the README's presets table are planned for (launch/reference.py;
# `make start-qwen-moe` re-plans for the real host). Its read bandwidth is an assumption, labelled so.
REFERENCE_HOST = kt.HostCpu(isa=reference.HOST_CPU_ISA, isa_source=reference.HOST_CPU_LABEL,
                            read_bytes_s=((1, reference.HOST_READ_GBS * 1e9),),
                            read_source=f"assumed {reference.HOST_READ_GBS:g} GB/s (dual-channel DDR5), not measured",
                            physical_cores=reference.HOST_PHYSICAL_CORES, cores_source=reference.HOST_CPU_LABEL,
                            kt_kernel=catalog.versions().kt_kernel_for(reference.HOST_CPU_ISA))


def format_read_gbs(runs: list[dict]) -> str:
    """`vramkit host --bandwidth`'s sweep as the .env value parse_read_gbs reads."""
    return ",".join(f"{r['threads']}:{r['bytes_per_s'] / 1e9:.1f}" for r in sorted(runs, key=lambda r: r["threads"]))


def _read_bandwidth(given: tuple[tuple[int, float], ...] | None) -> tuple[tuple[tuple[int, float], ...], str]:
    if given is not None:           # the request's, checked by core/plan/request.py
        return tuple((t, gbs * 1e9) for t, gbs in given), "--host-read-gbs"
    from vramkit.core.host_plan import read_env_value
    text = os.environ.get(ENV_HOST_READ)
    env_file = catalog.CONFIG_DIR.parent / ".env"
    if text is None and env_file.is_file():
        text = read_env_value(env_file.read_text(), ENV_HOST_READ)
    if text:
        runs = tuple((t, gbs * 1e9) for t, gbs in kt.parse_read_gbs(text, ENV_HOST_READ))
        kind = "per thread count" if len(runs) > 1 else "one figure, threads not modelled"
        return runs, f"{ENV_HOST_READ}, measured by `vramkit host --bandwidth` ({kind})"
    return REFERENCE_HOST.read_bytes_s, REFERENCE_HOST.read_source + "; measure with `vramkit host --bandwidth --write`"


def this_host_isa(flags: set[str] | None = None) -> str | None:
    from vramkit.adapters.host import cpu_flags
    return kt.isa_from_flags(cpu_flags() if flags is None else flags)


def kt_kernel_here() -> str:
    """The kt-kernel release the kit installs on this machine (`make setup-kt-native`): its CPU's."""
    return catalog.versions().kt_kernel_for(this_host_isa())


def host_cpu(*, cpu_isa: str | None = None, host_read: tuple[tuple[int, float], ...] | None = None,
             physical_cores: int | None = None) -> kt.HostCpu:
    """The CPU side of the target: --cpu-isa or this host's (labelled), the read bandwidth, the server's cores."""
    isa: str | None
    if cpu_isa is not None:         # checked by core/plan/request.py
        isa, isa_source = cpu_isa, "--cpu-isa"
    else:
        isa, isa_source = this_host_isa(), "this host's (/proc/cpuinfo)"
    read, read_source = _read_bandwidth(host_read)
    n_cpus: int | None = None        # another host's: not known (SGLang's own host RAM as measured)
    if physical_cores is None:
        from vramkit.adapters.host import read_topology
        from vramkit.launch.steps import env_cpuset
        topo = read_topology()
        cpus = env_cpuset() or topo.allowed
        physical_cores, cores_source = max(1, len(topo.cores(cpus))), ("this machine's server cpuset (plan "
                                                                        "another host with --host-cores)")
        n_cpus = len(cpus)
    else:
        cores_source = "--host-cores"
    return kt.HostCpu(isa=isa, isa_source=isa_source, read_bytes_s=read, read_source=read_source,
                      physical_cores=physical_cores, cores_source=cores_source, cpus=n_cpus,
                      kt_kernel=catalog.versions().kt_kernel_for(isa))   # the release the kit installs there


def gguf_given(path: str | None) -> bool:
    """What kt-kernel's GGUFLoader opens: a .gguf file, or a folder holding .gguf files."""
    p = Path(str(path)) if path else None
    return p is not None and (p.is_file() and p.suffix == ".gguf" or p.is_dir() and any(p.glob("*.gguf")))


@dataclass(frozen=True)
class Hybrid:
    """A planned hybrid section (core's) and what launching it needs here."""

    plan: kt.HybridSection
    weight_path: str | None        # --kt-weight-path (None: the model folder)
    here_isa: str | None           # the build THIS host runs (`vramkit up` starts here, whatever --cpu-isa said)
    placement: str | None = None   # --kt-placement: SGLang's --init-expert-location file (None: experts 0..N-1)
    layers: int = 0                # the model's decoder layers: the placement file's rows
    architecture: str = ""         # the model's (whether a placement reaches its decode: kt_placement.unapplied)

    def args(self, model_path: str) -> list[str]:
        """--kt-weight-path (the other --kt-* flags render from the resolved knobs, core/plan/knobs.py): the given
        folder, else the model's own for the methods that read the checkpoint, else a placeholder that
        `vramkit up` refuses before starting (the kt-weights check)."""
        default = model_path if kt.KT_METHODS[self.plan.kt_method].reads else "$VRAMKIT_KT_WEIGHT_PATH"
        return [SGLANG_FLAGS["kt_weight_path"], self.weight_path or default] + (
            [SGLANG_FLAGS["init_expert_location"], str(Path(self.placement).resolve())] if self.placement else [])

    def placement_check(self) -> tuple[str, bool, str]:
        """(name, ok, detail): --kt-placement's file reads as a map of this model's layers and experts."""
        from vramkit.core.plan import kt_placement as kp
        from vramkit.errors import VramkitError
        where = str(self.placement)
        if self.plan.gpu_layers:    # whole layers: a GPU layer holds every expert, a CPU layer none to choose
            return ("kt-placement", False, f"{where} places experts within each layer, and this plan puts whole "
                                           f"layers' experts on the GPU -> add {LAYERS_FLAG} off (the split) or "
                                           "start without --kt-placement")
        try:
            text = Path(where).read_text()
        except OSError as e:
            return "kt-placement", False, f"{where}: {e.strerror} -> write it with `vramkit kt-placement`"
        try:
            m = kp.read_sglang_json(text, self.layers, self.plan.num_experts, where)
        except VramkitError as e:
            return "kt-placement", False, e.line().removeprefix("vramkit: ")
        n = self.plan.num_gpu_experts
        moved = sum(set(row[:n]) != set(range(n)) for row in m)    # the same experts reordered: not moved
        why = kp.unapplied(self.architecture, adapter_dispatch=os.environ.get(PLACEMENT_DISPATCH_ENV) != "0")
        if why is not None:
            return ("kt-placement", False, f"{where} is a valid map ({moved} of {self.layers} layers move experts), "
                                           f"but {why} -> start without --kt-placement; `vramkit kt-placement` "
                                           "still says what share of the routing it would give the GPU")
        return ("kt-placement", True, f"{where}: {moved} of {self.layers} layers keep other experts than "
                                      f"0..{n - 1} on the GPU (--init-expert-location; the kit's kt-kernel adapter "
                                      f"maps the router's ids to them: {kp.ADAPTER_DISPATCHED[self.architecture]}; "
                                      f"{kp.SPEED})")

    def checks(self, host_ram_available: int) -> list[tuple[str, bool, str]]:
        """(name, ok, detail) for `vramkit up`: this CPU runs the method, the experts fit host RAM, KT's converted
        layout is given where the method needs one."""
        hp = self.plan
        m, kk = hp.kt_method, hp.kt_kernel
        if self.here_isa is None:
            cpu = (False, f"--kt-method {m}: this CPU has not even AVX2; kt-kernel runs nowhere here")
        elif kt.runs_on(m, self.here_isa, kk):
            cpu = (True, f"--kt-method {m} on kt-kernel {kk}'s "
                         f"{kt.KT_VARIANT[kt.build_for(m, self.here_isa, kk)]} build")
        else:
            other = [x for x in kt.preference(self.here_isa) if kt.runs_on(x, self.here_isa, kk)]
            cpu = (False, f"--kt-method {m} needs {kt.needed_build(m, kk)}; this CPU runs {self.here_isa}"
                          + (f" -> --kt-method {other[0]} runs here" if other else
                             f": {kt.source_build_text(m, self.here_isa)}"
                             if self.here_isa == "avx2" and m in kt.AVX2_SOURCE else ""))
        ram_ok = host_ram_available >= hp.host_ram_bytes
        # the split's way out: the same GPU experts as whole layers, kt-kernel holding the CPU's layers only
        whole, whole_need = hp.other_placement
        out = [("cpu-isa", *cpu), *([self.placement_check()] if self.placement else []),
               ("kt-host-ram", ram_ok,
                f"{hp.host_experts_bytes / 2**30:.1f} GiB of experts (all {hp.num_experts} per layer"
                + (f" of the {hp.moe_layers - hp.gpu_layers} CPU layers" if hp.gpu_layers else "") + f", {m}) + "
                f"{hp.host_sglang_bytes / 2**30:.1f} GiB for SGLang"
                + (f" + {hp.host_prefill_bytes / 2**30:.1f} GiB pinned for the GPU prompt path"
                   if hp.host_prefill_bytes else "")
                + f", {host_ram_available / 2**30:.1f} GiB available"
                + (f" -> {LAYERS_FLAG} auto ({whole} whole layers on the GPU) "
                   f"needs {whole_need / 2**30:.1f} GiB"
                   if not ram_ok and not hp.gpu_layers and whole and whole_need <= host_ram_available else ""))]
        gguf = kt.KT_METHODS[m].gguf_type
        where = f"none at {self.weight_path}" if self.weight_path else "no --kt-weight-path given"
        if gguf:
            ok = gguf_given(self.weight_path)
            out.append(("kt-weights", ok, f"{m} experts in {self.weight_path}" if ok else
                        f"--kt-method {m} reads a {gguf} GGUF of the model: {where} -> "
                        f"--kt-weight-path FILE.gguf (or a folder of them): a published {gguf} GGUF, or llama.cpp's "
                        f"convert_hf_to_gguf.py --outtype q8_0"))
        elif kt.KT_METHODS[m].reads is None:
            ok = bool(self.weight_path) and Path(str(self.weight_path)).is_dir()
            out.append(("kt-weights", ok, f"{m} experts in {self.weight_path}" if ok else
                        f"--kt-method {m} reads KT's converted layout: {where} -> "
                        "convert with tools/make_random_checkpoint.py MODEL_CFG DIR --kt-layout "
                        f"{m} --from MODEL_DIR (make kt-convert), then --kt-weight-path DIR"))
        return out

    def compose_parts(self, build_context: str) -> dict:
        """What the compose file needs beyond the dense service: the KT image (built from its Dockerfile),
        the CPU-expert folder mounted read-only, --kt-weight-path pointing at it inside the container."""
        host = self.weight_path or "${VRAMKIT_KT_WEIGHT_PATH:-./kt-weights}"
        inside = KT_CONTAINER_DIR
        if kt.KT_METHODS[self.plan.kt_method].gguf_type and str(self.weight_path or "").endswith(".gguf"):
            inside += "/" + Path(str(self.weight_path)).name    # kt-kernel opens a file only by its .gguf name
        v, kk = catalog.versions(), self.plan.kt_kernel
        placement = ([SGLANG_FLAGS["init_expert_location"], KT_PLACEMENT_INSIDE] if self.placement else [])
        return {"args": [SGLANG_FLAGS["kt_weight_path"], inside, *placement], "build_context": build_context,
                "build_args": {"KT_KERNEL": kk} if kk != v.kt_kernel_pip else None,
                "image": v.sglang_kt_image_for(kk),
                "extra_volumes": (f"{host}:{inside}:ro  # the CPU experts ("
                                  + ("the downloaded checkpoint folder" if kt.KT_METHODS[self.plan.kt_method].reads
                                     else f"{self.plan.kt_method} layout")
                                  + "), read into host RAM by kt-kernel at start",)
                + ((f"{Path(self.placement).resolve()}:{KT_PLACEMENT_INSIDE}:ro  # which experts sit on the GPU "
                    "(vramkit kt-placement)",) if self.placement else ()),
                "extra_env": tuple(f"{k}: {v}  # {self._env_comment(k)}" for k, v in self.adapter_env().items())}

    def _env_comment(self, name: str) -> str:
        """What each of the adapter's settings does, for the compose file's reader."""
        if name == PREFILL_ENV:
            return (f"prompt chunks of {self.plan.prefill_tokens}+ tokens run the CPU layers' experts on the GPU "
                    "(--kt-gpu-prefill)")
        if name == FP8_ENV:     # set only for w8a8 (int8 is the adapter's default)
            return ("that path's block-FP8 experts computed as SGLang's FP8 MoE, inputs rounded to FP8 "
                    "(--kt-prefill-fp8)")
        if name == EMBED_ENV:
            return ("the token embeddings moved to pinned host RAM after the load, read by the GPU over the bus "
                    "(--kt-embed-host on)")
        if name == INT4_ENV:
            return "the CPU layers' decode on the checkpoint's GPTQ-Int4 values, the kit's kernel (--kt-cpu-decode)"
        if name == PIN_ENV:
            how = ("at their own size (cudaHostRegister)" if self.plan.prefill_pin == "register"
                   else "in PyTorch's pinned allocator (a power of two each)")
            return f"that path's host copies page-locked {how}, as planned (--kt-prefill-pin)"
        return (f"the last {self.plan.gpu_layers} MoE layers' experts all on the GPU, the rest's on the CPU "
                "(--kt-gpu-layers auto)")

    def native_env(self) -> dict[str, str]:
        """The kt-kernel adapter on the server's path (its sitecustomize installs the import hook); the build the
        plan chose when it is not the one kt-kernel would pick for this CPU (a method only a lesser build has)."""
        old = os.environ.get("PYTHONPATH", "")
        env = {"PYTHONPATH": str(KT_COMPAT_DIR) + (os.pathsep + old if old else "")}
        if self.plan.kt_variant and self.here_isa and self.plan.kt_variant != kt.KT_VARIANT[self.here_isa]:
            env["KT_KERNEL_CPU_VARIANT"] = self.plan.kt_variant
        return env | self.adapter_env()

    def adapter_env(self) -> dict[str, str]:
        """The kt-kernel adapter's settings the plan chose, for the native server and the container alike: whole
        layers on the GPU (kt_gpu_layers = "auto"), and with them the GPU prompt path when planned (kt_gpu_prefill);
        the token embeddings in host RAM when planned (kt_embed_host), with whole layers or SGLang's own split."""
        assert LAYERS_ENV is not None and PREFILL_ENV is not None and PIN_ENV is not None and FP8_ENV is not None
        assert EMBED_ENV is not None and INT4_ENV is not None
        embed = {EMBED_ENV: "on"} if self.plan.host_embed_bytes else {}
        if not self.plan.gpu_layers:
            return embed
        path = {PREFILL_ENV: str(self.plan.prefill_tokens), PIN_ENV: self.plan.prefill_pin} \
            | ({FP8_ENV: self.plan.prefill_fp8} if self.plan.prefill_fp8 != kt.PREFILL_FP8[0] else {})
        int4 = {INT4_ENV: "int4"} if self.plan.cpu_decode == "int4" else {}
        return {LAYERS_ENV: "auto"} | (path if self.plan.prefill_tokens else {}) | embed | int4

    def to_json(self) -> dict:
        return {"weight_path": self.weight_path, "this_host_isa": self.here_isa, "placement": self.placement}


KT_COMPAT_INSIDE = "/opt/vramkit-kt"     # the adapter's folder in a container (where the KT image installs it)


@dataclass(frozen=True)
class EmbedOnly:
    """A server without the hybrid mode whose token embeddings move to pinned host RAM (kt_embed_host on): the kit's
    adapter on SGLang's path, natively (PYTHONPATH: its sitecustomize installs the import hook that wraps the load)
    and in the official image (its folder mounted read-only there; that image sets no PYTHONPATH of its own: SGLang's
    docker/Dockerfile installs it with `pip install -e`, read 2026-11-28)."""

    def adapter_env(self) -> dict[str, str]:
        assert EMBED_ENV is not None
        return {EMBED_ENV: "on"}

    def native_env(self) -> dict[str, str]:
        old = os.environ.get("PYTHONPATH", "")
        return {"PYTHONPATH": str(KT_COMPAT_DIR) + (os.pathsep + old if old else "")} | self.adapter_env()

    def compose_parts(self, kt_service_dir: str) -> dict:
        """The compose file's additions to the dense service: the adapter's folder and the two variables. A relative
        folder is written "./..." (Compose reads a bare name as a named volume, not a bind mount)."""
        src = f"{kt_service_dir}/kt_compat"
        src = src if src.startswith(("/", ".")) else "./" + src
        return {"extra_volumes": (f"{src}:{KT_COMPAT_INSIDE}:ro  # the kit's SGLang adapter: "
                                  "its sitecustomize moves the token embeddings after the load",),
                "extra_env": (f"PYTHONPATH: {KT_COMPAT_INSIDE}  # the adapter's folder (its sitecustomize)",
                              f"{EMBED_ENV}: on  # the token embeddings moved to pinned host RAM after the load, read "
                              "by the GPU over the bus (--kt-embed-host on)")}


def adapter_for(hybrid: Hybrid | None, p) -> Hybrid | EmbedOnly | None:
    """What puts the kit's SGLang adapter on the server: the hybrid mode's launch side, else the token embeddings'
    move alone where the plan makes it, else nothing (the plain SGLang server)."""
    if hybrid is not None:
        return hybrid
    return EmbedOnly() if p.hybrid is None and p.host_embed_bytes else None


def for_plan(p, weight_path: str | None = None, here_isa: str | None = None, placement: str | None = None,
             layers: int = 0, architecture: str = "") -> Hybrid | None:
    """The launch side of a plan's hybrid section (None: not a hybrid plan)."""
    if p.hybrid is None:
        return None
    return Hybrid(p.hybrid, weight_path, here_isa, placement, layers or p.hybrid.moe_layers, architecture)
