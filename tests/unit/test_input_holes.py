"""Issue 19 item 7: each input hole a new user hit, closed, and the defaults that misled them.

Every test here failed on main before the fix (a traceback, a wrong figure, a misleading default); each calls
`vramkit.cli.main` in-process, so the whole file runs in seconds.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from vramkit.cli import build_parser, main
from vramkit.errors import Exit, exit_code_lines
from vramkit.launch import reference

REPO = Path(__file__).resolve().parents[2]
GPU = ["--gpu", "rtx-4090-24gb"]


def one_line_error(capsys, argv: list[str], code: int) -> str:
    got = main(argv)
    err = capsys.readouterr().err
    assert got == code, err
    assert err.startswith("vramkit: ") and err.count("\n") == 1 and "Traceback" not in err, err
    return err


def plan_json(capsys, *argv: str) -> dict:
    main(["plan", "--json", *argv])
    return json.loads(capsys.readouterr().out)


@pytest.fixture(autouse=True)
def _own_state(tmp_path, monkeypatch):
    """No VRAMKIT_* from the caller's shell, a fresh state folder."""
    import os
    for k in [k for k in os.environ if k.startswith("VRAMKIT_")]:
        monkeypatch.delenv(k)
    monkeypatch.setenv("VRAMKIT_STATE_DIR", str(tmp_path / "state"))


# ---- input holes ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("where", ["env", "flag"])
def test_a_port_beyond_65535_is_one_line(capsys, monkeypatch, where):
    argv = ["up", "--preset", "optimized", "--dry-run", *GPU]     # was: OverflowError from socket.bind
    if where == "env":
        monkeypatch.setenv("VRAMKIT_PORT", "99999")
    else:
        argv += ["--port", "99999"]
    err = one_line_error(capsys, argv, Exit.BAD_INPUT)
    assert "99999" in err and "1-65535" in err


def test_context_takes_k(capsys):
    d = plan_json(capsys, "--preset", "optimized", "--context", "32k", *GPU)
    assert d["knobs"]["context"] == 32768 and d["context_len"] == 32768
    assert plan_json(capsys, "--preset", "optimized", "--context", "8K", *GPU)["knobs"]["context"] == 8192


def test_more_gpu_experts_than_the_model_has_is_refused(capsys):
    err = one_line_error(capsys, ["plan", "--preset", "moe", "--kt-num-gpu-experts", "500", *GPU], Exit.BAD_INPUT)
    assert "128 experts" in err


def test_an_unknown_gpu_is_one_line(capsys):
    one_line_error(capsys, ["plan", "--preset", "optimized", "--gpu", "rtx-9999-99gb"], Exit.BAD_INPUT)


@pytest.mark.parametrize("path", ["/nonexistent/model-folder", "./no-such-folder", "~/no-such-folder-vk"])
def test_a_missing_folder_is_reported_as_a_missing_folder(capsys, path):
    err = one_line_error(capsys, ["plan", "--model", path, *GPU], Exit.BAD_INPUT)
    assert "does not exist" in err and "unknown model" not in err


# ---- defaults ----------------------------------------------------------------------------------------------
def test_bare_plan_is_make_plan(capsys):
    mk = (REPO / "mk" / "core.mk").read_text()
    make_preset = re.search(r"^PRESET \?= (\S+)", mk, re.M)
    assert make_preset and make_preset.group(1) == reference.PRESET
    host = ("--host-ram-gib", "64")      # this machine's free RAM moves between two reads
    bare = plan_json(capsys, *host)
    assert bare == plan_json(capsys, "--preset", make_preset.group(1), *host)
    assert bare["preset"] == reference.PRESET and bare["fits"]      # was: no preset, DOES NOT FIT


def test_yarn_only_when_a_context_asks_for_it(capsys):
    # gemma-2-9b-it's native window is 8,192: the knob's 32K default used to add YaRN x4 unasked
    d = plan_json(capsys, "--model", "gemma-2-9b-it", *GPU)
    assert d["yarn_factor"] is None and d["context_len"] == 8192 and d["knobs"]["context"] == 8192
    assert any("native window" in n and "YaRN" in n for n in d["notes"])       # and it says so
    asked = plan_json(capsys, "--model", "gemma-2-9b-it", "--context", "32768", *GPU)
    assert asked["yarn_factor"] == 4 and any("YaRN rope scaling x4" in n for n in asked["notes"])
    # the 128k preset asks for it on its own model
    assert plan_json(capsys, "--preset", "128k", *GPU)["yarn_factor"] == 4


