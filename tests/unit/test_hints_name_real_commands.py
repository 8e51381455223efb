"""Every `make X` and `vramkit X` that vramkit's messages or set-up scripts tell a user to run exists.

Issue 10: hints named `make up` and `vramkit launch`, which never existed. This reads every string in
vramkit/ (docstrings aside: they describe, they do not instruct) and every line of scripts/*.sh, and checks
each named make target against the Makefile and mk/*.mk and each vramkit command against the CLI's parser.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from vramkit import cli

REPO = Path(__file__).resolve().parents[2]
COMMAND = re.compile(r"(?<![\w-])(make|vramkit) ([a-z][a-z0-9_-]*\*?)")
# prose, not commands: "what vramkit started", "vramkit is ..."
PROSE_AFTER_VRAMKIT = {"started", "is", "does", "reads", "runs", "uses", "keeps", "writes", "calls", "says"}


def make_targets() -> set[str]:
    text = "\n".join(p.read_text() for p in [REPO / "Makefile", *sorted((REPO / "mk").glob("*.mk"))])
    return {m.group(1) for m in re.finditer(r"^([A-Za-z0-9_.-]+):(?!=)", text, re.M)} - {".PHONY"}


def vramkit_commands() -> set[str]:
    sub = next(a for a in cli.build_parser()._actions if a.dest == "command")
    return set(sub.choices)


def _strings(tree: ast.AST):
    docs = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                docs.add(doc)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value not in docs:
            yield node.lineno, node.value


def named_commands() -> list[tuple[str, str, str]]:
    """(where, 'make'|'vramkit', name) for every command a message or a script names."""
    out = []
    for path in sorted((REPO / "vramkit").rglob("*.py")):
        for line, text in _strings(ast.parse(path.read_text())):
            for m in COMMAND.finditer(text):
                out.append((f"{path.relative_to(REPO)}:{line}", m.group(1), m.group(2)))
    for path in sorted((REPO / "scripts").glob("*.sh")):
        for line, text in enumerate(path.read_text().splitlines(), 1):
            for m in COMMAND.finditer(text):
                out.append((f"{path.relative_to(REPO)}:{line}", m.group(1), m.group(2)))
    return out


def exists(tool: str, name: str, targets: set[str], commands: set[str]) -> bool:
    if tool == "vramkit":
        return name in commands or name in PROSE_AFTER_VRAMKIT
    if name.endswith("*"):                      # `make start-qwen-*`
        return any(t.startswith(name[:-1]) for t in targets)
    return name in targets


def test_every_named_command_exists():
    targets, commands = make_targets(), vramkit_commands()
    named = named_commands()
    assert len(named) > 10                      # the scan finds the hints at all
    missing = [f"{where}: {tool} {name}" for where, tool, name in named if not exists(tool, name, targets, commands)]
    assert missing == []


@pytest.mark.parametrize("text, ok", [("start it (make up / vramkit launch)", False),
                                      ("run `make setup-gpu`", True), ("`make start-qwen-*`", True),
                                      ("vramkit vram-safe", True), ("`vramkit lanch`", False)])
def test_the_checker_itself(text, ok):
    targets, commands = make_targets(), vramkit_commands()
    found = [(m.group(1), m.group(2)) for m in COMMAND.finditer(text)]
    assert found and all(exists(t, n, targets, commands) for t, n in found) is ok
