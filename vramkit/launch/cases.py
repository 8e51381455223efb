"""Every SGLang launch the kit can render, for the real-parser test (tests/integration/test_sglang_parser.py).

Not in core/: it walks the catalog files. Each case is what `vramkit up` would pass to SGLang: every
preset x catalogued model x catalogued GPU at tensor parallel 1 and 2, and the launches as the GPU-host
runs made them (benchmarks/gpu/run_calibration.sh: dummy weights, that host's extra flags, tp 1 and 2).
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from vramkit import catalog
from vramkit.core.model.spec import GpuSpec, ModelSpec
from vramkit.core.plan.knobs import SGLANG_FLAGS, Knobs
from vramkit.core.plan.planner import Target, plan
from vramkit.core.render.sglang import sglang_args
from vramkit.units import GiB


@dataclass(frozen=True)
class LaunchCaseSpec:
    case_id: str
    argv: list[str]
    model_config_dir: Path
    fits: bool
    gpu_mem_bytes: int | None = None


def case_gpus() -> list[GpuSpec]:
    """The cards the launch matrix renders for: the first catalogued card of each (compute capability, under or
    over 20 GiB). A rendered launch depends on the card through its compute capability (the MXFP4 layout) and its
    memory; the memory changes which flags SGLang's defaults would pick only at 20 GiB (the decode CUDA-graph
    batch, 8 under it) and above that only their numbers (chunk 2048/4096, graph batch 24/32/256, the fraction),
    which the kit renders explicitly either way. So the real parser sees every kind of launch without all 38 cards."""
    seen: dict[tuple[bool, tuple[int, int] | None], GpuSpec] = {}
    for gpu in catalog.gpus().values():
        seen.setdefault((gpu.memory_total_bytes >= 20 * GiB, gpu.compute_capability), gpu)
    return list(seen.values())


def iter_launch_cases() -> Iterator[LaunchCaseSpec]:
    engine = catalog.engine()
    host_gpu = catalog.gpu("h100-80gb")
    port = catalog.sglang().port
    for preset in catalog.presets().values():
        # a preset's knobs on every model, without the hybrid split (_hybrid_cases renders that, with a CPU side)
        dense_knobs = {k: v for k, v in preset.knobs.items() if not k.startswith("kt_")}
        for model in catalog.models().values():
            for gpu in case_gpus():
                for tp in (1, 2):
                    knobs = Knobs(**(dense_knobs | {"tp": tp}))
                    p = plan(model, Target(gpu=gpu, host_ram_available_bytes=128 * GiB), knobs, engine,
                             with_alternatives=False)
                    argv = sglang_args(model, p, model_path=model.hf_id, port=port)
                    yield LaunchCaseSpec(f"{preset.name}-{model.name}-{gpu.name}-tp{tp}", argv, model.config_dir,
                                         p.fits, gpu.memory_total_bytes)
        # as the GPU-host runs launched them: dummy weights from the config folder, that host's extras;
        # tp 2 with the dense 7B, as the two-GPU session ran it (each card held to 16 GB)
        for model_name, tp, free_gib in ((preset.model, 1, 15.33), ("qwen2.5-coder-7b-instruct", 2, 14.48)):
            model = catalog.model(model_name)
            target = Target(gpu=host_gpu, gpu_free_bytes=int(free_gib * GiB), host_ram_available_bytes=128 * GiB)
            p = plan(model, target, Knobs(**(dense_knobs | {"tp": tp})), engine, with_alternatives=False)
            argv = sglang_args(model, p, model_path=str(model.config_dir), load_format="dummy", port=port,
                               extra=list(catalog.sglang().gpu_host_extra_args))
            suffix = "" if tp == 1 else f"-tp{tp}-{model.name}"
            yield LaunchCaseSpec(f"{preset.name}-gpu-host-dummy{suffix}", argv, model.config_dir, p.fits,
                                 host_gpu.memory_total_bytes)
    yield from _hybrid_cases(engine, port)


GPTQ_MOE = "qwen3-30b-a3b-gptq-int4"     # the moe preset's shape with Qwen's GPTQ-Int4 experts


def _hybrid_cases(engine, port: int) -> Iterator[LaunchCaseSpec]:
    """The hybrid MoE launches with every --kt-* flag resolved, as `vramkit up` renders them: each preset
    with kt_method on each catalogued card, and FP8 / AMXINT4 / AMXINT8 as the H100-host runs made them
    (benchmarks/gpu/run_moe.sh, run_moe_vs_llamacpp.sh: a local checkpoint folder, KT's layouts beside it)."""
    from vramkit.core.plan.kt_hybrid import HostCpu  # noqa: PLC0415
    from vramkit.launch import hybrid  # noqa: PLC0415 - launch.hybrid imports launch.resolve, above this module
    h100_host = HostCpu(isa="amx", isa_source="the H100 host", read_bytes_s=((16, 93.0e9),),
                        read_source="the H100 host's 16-thread read", physical_cores=16,
                        kt_kernel=catalog.versions().kt_kernel_pip)
    host_gpu = catalog.gpu("h100-80gb")
    for preset in catalog.presets().values():
        if not preset.knobs.get("kt_method"):
            continue
        preset_model = catalog.model(preset.model)
        runs: list[tuple[ModelSpec, GpuSpec, float | None, dict[str, str]]] = [
            (preset_model, gpu, None, {}) for gpu in case_gpus()]
        runs += [(preset_model, host_gpu, 15.31, {"kt_method": m})
                 for m in ("FP8", "AMXINT4", "AMXINT8", "LLAMAFILE_Q8_0")]
        # GPTQ-Int4 experts split per layer run on SGLang's moe_wna16 (--quantization moe_wna16 beside --kt-*)
        runs += [(catalog.model(GPTQ_MOE), host_gpu, 15.31, {"kt_method": "AMXINT8", "kt_gpu_layers": "off"})]
        # and its own int4 values repacked for the CPU (RAWINT4), whole layers on marlin
        runs += [(catalog.model(GPTQ_MOE), host_gpu, 15.31, {"kt_method": "RAWINT4"})]
        for model, gpu, free_gib, over in runs:
            knobs = Knobs(**(preset.knobs | over))
            host = h100_host if free_gib else hybrid.REFERENCE_HOST
            target = Target(gpu=gpu, gpu_free_bytes=int(free_gib * GiB) if free_gib else None,
                            host_ram_available_bytes=128 * GiB, host=host)
            p = plan(model, target, knobs, engine, with_alternatives=False)
            weights = {"AMXINT4": "/tmp/ck/kt-int4", "AMXINT8": "/tmp/ck/kt-int8",
                       "LLAMAFILE_Q8_0": "/tmp/ck/q8_0.gguf",
                       "RAWINT4": "/tmp/ck/kt-raw4"}.get(over.get("kt_method", ""))
            hy = hybrid.for_plan(p, weights)
            if hy is None:      # a card that holds every expert: planned without the hybrid mode, rendered so
                assert p.hybrid is None and p.knobs.kt_method is None and not free_gib
                yield LaunchCaseSpec(f"{preset.name}-all-gpu-{gpu.name}", sglang_args(model, p, model_path=model.hf_id,
                                     port=port), model.config_dir, p.fits, gpu.memory_total_bytes)
                continue
            if free_gib:
                argv = sglang_args(model, p, model_path=str(model.config_dir), load_format=None, port=port,
                                   extra=[*catalog.sglang().gpu_host_extra_args, SGLANG_FLAGS["skip_tokenizer_init"]])
                case = f"{preset.name}-gpu-host-{knobs.kt_method}" + ("" if model is preset_model else "-gptq")
            else:
                argv = sglang_args(model, p, model_path=model.hf_id, port=port)
                case = f"{preset.name}-hybrid-{gpu.name}"
            yield LaunchCaseSpec(case, argv + hy.args(model.hf_id), model.config_dir, p.fits,
                                 gpu.memory_total_bytes)
            if free_gib and knobs.kt_method == "AMXINT8" and model is preset_model:   # + `vramkit kt-placement`'s map
                placed = hybrid.for_plan(p, weights, placement="/tmp/ck/kt-placement.json", layers=model.num_layers)
                assert placed is not None
                yield LaunchCaseSpec(case + "-placement", argv + placed.args(model.hf_id), model.config_dir, p.fits,
                                     gpu.memory_total_bytes)
