"""One declaration per knob (vramkit/core/plan/knobs.py): the CLI, presets, renderer and doc table all read it,
and a bad value anywhere is one line with its own exit code."""
from __future__ import annotations

import argparse
import dataclasses
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from vramkit import catalog
from vramkit.cli import main
from vramkit.commands.plan import add_plan_arguments, request_from_args
from vramkit.core.plan import knobs as decl
from vramkit.core.plan.knobs import Knobs, knob
from vramkit.core.plan.planner import Target, plan
from vramkit.core.render.sglang import sglang_args
from vramkit.errors import Exit, VramkitError
from vramkit.launch.resolve import resolve
from vramkit.units import GiB

REPO = Path(__file__).resolve().parents[2]
ENGINE = catalog.engine()


@dataclasses.dataclass(frozen=True)
class WithSwap(Knobs):
    """A knob that does not exist yet, added the way the next one will be: one field."""

    swap_gb: int = knob(0, int, "GB (10^9 bytes)", "a test knob", minimum=0, sglang_flag="--swap-space")


def _args(*argv: str, knobs_cls: type = Knobs) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_plan_arguments(p, knobs_cls)
    return p.parse_args(list(argv))


def cli_knobs(args: argparse.Namespace, knobs_cls: type = Knobs) -> dict:
    """The knobs a command line gives, as its request holds them."""
    return dict(request_from_args(args, knobs_cls).knobs)


# ----------------------------------------------------------------------------------------------
# a new declaration reaches every reader
# ----------------------------------------------------------------------------------------------
def test_a_new_knob_reaches_cli_presets_renderer_and_doc_table():
    # CLI: a flag with its help, parsed and checked
    assert cli_knobs(_args("--swap-gb", "4", knobs_cls=WithSwap), WithSwap) == {"swap_gb": 4}
    with pytest.raises(VramkitError) as e:
        cli_knobs(_args("--swap-gb", "-2", knobs_cls=WithSwap), WithSwap)
    assert e.value.code == Exit.BAD_INPUT and "--swap-gb" in e.value.what
    help_text = argparse.ArgumentParser()
    add_plan_arguments(help_text, WithSwap)
    assert "--swap-gb" in help_text.format_help() and "--swap-space" in help_text.format_help()
    # presets: a key the file may hold, checked when read
    assert catalog.preset_knobs({"swap_gb": 2, "context": 4096}, "x.toml [presets.t]", WithSwap) == \
        {"swap_gb": 2, "context": 4096}
    with pytest.raises(VramkitError) as e:
        catalog.preset_knobs({"swap_gb": 1.5}, "x.toml [presets.t]", WithSwap)
    assert e.value.code == Exit.BAD_FILE and "swap_gb" in e.value.what
    # renderer: resolved by the planner (the subclass survives) and rendered in SGLang's spelling
    m = catalog.model("qwen2.5-coder-7b-instruct-gptq-int4")
    p = plan(m, Target(gpu=catalog.gpu("rtx-4090-24gb"), host_ram_available_bytes=64 * GiB),
             WithSwap(swap_gb=3, mem_fraction=0.8), ENGINE, with_alternatives=False)
    assert isinstance(p.knobs, WithSwap)
    argv = sglang_args(m, p, model_path=m.hf_id, port=catalog.sglang().port)
    assert argv[argv.index("--swap-space") + 1] == "3"
    # the doc table of config/presets.toml
    assert any(line.split()[1:2] == ["swap_gb"] for line in decl.doc_table(WithSwap))
    # and Knobs itself is untouched
    assert "swap_gb" not in decl.by_name()


def test_every_declared_knob_is_a_cli_flag_a_preset_key_and_a_doc_row():
    help_text = argparse.ArgumentParser()
    add_plan_arguments(help_text)
    text = help_text.format_help()
    table = "\n".join(decl.doc_table())
    for s in decl.KNOBS:
        assert s.cli_flag in text, s.name
        assert s.preset_key in catalog.PRESET_KEYS, s.name
        assert f"#   {s.name} " in table, s.name


def test_renderer_emits_exactly_the_declared_flags():
    """Every flag a knob declares shows up when the knob is on, and no knob flag appears that none declares."""
    m = catalog.model("qwen2.5-coder-14b-instruct-gptq-int4")
    p = plan(m, Target(gpu=catalog.gpu("rtx-4090-24gb"), host_ram_available_bytes=128 * GiB),
             Knobs(tp=2, mem_fraction=0.8, hicache_gb=16, cpu_offload_gib=2, cuda_graph_max_bs=4), ENGINE,
             with_alternatives=False)
    argv = sglang_args(m, p, model_path="x", port=catalog.sglang().port)
    for s in decl.KNOBS:
        # the kt_* knobs need a MoE (the test below), moe_kernel a GPTQ/AWQ MoE (test_moe_hybrid.py)
        if s.sglang_flag and not s.name.startswith("kt_") and s.name != "moe_kernel":
            assert s.sglang_flag in argv, s.name
    assert not [a for a in argv if a.startswith("--kt-")]     # off unless kt_method is set


