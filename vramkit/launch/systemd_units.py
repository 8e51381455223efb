"""systemd units for the native SGLang runtime and the embedding service, rendered from the templates
in services/systemd/ (text in, text out; the command reads and writes the files).

systemd's own syntax rules applied here (systemd.service(5), systemd.syntax(7)): ExecStart's first word
is an absolute path; a word with spaces, quotes or backslashes is double-quoted with C escapes; `%`
starts a specifier and is written `%%`; `$` expands environment variables and is written `$$`. A line
break or another control character in any value is refused (ValueError): a newline in --gpus, --model-path
or a model folder's name would start a directive of its own, e.g. `ExecStartPre=` (issue 20 item 7).
"""
from __future__ import annotations

import re
from string import Template

_PLAIN = re.compile(r"[A-Za-z0-9_@%+=:,./$-]+")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _no_control(what: str, value: str) -> str:
    found = _CONTROL.search(value)
    if found:
        raise ValueError(f"{what} {value[:80]!r} holds a control character ({found.group()!r}): a unit file "
                         "reads a line break as the start of another directive")
    return value


def exec_word(word: str) -> str:
    """One ExecStart word, quoted and escaped as systemd reads it back."""
    word = _no_control("the word", word).replace("%", "%%").replace("$", "$$")
    if word and _PLAIN.fullmatch(word):
        return word
    return '"' + word.replace("\\", "\\\\").replace('"', '\\"') + '"'


def exec_line(argv: list[str]) -> str:
    if not argv or not argv[0].startswith("/"):
        raise ValueError(f"ExecStart needs an absolute program path, got {argv[:1]}")
    return " ".join(exec_word(w) for w in argv)


def cpu_affinity_line(cpus: tuple[int, ...], env_name: str) -> str:
    """CPUAffinity= from the cpuset `make optimize-write` put in .env, or a comment saying it is unset."""
    if not cpus:
        return f"# CPUAffinity: {env_name} is not set (run `make optimize-write`, then install again)"
    return f"CPUAffinity={' '.join(str(c) for c in sorted(set(cpus)))}"


def render(template: str, values: dict[str, str]) -> str:
    """$name placeholders -> values; an unknown or missing name raises (no half-rendered unit)."""
    return Template(template).substitute({k: _no_control(k, v) for k, v in values.items()})
