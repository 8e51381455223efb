"""The launch settings, declared once (vramkit/launch/settings.py): `vramkit up`'s options, the environment
it reads and the make variables mk/qwen.mk passes all follow the table (issue 17 item 5)."""
from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from vramkit.commands import launch
from vramkit.errors import Exit, VramkitError
from vramkit.launch.settings import SETTINGS

REPO = Path(__file__).resolve().parents[2]


def _up_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    launch.register(p.add_subparsers())
    return p


def _spec(argv: list[str]):
    return launch.launch_spec(_up_parser().parse_args(["up", *argv]))


def test_every_setting_is_an_option_of_up_with_its_env_name_in_the_help():
    text = _up_parser()._subparsers._group_actions[0].choices["up"].format_help()
    for s in SETTINGS:
        assert s.cli_flag in text and s.env_name in text, s.name


def test_make_passes_every_make_variable_under_its_env_name():
    qwen = (REPO / "mk" / "qwen.mk").read_text()
    up_line = qwen[qwen.index("_up ="):qwen.index("$(VRAMKIT) up")]
    passed = dict(re.findall(r"(VRAMKIT_\w+)='?\$\((\w+)\)", up_line))
    assert passed == {s.env_name: s.make_var for s in SETTINGS if s.make_var}


def test_flag_beats_env_beats_default(monkeypatch):
    for s in SETTINGS:
        monkeypatch.delenv(s.env_name, raising=False)
        if s.old_env:
            monkeypatch.delenv(s.old_env, raising=False)
    assert _spec(["--preset", "baseline"]).timeout_s == 1200.0
    monkeypatch.setenv("VRAMKIT_TIMEOUT", "30")
    assert _spec(["--preset", "baseline"]).timeout_s == 30.0
    assert _spec(["--preset", "baseline", "--timeout", "45"]).timeout_s == 45.0


@pytest.mark.parametrize("env, says", [("VRAMKIT_TIMEOUT", "$VRAMKIT_TIMEOUT"), ("VRAMKIT_RUNTIME", "VRAMKIT_RUNTIME")])
def test_a_bad_env_value_names_the_variable_and_exits_64(monkeypatch, env, says):
    monkeypatch.setenv(env, "soon")
    with pytest.raises(VramkitError) as e:
        _spec(["--preset", "baseline"])
    assert e.value.code == Exit.BAD_INPUT and says.lstrip("$") in e.value.what


def test_make_defaults_are_the_tables():
    """mk/qwen.mk's `VAR ?= default` for each setting it declares says what the table says (empty: unset)."""
    qwen = (REPO / "mk" / "qwen.mk").read_text()
    declared = dict(re.findall(r"^(\w+) \?= ?(.*)$", qwen, re.M))
    checked = 0
    for s in SETTINGS:
        if s.make_var in declared and s.name != "sglang_python":   # SERVER_PYTHON: mk/gpu.mk's venv, see there
            want = "" if s.default in (None, False) else f"{s.default:g}" if s.type is float else str(s.default)
            assert declared[s.make_var].strip() == want, s.make_var
            checked += 1
    assert checked >= 5
