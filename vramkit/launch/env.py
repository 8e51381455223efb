"""The environment knobs of `vramkit up`, all named VRAMKIT_<NAME> (declared in launch/settings.py; mk/qwen.mk
passes its make variables under these names). The names before issue 11 (RUNTIME, PORT, ...) still work for
one release, with a warning on stderr; a bad value is one line naming the variable, exit 64.
"""
from __future__ import annotations

import math
import os
import sys

from vramkit.errors import Exit, VramkitError
from vramkit.launch.settings import ENV_PREFIX, SETTINGS

PREFIX = ENV_PREFIX
# VRAMKIT_<name>: its old name (the launch settings' table, launch/settings.py)
UP_ENV = {s.env: s.old_env for s in SETTINGS if s.old_env}


def env_value(name: str, environ=None) -> str | None:
    """VRAMKIT_<name>, else its old name (warned), else None. An empty value counts as unset."""
    environ = os.environ if environ is None else environ
    value = environ.get(PREFIX + name)
    if value:
        return value
    old = UP_ENV.get(name)
    if old and environ.get(old):
        print(f"vramkit: warning: ${old} is now ${PREFIX}{name}; the old name goes in the next release",
              file=sys.stderr)
        return environ[old]
    return None


def env_number(name: str, kind: type, default, *, minimum: float = 0, environ=None):
    """A numeric environment knob, checked (one line and exit 64 when it is not a number >= minimum)."""
    raw = env_value(name, environ)
    return default if raw is None else number(raw, kind, f"${PREFIX}{name}", minimum=minimum,
                                              todo=f"fix or unset {PREFIX}{name}")


def number(raw, kind: type, what: str, *, minimum: float = 0, maximum: float = math.inf, todo: str = ""):
    """`raw` as a finite int/float in [minimum, maximum], else one line naming `what`, exit 64."""
    try:
        value = kind(raw)
    except (TypeError, ValueError):
        value = None
    if value is None or not math.isfinite(value) or value < minimum or value > maximum:
        bound = f">= {minimum:g}" if maximum == math.inf else f"in {minimum:g}-{maximum:g}"
        raise VramkitError(f"{what} {raw!r} is not a {'whole ' if kind is int else ''}number {bound}",
                           todo, Exit.BAD_INPUT)
    return value


FLAG_TRUE, FLAG_FALSE = ("1", "true", "yes"), ("0", "false", "no")


def env_flag(name: str, environ=None) -> bool:
    """A yes/no knob such as DRY_RUN: 1/true/yes or 0/false/no/empty/unset, any case. Anything else is one line
    and exit 64 before anything starts: before issue 10, only "1" was a dry run and DRY_RUN=yes started for real."""
    raw = env_value(name, environ)
    value = (raw or "").strip().lower()
    if value in FLAG_TRUE:
        return True
    if not value or value in FLAG_FALSE:
        return False
    raise VramkitError(f"{PREFIX}{name} (make: {name}) is {raw!r}, neither yes nor no; nothing started",
                       f"{name}=1 (or true/yes) only prints the plan and the command, {name}=0 (or false/no/empty) "
                       "starts", Exit.BAD_INPUT)
