"""A module of the repository outside the package (a benchmark script, a tool, the server-side adapter), loaded by its
path: they are not installed, and some share a name with another module on the path (a conftest, SGLang's own)."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[1]


def load_module(rel: str | Path, name: str | None = None, *, register: bool = False) -> ModuleType:
    """A fresh copy of REPO/rel, named `name` (default: the file's stem); `register` also puts it in sys.modules
    (a module whose dataclasses or pickles look themselves up by name needs it)."""
    path = REPO / rel
    spec = importlib.util.spec_from_file_location(name or path.stem, path)
    assert spec is not None and spec.loader is not None, path
    mod = importlib.util.module_from_spec(spec)
    if register:
        sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod
