"""The one adapter for the Python that RUNTIME=native starts SGLang with: which interpreter, and whether it
can import SGLang, asked before anything starts.

The interpreter, first that is set: `vramkit up --sglang-python`, $VRAMKIT_SERVER_PYTHON (make passes
SERVER_PYTHON as this), else `.venv-gpu/bin/python` in the checkout, the virtualenv `make setup-gpu` builds
on a GPU host (the pinned SGLang with its CUDA torch). There is no quiet fallback to the kit's own .venv:
that one never holds SGLang (CPU torch only, by design), so it could only fail later with an empty reason.
"""
from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

ENV_SERVER_PYTHON = "VRAMKIT_SERVER_PYTHON"     # read by the CLI (vramkit/launch/env.py), passed in
REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_PYTHON = REPO_ROOT / ".venv-gpu" / "bin" / "python"
FIX = "make setup-gpu on this GPU host (it builds .venv-gpu), or point VRAMKIT_SERVER_PYTHON at a Python with SGLang"
# Nothing of SGLang is executed: importing even its package root pulls in torch and transformers (4 s warm,
# 15-20 s cold on a 2-core machine, tens of seconds on a cold GPU host). find_spec of a top-level name only looks
# the package up; the server module and torch must be there, and the installed release comes from its metadata.
# A package that is missing raises ModuleNotFoundError as an import would (its last line is the reason shown).
_PROBE = ("import importlib.util as u, importlib.metadata as md, os, sys\n"
          "for name in ('sglang', 'torch'):\n"
          "    if u.find_spec(name) is None: raise ModuleNotFoundError(f'No module named {name!r}')\n"
          "where = u.find_spec('sglang').submodule_search_locations or []\n"
          "if not any(os.path.isfile(os.path.join(d, 'launch_server.py')) for d in where):\n"
          "    sys.exit('sglang.launch_server is missing')\n"
          "try: kt = md.version('kt-kernel')\n"
          "except md.PackageNotFoundError: kt = None\n"
          "import json; print(json.dumps([md.version('sglang'), kt]))")


def native_python(flag: str | None = None, env: str | None = None) -> tuple[str, str]:
    """(the interpreter, where that choice came from), from --sglang-python, else $VRAMKIT_SERVER_PYTHON's value
    (`env`), else the default. An absolute path, made with abspath and not resolve(): a venv's python is a
    symlink to the base interpreter, and following it leaves the venv."""
    for value, source in ((flag, "--sglang-python"), (env, ENV_SERVER_PYTHON)):
        if value:
            if os.sep not in value:                 # a bare name such as python3: found on PATH
                value = shutil.which(value) or value
            return os.path.abspath(value), source
    return str(DEFAULT_PYTHON), "default: make setup-gpu's .venv-gpu"


@dataclass(frozen=True)
class Probe:
    ok: bool
    version: str | None          # sglang.__version__ when it imports
    detail: str                  # why not, in a few words, when it does not
    kt_kernel: str | None = None  # the kt-kernel release installed beside it (None: none)


def probe_sglang(python: str, timeout_s: float = 120.0) -> Probe:
    """Is SGLang (its server module, and torch) installed for `python`, and which release? A separate process:
    vramkit itself never imports SGLang. Asked once per interpreter file and process."""
    p = Path(python)
    if not p.exists():
        return Probe(False, None, "no such file")
    st = p.stat()
    return _probe(str(p), st.st_mtime_ns, st.st_ino, timeout_s)


@functools.lru_cache(maxsize=16)
def _probe(python: str, _mtime_ns: int, _ino: int, timeout_s: float) -> Probe:
    try:
        r = subprocess.run([python, "-c", _PROBE], capture_output=True, text=True, timeout=timeout_s,
                           stdin=subprocess.DEVNULL, cwd=REPO_ROOT)
    except subprocess.TimeoutExpired:
        return Probe(False, None, f"importing it took over {timeout_s:.0f} s")
    except OSError as e:
        return Probe(False, None, f"it does not run: {e.strerror}")
    if r.returncode == 0 and r.stdout.strip():
        version, kt = json.loads(r.stdout.strip().splitlines()[-1])
        return Probe(True, version, "", kt)
    lines = [ln.strip() for ln in (r.stderr or r.stdout).splitlines() if ln.strip()]
    return Probe(False, None, lines[-1][:200] if lines else f"exit {r.returncode}")
