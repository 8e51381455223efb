"""`vramkit.launch.cases.iter_launch_cases()` built once per test run (issue 17 item 8).

Planning every preset x model x card x tp takes seconds, and tests/integration/test_sglang_parser.py needs the
cases at collection, which pytest-xdist runs in every worker. So the first process to ask builds them and
writes them to a file named by the run (PYTEST_XDIST_TESTRUNUID, one per `pytest -n` run, under a lock);
the others read it. Without xdist: built once per process. tests/conftest.py removes the file at the end.
"""
from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import tempfile
from pathlib import Path

from vramkit.launch.cases import LaunchCaseSpec, iter_launch_cases

_CASES: list[LaunchCaseSpec] | None = None
PREFIX = "vramkit-launch-cases-"


def run_file(run_id: str) -> Path:
    return Path(tempfile.gettempdir()) / f"{PREFIX}{run_id}.json"


def _build_or_read(path: Path) -> list[LaunchCaseSpec]:
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if path.is_file():
            return [LaunchCaseSpec(**(d | {"model_config_dir": Path(d["model_config_dir"])}))
                    for d in json.loads(path.read_text())]
        cases = list(iter_launch_cases())
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps([dataclasses.asdict(c) | {"model_config_dir": str(c.model_config_dir)}
                                   for c in cases]))
        tmp.replace(path)
        return cases


def all_launch_cases() -> list[LaunchCaseSpec]:
    global _CASES
    if _CASES is None:
        run_id = os.environ.get("PYTEST_XDIST_TESTRUNUID")
        _CASES = _build_or_read(run_file(run_id)) if run_id else list(iter_launch_cases())
    return _CASES
