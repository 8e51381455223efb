"""The whole suite's scheduling (issue 17 item 8): `make test` runs it on TEST_WORKERS pytest-xdist workers.

What is expensive to set up is set up once and shared (session fixtures and process-wide singletons): the
SGLang checker process (vramkit/adapters/sglang_check.py `shared_checker`), the embedding model and the
Redis-protocol server (tests/integration/embed/conftest.py `encoder`, `valkey`), the headless browser
(tests/integration/dashboard/browser.py). So each must be needed by ONE worker only: every test that uses one
of them belongs to that set-up's group (`group_of`, decided in the workers, which see each test's fixtures), and
the scheduler below sends a group whole to one worker, every other test file whole to one worker (its module
fixtures are then built once). Units go out longest first (`HEAVY_FIRST`, measured on the 2-core machine), so
the two workers finish together instead of one waiting on a late long unit.
(xdist's own `--dist loadgroup` cannot carry the groups: it renames node ids, which pytest 9 no longer
allows, so the workers write each test's unit to a file of the run that the scheduler reads.)
Without xdist (`make test TEST_WORKERS=0`, or plain pytest) none of this applies and the order is pytest's.
"""
from __future__ import annotations

import json
import tempfile
import uuid
from pathlib import Path

import pytest

SGLANG_FILES = ("tests/integration/test_sglang_parser.py", "tests/integration/test_model_families_sglang.py",
                "tests/integration/test_tool_parsers.py", "tests/integration/test_dummy_weights.py",
                "tests/integration/test_gpu_prefill_sglang.py")
# The units that take longest, longest first (measured; the rest follow in collection order).
HEAVY_FIRST = (
    "embed-model",
    "dashboard",
    "tests/integration/test_gpu_setup.py",
    "tests/integration/embed/test_embed_faults.py",
    "tests/integration/embed/test_embed_security.py",
    "sglang",
    "tests/integration/test_models_by_name.py",
    "tests/integration/embed/test_embed_abuse.py",
    "tests/integration/test_kt_compat.py",
    "tests/integration/test_native_start.py",
    "tests/integration/test_service_units.py",
    "tests/integration/test_start_without_gpu.py",
    # the unit tier's longest files (`make test-unit`: collection order put test_render.py last, and one
    # worker ran it alone at the end)
    "tests/unit/test_render.py",
    "tests/unit/test_vram_safe.py",
    "tests/unit/test_moe_hybrid.py",
    "tests/unit/test_gpu_reports.py",
    "tests/unit/test_planner.py",
    "tests/unit/test_host_command.py",
    "tests/unit/test_knobs.py",
    "tests/unit/test_input_holes.py",
    "tests/unit/test_monitor_command.py",
)


def group_of(item: pytest.Item) -> str | None:
    """The shared set-up a test needs, if any: its tests run in one worker."""
    path = item.nodeid.split("::", 1)[0]
    if {"encoder", "valkey"} & set(getattr(item, "fixturenames", ())):
        return "embed-model"            # one model, one valkey-server
    if path in SGLANG_FILES or "pinned_transformers" in getattr(item, "fixturenames", ()):
        return "sglang"                 # one SGLang import: the shared checker
    if path.startswith("tests/integration/dashboard/"):
        return "dashboard"              # one chromium
    return None


def _rank(unit: str) -> int:
    return HEAVY_FIRST.index(unit) if unit in HEAVY_FIRST else len(HEAVY_FIRST)


def units_file(run_id: str, worker: str) -> Path:
    return Path(tempfile.gettempdir()) / f"vramkit-test-units-{run_id}-{worker}.json"


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """In an xdist worker: each test's unit (its group, else its file) written for the scheduler, then heavy
    units first (a stable sort: otherwise pytest's order)."""
    if not hasattr(config, "workerinput"):
        return
    units = {item.nodeid: group_of(item) or item.nodeid.split("::", 1)[0] for item in items}
    path = units_file(config.workerinput["testrunuid"], config.workerinput["workerid"])
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(units))
    tmp.replace(path)
    items.sort(key=lambda item: _rank(units[item.nodeid]))


def _controller(config) -> bool:
    return bool(getattr(config.option, "numprocesses", None)) and not hasattr(config, "workerinput")


def pytest_configure(config):
    """The controller names the run itself (xdist's --testrunuid, else a random one xdist would make): the
    workers share files named by it (launch_cases_once.py), and the controller removes them at the end."""
    if _controller(config) and config.getoption("testrunuid", None) is None:
        config.option.testrunuid = uuid.uuid4().hex


def pytest_sessionfinish(session):
    """The controller of a pytest-xdist run removes the run's shared launch-case file (launch_cases_once.py)."""
    run_id = session.config.getoption("testrunuid", None) if _controller(session.config) else None
    if run_id:
        from launch_cases_once import run_file
        for path in (run_file(run_id), run_file(run_id).with_suffix(".lock"),
                     *Path(tempfile.gettempdir()).glob(units_file(run_id, "*").name)):
            path.unlink(missing_ok=True)


try:
    from xdist.scheduler import LoadScopeScheduling
except ImportError:  # plain pytest: no workers, nothing to schedule
    LoadScopeScheduling = None

if LoadScopeScheduling is not None:
    class UnitScheduling(LoadScopeScheduling):
        """xdist's load-scope scheduling with the workers' units as the scopes, in collection order."""

        def __init__(self, config, log=None):
            super().__init__(config, log)
            config.option.loadscopereorder = False   # keep HEAVY_FIRST's order, not "most tests first"
            self._units: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self._units is None:       # every worker has collected (and written its file) by now
                self._units = {}
                run_id = self.config.getoption("testrunuid")
                for path in Path(tempfile.gettempdir()).glob(units_file(run_id, "*").name):
                    self._units.update(json.loads(path.read_text()))
            return self._units.get(nodeid) or nodeid.split("::", 1)[0]

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_make_scheduler(config, log):
        if config.getoption("dist") != "load":   # -n's default; another --dist: xdist's own
            return None
        return UnitScheduling(config, log)
