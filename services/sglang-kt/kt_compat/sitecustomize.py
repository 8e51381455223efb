"""Runs at every Python start when this folder is on PYTHONPATH (the kit's native KT launches put it
there; SGLang's scheduler subprocesses inherit it): registers vramkit_kt_compat's import hook, then
hands over to a sitecustomize this one shadows, if the interpreter has one."""
import importlib.util
import os
import sys

import vramkit_kt_compat

vramkit_kt_compat.install()

_here = os.path.dirname(os.path.abspath(__file__))
for _p in sys.path:
    if _p and os.path.abspath(_p) != _here and os.path.isfile(os.path.join(_p, "sitecustomize.py")):
        _spec = importlib.util.spec_from_file_location("_shadowed_sitecustomize", os.path.join(_p, "sitecustomize.py"))
        _spec.loader.exec_module(importlib.util.module_from_spec(_spec))
        break
