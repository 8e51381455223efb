"""Every launch vramkit renders, through SGLang 0.5.15.post1's own parser, ServerArgs(device="cpu") and ModelConfig.

Runs in CI, never skipped for want of the checker: without .venv-sglang these tests FAIL and say
"run make setup-sglang-check". Each batch is one worker process (SGLang's ~11 s import, paid once).
The controls first prove the check is real: it refuses what SGLang refuses (the seed design's flags, the
old YaRN form) and accepts the YaRN form that served on the GPU host (../shared/gpu/README.md).
"""
from __future__ import annotations

from pathlib import Path

import pytest

from vramkit.adapters import sglang_check
from vramkit.adapters.sglang_check import LaunchCase
from vramkit.errors import Exit, VramkitError
from vramkit.units import MiB

pytestmark = pytest.mark.sglang

REPO = Path(__file__).resolve().parents[2]
# The 14B GPTQ-Int4 architecture config: the kit's declared copy, else the GPU host's (same file).
QWEN14_GPTQ_CANDIDATES = (
    REPO / "config/models/qwen2.5-coder-14b-instruct-gptq-int4",
    REPO.parent / "shared/gpu/models/qwen2.5-14b-gptq-int4",
)
OLD_YARN = '{"rope_scaling":{"rope_type":"yarn","factor":4.0,"original_max_position_embeddings":32768}}'
# Accepted and served 30K-token requests on the GPU host (../shared/gpu/README.md, Traps).
GOOD_YARN = ('{"rope_scaling":{"rope_type":"yarn","factor":4.0,"original_max_position_embeddings":32768,'
             '"rope_theta":1000000.0},"max_position_embeddings":131072}')
HF_ID = "Qwen/Qwen2.5-Coder-14B-Instruct-GPTQ-Int4"


def _require_checker() -> None:
    if not sglang_check.checker_python().exists():
        pytest.fail(f"the SGLang checking environment is missing ({sglang_check.checker_python()}): "
                    "run make setup-sglang-check", pytrace=False)


def _qwen14_dir() -> Path:
    for folder in QWEN14_GPTQ_CANDIDATES:
        if (folder / "config.json").is_file():
            return folder
    pytest.fail(f"no Qwen2.5-14B GPTQ config.json in {[str(p) for p in QWEN14_GPTQ_CANDIDATES]}", pytrace=False)


def _controls(model: Path) -> list[LaunchCase]:
    base = ["--model-path", HF_ID]
    return [
        LaunchCase("seed-kv-offload", base + ["--kv-offload"], model),
        LaunchCase("seed-enable-paging", base + ["--enable-paging"], model),
        LaunchCase("kv-dtype-fp16", base + ["--kv-cache-dtype", "fp16"], model),
        LaunchCase("yarn-old-form", base + ["--json-model-override-args", OLD_YARN, "--context-length", "131072"], model),
        LaunchCase("yarn-accepted-form", base + ["--json-model-override-args", GOOD_YARN, "--context-length", "131072"],
                   model),
        LaunchCase("measured-16gb-fp8", base + ["--kv-cache-dtype", "fp8_e5m2", "--mem-fraction-static", "0.80",
                                                "--context-length", "32768", "--host", "127.0.0.1"], model),
        LaunchCase("deprecated-cuda-graph-max-bs", base + ["--cuda-graph-max-bs", "8"], model),
        LaunchCase("cuda-graph-max-bs-decode", base + ["--cuda-graph-max-bs-decode", "8"], model),
        LaunchCase("defaults-16gb-card", base, model, gpu_mem_bytes=16311 * MiB),
        LaunchCase("defaults-h100", base, model, gpu_mem_bytes=81559 * MiB),
        LaunchCase("parser-only-hicache", base + ["--enable-hierarchical-cache", "--hicache-size", "24",
                                                  "--hicache-write-policy", "write_through"], None),
    ]