def test_kt_knobs_render_on_a_moe_with_kt_method(capsys):
    import json
    # --cpu-isa: the plan is for a CPU with AVX-512 (this machine's own may run no method of the pinned kt-kernel)
    assert main(["plan", "--json", "--preset", "moe", "--gpu", "rtx-5060-ti-16gb", "--host-read-gbs", "60",
                 "--host-ram-gib", "64", "--cpu-isa", "avx512"]) == 0
    argv = json.loads(capsys.readouterr().out)["sglang_args"]
    for s in decl.KNOBS:
        if s.name.startswith("kt_") and s.env is None:     # an env knob sets the kit's adapter, not a flag
            assert s.sglang_flag in argv, s.name


# ----------------------------------------------------------------------------------------------
# validation: the CLI (exit 64)
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("argv, says", [
    (["--gpu-free-gib", "0"], "--gpu-free-gib"),
    (["--gpu-free-gib", "-3"], "--gpu-free-gib"),
    (["--gpu-free-gib", "inf"], "--gpu-free-gib"),
    (["--gpu-free-gib", "nan"], "--gpu-free-gib"),
    (["--gpu-free-gib", "lots"], "is not a number"),
    (["--other-used-gib", "-1"], "--other-used-gib"),
    (["--host-ram-gib", "0"], "--host-ram-gib"),
    (["--tp", "0"], "--tp"),
    (["--tp", "two"], "is not a whole number"),
    (["--context", "8kb"], "is not a whole number"),
    (["--context", "0"], "--context"),
    (["--mem-fraction", "1.2"], "[0.1, 1)"),
    (["--mem-fraction", "high"], "is not a number"),
    (["--chunked-prefill", "-2"], "or -1"),
    (["--cuda-graph-max-bs", "-1"], "--cuda-graph-max-bs"),
    (["--hicache-gb", "8.5"], "whole number"),
    (["--cpu-offload-gib", "some"], "auto"),
    (["--kv-dtype", "fp16"], "one of auto"),
])
def test_bad_cli_value_is_one_line_and_exit_64(capsys, argv, says):
    code = main(["plan", "--gpu", "rtx-4090-24gb", *argv])
    err = capsys.readouterr().err
    assert code == Exit.BAD_INPUT, err
    assert err.count("\n") == 1 and err.startswith("vramkit: ") and says in err, err
    assert "Traceback" not in err


def test_chunked_prefill_minus_one_is_accepted_as_sglangs_no_chunking():
    assert cli_knobs(_args("--chunked-prefill", "-1")) == {"chunked_prefill": -1}


def test_old_hicache_flag_still_works_with_a_warning(capsys):
    r = resolve(request_from_args(_args("--hicache-gib", "8", "--gpu", "rtx-4090-24gb", "--host-ram-gib", "64")))
    assert r.knobs.hicache_gb == 8
    assert "--hicache-gb" in capsys.readouterr().err
    with pytest.raises(VramkitError):
        resolve(request_from_args(_args("--hicache-gib", "8", "--hicache-gb", "4", "--gpu", "rtx-4090-24gb")))


def test_values_the_checks_accept_reach_the_plan():
    r = resolve(request_from_args(_args("--gpu", "rtx-4090-24gb", "--tp", "1", "--mem-fraction", "0.8",
                                        "--cpu-offload-gib", "auto", "--other-used-gib", "0", "--host-ram-gib", "64",
                                        "--kv-dtype", "fp8_e5m2")))
    assert (r.knobs.mem_fraction, r.knobs.cpu_offload_gib, r.knobs.kv_dtype) == (0.8, "auto", "fp8_e5m2")
    assert isinstance(r.plan.knobs.cpu_offload_gib, int)        # resolved: "auto" became GiB


# ----------------------------------------------------------------------------------------------
# validation: config/presets.toml (exit 65, file and key named)
# ----------------------------------------------------------------------------------------------
BAD_PRESETS = [
    ("mem_fraction = 1.5", "mem_fraction"),
    ('context = "32k"', "context"),
    ("context = true", "context"),
    ("concurrency = 0", "concurrency"),
    ('kv_dtype = "fp16"', "kv_dtype"),
    ("hicache_gb = -1", "hicache_gb"),
    ('cpu_offload_gib = "lots"', "cpu_offload_gib"),
    ("tp = 1.0", "tp"),
    ("speculative = 3", "speculative"),
]


