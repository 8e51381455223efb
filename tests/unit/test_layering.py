"""vramkit/core/ is pure: no adapters, no commands, no UI, no process/network/GPU/terminal libraries, and no
file formats: it owns its value types (core/model/spec.py) and never imports the catalog or the config.json
reader (issue 11: the core owns its types, the catalog owns every file format).
The pure modules that only one feature uses live beside that feature (PURE_FEATURE_FILES) under the same rules.
vramkit/ui/ (rich screens) may use rich but reads no hardware: no adapters, no commands.

Every import in every core file is read with `ast` (module level and inside functions, relative imports
resolved, `importlib.import_module("x")` / `__import__("x")` with a literal name included).
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

import vramkit

PACKAGE_DIR = Path(vramkit.__file__).resolve().parent
CORE_DIR = PACKAGE_DIR / "core"

BANNED_PACKAGES = ("vramkit.adapters", "vramkit.commands", "vramkit.ui", "vramkit.catalog", "vramkit.hf_config")
BANNED_MODULES = ("subprocess", "socket", "httpx", "redis", "pynvml", "psutil", "docker", "rich", "fastapi",
                  "uvicorn")

def _module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE_DIR.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_names(source: str, module: str, is_package: bool = False) -> list[tuple[int, str]]:
    """(line, absolute module name) for every import in `source`, a module named `module`."""
    out: list[tuple[int, str]] = []
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
                prefix = ".".join(base)
                mod = f"{prefix}.{node.module}" if node.module else prefix
            else:
                mod = node.module or ""
            out.append((node.lineno, mod))
            out += [(node.lineno, f"{mod}.{a.name}") for a in node.names if a.name != "*"]
        elif isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            if name in ("import_module", "__import__") and node.args and isinstance(node.args[0], ast.Constant) \
                    and isinstance(node.args[0].value, str):
                out.append((node.lineno, node.args[0].value))
    return out


def violations(source: str, module: str, is_package: bool = False,
               banned_modules=BANNED_MODULES, banned_packages=BANNED_PACKAGES) -> list[str]:
    bad = []
    for line, name in imported_names(source, module, is_package):
        top = name.split(".")[0]
        if top in banned_modules or any(name == p or name.startswith(p + ".") for p in banned_packages):
            bad.append(f"line {line}: {name}")
    return bad


CORE_FILES = sorted(CORE_DIR.rglob("*.py"))
# pure logic that only one feature uses, kept beside it (issue 17): held to the core's rules
PURE_FEATURE_FILES = [PACKAGE_DIR / p for p in ("dashboard/view.py", "embed/keys.py", "launch/systemd_units.py")]
UI_DIR = PACKAGE_DIR / "ui"
UI_FILES = sorted(UI_DIR.rglob("*.py"))


def test_core_has_files():
    names = {str(p.relative_to(CORE_DIR)) for p in CORE_FILES}
    assert {"plan/planner.py", "render/sglang.py", "model/arch.py"} <= names
    assert all(p.is_file() for p in PURE_FEATURE_FILES)


@pytest.mark.parametrize("path", CORE_FILES + PURE_FEATURE_FILES, ids=lambda p: str(p.relative_to(PACKAGE_DIR)))
def test_core_module_imports_nothing_impure(path):
    bad = violations(path.read_text(), _module_name(path), path.name == "__init__.py")
    assert not bad, f"{path.relative_to(PACKAGE_DIR.parent)} imports: {'; '.join(bad)}"


def test_ui_has_files():
    assert "vram_screen.py" in {p.name for p in UI_FILES}


@pytest.mark.parametrize("path", UI_FILES, ids=lambda p: str(p.relative_to(PACKAGE_DIR)))
def test_ui_module_reads_no_hardware(path):
    """A screen draws what it is given: rich is fine here, NVML/Docker/processes and commands are not."""
    banned_modules = tuple(m for m in BANNED_MODULES if m != "rich")
    bad = violations(path.read_text(), _module_name(path), path.name == "__init__.py",
                     banned_modules, ("vramkit.adapters", "vramkit.commands"))
    assert not bad, f"{path.relative_to(PACKAGE_DIR.parent)} imports: {'; '.join(bad)}"


# ----------------------------------------------------------------------------------------------
# the checker itself catches what it must
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("source", [
    "import subprocess",
    "import os, socket",
    "from rich.console import Console",
    "import pynvml as nvml",
    "def f():\n    import psutil\n    return psutil",
    "from vramkit.adapters import nvml",
    "from vramkit import adapters",
    "from vramkit import commands",
    "from ..adapters import nvml",
    "from ..commands.plan import run",
    "from vramkit.ui.vram_screen import screen",
    "from ..ui import vram_screen",
    "from .. import adapters",
    "import vramkit.commands.plan",
    "import importlib\nhttpx = importlib.import_module('httpx')",
    "redis = __import__('redis')",
    "try:\n    import docker\nexcept ImportError:\n    docker = None",
    "from vramkit.catalog import ModelSpec",
    "from vramkit import catalog",
    "from ..catalog import gpu",
    "from vramkit.hf_config import read_model_config",
])
def test_checker_flags(source):
    assert violations(source, "vramkit.core.example"), source


@pytest.mark.parametrize("source", [
    "import math, json, re",
    "from dataclasses import dataclass",
    "from vramkit.units import GiB",
    "from vramkit.core.model.spec import ModelSpec",
    "from .planner import Plan",
    "from . import planner",
    "import subprocessing_helpers",          # a name that merely starts like a banned one
    "from vramkit.adapters_doc import x",
])
def test_checker_allows(source):
    assert not violations(source, "vramkit.core.example"), source


# ----------------------------------------------------------------------------------------------
# launch/ is one part below the CLI: commands/ parse and print, launch/ never imports them back
# ----------------------------------------------------------------------------------------------
LAUNCH_FILES = sorted((PACKAGE_DIR / "launch").rglob("*.py"))


def test_launch_has_files():
    assert {"resolve.py", "checks.py", "up.py", "cases.py"} <= {p.name for p in LAUNCH_FILES}


@pytest.mark.parametrize("path", LAUNCH_FILES, ids=lambda p: str(p.relative_to(PACKAGE_DIR)))
def test_launch_module_does_not_import_the_cli_or_print(path):
    bad = violations(path.read_text(), _module_name(path), path.name == "__init__.py",
                     ("rich",), ("vramkit.commands", "vramkit.ui", "vramkit.cli"))
    assert not bad, f"{path.relative_to(PACKAGE_DIR.parent)} imports: {'; '.join(bad)}"


# ----------------------------------------------------------------------------------------------
# the command line stays at the top (issue 17): only cli.py imports commands/, and nothing below commands/
# sees argparse (the typed request, core/plan/request.py, is what goes down)
# ----------------------------------------------------------------------------------------------
ALL_FILES = sorted(PACKAGE_DIR.rglob("*.py"))
# `python -m vramkit` is cli.py's door; the SGLang check worker runs SGLang's own argparse parser
ARGPARSE_ALLOWED = ("vramkit.__main__", "vramkit.cli", "vramkit.commands", "vramkit.adapters._sglang_check_worker")


def _below_commands(path: Path) -> bool:
    name = _module_name(path)
    return not any(name == a or name.startswith(a + ".") for a in ARGPARSE_ALLOWED)


@pytest.mark.parametrize("path", [p for p in ALL_FILES if _below_commands(p)],
                         ids=lambda p: str(p.relative_to(PACKAGE_DIR)))
def test_nothing_below_commands_sees_argparse_or_imports_commands(path):
    bad = violations(path.read_text(), _module_name(path), path.name == "__init__.py",
                     ("argparse",), ("vramkit.commands", "vramkit.cli"))
    assert not bad, f"{path.relative_to(PACKAGE_DIR.parent)} imports: {'; '.join(bad)}"


def test_the_rule_above_covers_the_dashboard_and_launch():
    covered = {str(p.relative_to(PACKAGE_DIR)) for p in ALL_FILES if _below_commands(p)}
    assert {"dashboard/planning.py", "launch/resolve.py", "launch/up.py", "generated.py"} <= covered
    assert "cli.py" not in covered and "commands/plan.py" not in covered