@pytest.fixture(scope="module")
def controls():
    _require_checker()
    with pytest.MonkeyPatch.context() as mp:
        # SGLang only warns about a too-long context inside its own CI; the checker must not inherit that.
        mp.setenv("SGLANG_IS_IN_CI", "1")
        batch = sglang_check.run_batch(_controls(_qwen14_dir()))
    assert batch.sglang_version == "0.5.15.post1"
    return {r.case_id: r for r in batch.results}


@pytest.mark.parametrize("flag", ["--kv-offload", "--enable-paging"])
def test_seed_design_flags_do_not_exist(controls, flag):
    result = controls["seed-" + flag.lstrip("-")]
    assert not result.ok and result.stage == "parse"
    assert result.error == f"unrecognized arguments: {flag}"
    err = sglang_check.bad_flag_error(result)
    assert err.code == Exit.BAD_FLAG
    assert err.line().startswith(f"vramkit: SGLang's parser refused {flag}: unrecognized arguments: {flag} -> ")


def test_kv_cache_dtype_has_no_fp16_value(controls):
    # "auto" is the fp16/bf16 KV; a literal fp16 is refused by the parser.
    result = controls["kv-dtype-fp16"]
    assert not result.ok and "invalid choice: 'fp16'" in result.error
    assert "SGLang's parser refused --kv-cache-dtype" in sglang_check.bad_flag_error(result).what


def test_old_yarn_form_is_refused_by_sglang(controls):
    result = controls["yarn-old-form"]
    assert not result.ok
    assert ("User-specified context_length (131072) is greater than the derived context_length (32768)"
            in result.error)


def test_accepted_yarn_form_resolves_131072(controls):
    result = controls["yarn-accepted-form"]
    assert result.ok, result.error
    assert result.context_len == 131072
    assert result.resolved["rope_scaling"]["rope_type"] == "yarn"
    assert result.resolved["rope_scaling"]["factor"] == 4.0


def test_measured_launch_resolves_as_given(controls):
    result = controls["measured-16gb-fp8"]
    assert result.ok, result.error
    r = result.resolved
    assert (r["kv_cache_dtype"], r["mem_fraction_static"], r["context_len"]) == ("fp8_e5m2", 0.8, 32768)
    assert (r["model_quantization"], r["num_hidden_layers"], r["num_key_value_heads_per_rank"], r["head_dim"]) \
        == ("gptq", 48, 8, 128)
    assert result.model_path_given == HF_ID  # checked against the local config.json, reported as given
    assert r["device"] == "cpu"


def test_deprecated_cuda_graph_max_bs_is_accepted_with_a_warning(controls):
    # 0.5.15.post1 still parses --cuda-graph-max-bs (into cuda_graph_max_bs_decode) but warns; renderers use
    # the new name. On device "cpu" the decode max_bs then resolves to torch_compile_max_bs (32), not 8.
    old, new = controls["deprecated-cuda-graph-max-bs"], controls["cuda-graph-max-bs-decode"]
    assert old.ok and new.ok
    assert any("'--cuda-graph-max-bs' is deprecated" in d and "--cuda-graph-max-bs-decode" in d
               for d in old.deprecations)
    assert new.deprecations == []
    assert old.resolved["cuda_graph_decode_max_bs"] == new.resolved["cuda_graph_decode_max_bs"] == 32


def test_defaults_follow_the_target_gpu_memory_tier(controls):
    small, big = controls["defaults-16gb-card"].resolved, controls["defaults-h100"].resolved
    assert (small["gpu_mem_mib_used_for_defaults"], big["gpu_mem_mib_used_for_defaults"]) == (16311, 81559)
    assert (small["chunked_prefill_size"], big["chunked_prefill_size"]) == (2048, 8192)
    assert 0.5 < small["mem_fraction_static"] < big["mem_fraction_static"] < 1.0


def test_parser_only_case_needs_no_model(controls):
    result = controls["parser-only-hicache"]
    assert result.ok and result.stage == "done" and result.resolved == {}


def test_parser_accepts_single_check():
    _require_checker()
    assert sglang_check.parser_accepts(["--model-path", HF_ID, "--enable-paging"]) == (
        False, "unrecognized arguments: --enable-paging")