@pytest.mark.parametrize("line, key", BAD_PRESETS)
def test_bad_preset_value_is_one_line_naming_file_and_key(tmp_path, line, key):
    """Run in a child process against a copy of config/ holding the bad value: the real loading path."""
    cfg = tmp_path / "config"
    shutil.copytree(REPO / "config", cfg)
    (cfg / "presets.toml").write_text((cfg / "presets.toml").read_text() + "\n[presets.bad]\ncontext_note = 1\n"
                                      .replace("context_note = 1", line))
    code = ("import sys, vramkit.catalog as c, pathlib; c.CONFIG_DIR = pathlib.Path(sys.argv[1]); "
            "from vramkit.cli import main; sys.exit(main(['plan', '--preset', 'baseline']))")
    r = subprocess.run([sys.executable, "-c", code, str(cfg)], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert r.returncode == Exit.BAD_FILE, r.stderr
    assert r.stderr.count("\n") == 1 and "presets.toml [presets.bad]" in r.stderr and key in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_old_preset_key_is_read_with_a_warning(capsys):
    assert catalog.preset_knobs({"hicache_gib": 8}, "p.toml [presets.x]") == {"hicache_gb": 8}
    assert "hicache_gb" in capsys.readouterr().err


# ----------------------------------------------------------------------------------------------
# environment knobs: VRAMKIT_*, the old names still read with a warning
# ----------------------------------------------------------------------------------------------
def _up_spec(*argv: str):
    from vramkit.cli import build_parser
    from vramkit.commands import launch
    return launch.launch_spec(build_parser().parse_args(["up", "--preset", "optimized", *argv]))


@pytest.fixture
def clean_env(monkeypatch):
    from vramkit.launch.env import UP_ENV
    for new, old in UP_ENV.items():
        monkeypatch.delenv("VRAMKIT_" + new, raising=False)
        monkeypatch.delenv(old, raising=False)
    return monkeypatch


def test_vramkit_env_knobs_set_the_launch(clean_env, capsys):
    clean_env.setenv("VRAMKIT_PORT", "31000")
    clean_env.setenv("VRAMKIT_RUNTIME", "native")
    clean_env.setenv("VRAMKIT_GPUS", "1,0")
    clean_env.setenv("VRAMKIT_DRY_RUN", "1")
    clean_env.setenv("VRAMKIT_SGLANG_EXTRA_ARGS", "--attention-backend triton")
    spec = _up_spec()
    assert (spec.port, spec.runtime, spec.gpu_ids, spec.dry_run) == (31000, "native", [1, 0], True)
    assert spec.extra_args == ["--attention-backend", "triton"]
    assert capsys.readouterr().err == ""
    assert _up_spec("--port", "32000").port == 32000              # a flag wins over the environment


def test_old_env_names_still_work_with_a_warning(clean_env, capsys):
    clean_env.setenv("PORT", "31001")
    clean_env.setenv("SGLANG_PYTHON", "/opt/py/bin/python3")
    spec = _up_spec()
    assert (spec.port, spec.sglang_python) == (31001, "/opt/py/bin/python3")
    err = capsys.readouterr().err
    assert "$PORT is now $VRAMKIT_PORT" in err and "$VRAMKIT_SERVER_PYTHON" in err


@pytest.mark.parametrize("var, value", [("VRAMKIT_PORT", "http"), ("VRAMKIT_PORT", "0"), ("VRAMKIT_TIMEOUT", "-5"),
                                        ("VRAMKIT_RUNTIME", "podman"), ("PORT", "x")])
def test_bad_env_knob_is_one_line_and_exit_64(clean_env, var, value):
    clean_env.setenv(var, value)
    with pytest.raises(VramkitError) as e:
        _up_spec()
    assert e.value.code == Exit.BAD_INPUT and var.removeprefix("VRAMKIT_") in e.value.what + e.value.todo


def test_bad_port_flag_is_exit_64_not_argparse(clean_env, capsys):
    assert main(["up", "--preset", "optimized", "--port", "http", "--dry-run"]) == Exit.BAD_INPUT
    assert capsys.readouterr().err.startswith("vramkit: --port 'http'")


def test_sglang_flags_are_spelled_only_in_knobs_py():
    """Issue 17 item 5: a string that is exactly one of SGLang's flags the kit renders appears in code only in
    core/plan/knobs.py (docstrings, comments and f-string hints are text, not renderings)."""
    import ast

    import vramkit
    flags = {s.sglang_flag for s in decl.specs()} | set(decl.SGLANG_FLAGS.values())
    flags.discard(None)
    root = Path(vramkit.__file__).parent
    found = []
    for path in root.rglob("*.py"):
        rel = path.relative_to(root).as_posix()
        if rel in ("core/plan/knobs.py", "core/plan/request.py", "launch/settings.py",
                   "adapters/_sglang_check_worker.py") or rel.startswith("commands/"):
            continue   # request.py, settings.py, commands/: vramkit's own CLI flags (--port is both)
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value in flags:
                found.append(f"{rel}:{node.lineno} {node.value}")
    assert not found, found