def test_the_rendered_context_length_is_the_planned_one(capsys):
    d = plan_json(capsys, "--preset", "moe", "--cpu-isa", "amx", *GPU)
    args = d["sglang_args"]
    assert args[args.index("--context-length") + 1] == "32768"          # was 262144, the model's native window
    assert d["context_len"] == d["knobs"]["context"] == 32768


def test_one_card_alternatives_come_before_more_gpus(capsys):
    # Qwen3-8B in bf16 on a 16 GB card: two cards decode faster than 5 GiB over PCIe, yet a one-card user
    # reads the one-card answer first
    d = plan_json(capsys, "--preset", "optimized", "--model", "qwen3-8b", "--gpu", "rtx-4080-16gb",
                  "--host-ram-gib", "64")
    alts = [a for a in d["alternatives"] if a["fits"]]
    cards = [int(a["knobs"].get("tp", 1)) for a in alts]
    assert 1 in cards and 2 in cards, alts               # both kinds, or the order says nothing
    assert cards == sorted(cards)                        # was: "2 GPUs" first (the fastest)


def test_an_alternative_that_does_not_fit_says_why_in_numbers(capsys):
    d = plan_json(capsys, "--preset", "128k", "--model", "qwen2.5-coder-14b-instruct-gptq-int4",
                  "--gpu", "rtx-4080-16gb", "--host-ram-gib", "64")
    misses = [a for a in d["alternatives"] if not a["fits"]]
    assert misses and all(re.search(r"\d", a["why_not"]) for a in misses), misses


def test_measured_only_on_measurements():
    from vramkit.core.plan.request import PlanRequest
    from vramkit.launch.resolve import resolve
    given = resolve(PlanRequest(preset="optimized", gpu_free_gib=14.8, gpu_bandwidth_gbs=896, gpu_pcie=(5, 16)))
    assert "measured" not in given.free_source.replace("not measured", "") and "given" in given.free_source
    catalogued = resolve(PlanRequest(preset="optimized", gpu="rtx-4080-16gb", host_ram_gib=64))
    assert "given" not in catalogued.free_source


def test_status_with_nothing_running_is_one_line_and_exit_0(capsys):
    assert main(["status"]) == 0                         # was 18, which make turned into "Error 18"
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "nothing" in out


def test_every_exit_code_is_in_the_readme_and_help(capsys):
    readme = (REPO / "README.md").read_text()
    help_text = build_parser().format_help()
    codes = [int(line.split()[0]) for line in exit_code_lines()]
    assert {10, 18, 19, 23, 64, 65} <= set(codes)
    for code in codes:
        assert re.search(rf"^\| {code} \| ", readme, re.M), f"exit {code} missing from README.md"
        assert re.search(rf"^\s+{code}  ", help_text, re.M), f"exit {code} missing from vramkit --help"


# ---- the target host as an input (item 4) -----------------------------------------------------------------
def test_host_figures_are_labelled_given_or_this_machine(capsys):
    given = plan_json(capsys, "--preset", "moe", "--cpu-isa", "amx", "--host-cores", "12", "--host-ram-gib", "64",
                      *GPU)
    h = given["hybrid"]
    assert h["cpu_cores"] == 12 and h["cpu_cores_source"] == "--host-cores"
    assert h["cpuinfer_threads"] == 9                    # 12 cores minus SGLang's quarter
    here = plan_json(capsys, "--preset", "moe", "--cpu-isa", "amx", *GPU)["hybrid"]
    assert "this machine" in here["cpu_cores_source"]


def test_host_cores_is_checked(capsys):
    one_line_error(capsys, ["plan", "--preset", "moe", "--host-cores", "0", *GPU], Exit.BAD_INPUT)


def test_bare_up_is_the_default_preset_by_name_too(capsys):
    assert main(["up", "--dry-run", *GPU, "--assume-gpu", "--host-ram-gib", "64"]) == 0
    out = capsys.readouterr().out
    assert "[preset optimized]" in out.replace("\n", " ") or "preset optimized" in out
    assert "vramkit-optimized.compose.yml" in out              # was vramkit-custom: `vramkit down` found nothing