def test_every_extra_args_example_in_the_readme_is_accepted_by_sglang():
    """The README's `--extra-args "..."` examples reach SGLang as written (placeholders in capitals filled in)."""
    import re
    _require_checker()
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    examples = re.findall(r"--extra-args [\"']([^\"']+)[\"']", readme)
    from vramkit.adapters.expert_dump import RECORD_FLAGS
    assert "--expert-distribution-recorder-buffer-size -1" in RECORD_FLAGS and RECORD_FLAGS in examples
    for example in examples:
        argv = [{"NAME": "qwen25", "KEY": "secret"}.get(a, a) for a in example.split()]
        assert sglang_check.parser_accepts(["--model-path", HF_ID, *argv]) == (True, ""), example


def test_missing_checker_says_what_to_run(monkeypatch, tmp_path):
    monkeypatch.setenv("VRAMKIT_SGLANG_PYTHON", str(tmp_path / "nowhere" / "python"))
    with pytest.raises(VramkitError) as info:
        sglang_check.check_launches([LaunchCase("x", ["--model-path", "x"], None)])
    assert info.value.todo == "run make setup-sglang-check"
    assert info.value.code == Exit.CANNOT_TELL


# ---- every launch the renderer produces for a plan that fits -------------------------------------------------

def _fitting_cases():
    try:
        from launch_cases_once import all_launch_cases  # tests/: iter_launch_cases(), built once per run
    except ModuleNotFoundError as exc:
        if exc.name != "vramkit.core.render.sglang":
            raise
        return None
    return [case for case in all_launch_cases() if case.fits]


_FITTING = _fitting_cases()


@pytest.fixture(scope="module")
def rendered_results():
    _require_checker()
    batch = sglang_check.run_batch(_FITTING or [])
    return {r.case_id: r for r in batch.results}


def test_renderer_declares_fitting_launches():
    if _FITTING is None:
        pytest.skip("vramkit.core.render.sglang is not written yet: nothing rendered to check")
    assert _FITTING, "iter_launch_cases() yielded no case the planner calls a fit"
    ids = [c.case_id for c in _FITTING]
    assert len(ids) == len(set(ids)), "case ids must be unique"


def _flag_value(argv, flag):
    argv = list(argv)
    for i, arg in enumerate(argv):
        if arg == flag and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
    return None


@pytest.mark.parametrize("case", _FITTING or [], ids=lambda c: c.case_id)
def test_rendered_launch_is_accepted_by_sglang(rendered_results, case):
    assert (Path(case.model_config_dir) / "config.json").is_file(), f"{case.case_id}: no config.json"
    result = rendered_results[case.case_id]
    assert result.ok, f"{case.case_id}: SGLang refused it at {result.stage}: {result.error}"
    assert not result.deprecations, f"{case.case_id} uses deprecated flags: {result.deprecations}"
    context = _flag_value(case.argv, "--context-length")
    if context is not None:
        assert result.context_len == int(context), f"{case.case_id}: SGLang resolved {result.context_len}"
    kv_dtype = _flag_value(case.argv, "--kv-cache-dtype")
    if kv_dtype is not None:
        assert result.resolved["kv_cache_dtype"] == kv_dtype
    # the serving settings (issue 21) survive SGLang's resolution as rendered (a deprecated parser name would be
    # renamed, and warned about, above)
    for flag in ("--served-model-name", "--tool-call-parser", "--reasoning-parser"):
        assert result.resolved[flag[2:].replace("-", "_")] == _flag_value(case.argv, flag), f"{case.case_id}: {flag}"
    # a placement file (`vramkit kt-placement`) makes SGLang dispatch the router's logical experts to physical slots
    # statically, the mapping kt-kernel and the GPU weight loader follow; without one, no dispatch step at all
    placement = _flag_value(case.argv, "--init-expert-location")
    assert result.resolved["init_expert_location"] == (placement or "trivial"), case.case_id
    assert result.resolved["ep_dispatch_algorithm"] == ("static" if placement else None), case.case_id
