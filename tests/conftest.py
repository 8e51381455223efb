"""The whole suite's scheduling (issue 17 item 8): `make test` runs it on TEST_WORKERS pytest-xdist workers.

What is expensive to set up is set up once per worker and shared (session fixtures and process-wide
singletons): the SGLang checker process (vramkit/adapters/sglang_check.py `shared_checker`), the embedding
model and the Redis-protocol server (tests/integration/embed/conftest.py), the headless browser
(tests/integration/dashboard/browser.py). So each of those must be needed by ONE worker only: the scheduler
below sends every test of a group (`GROUPS`) to the same worker, and every other test file whole to one worker
(its module fixtures are then built once). Units go out longest first (`HEAVY_FIRST`, seconds measured on the
2-core machine), so the two workers finish together instead of one waiting on a late long group.
Without xdist (`make test TEST_WORKERS=0`, or plain pytest) none of this applies and the order is pytest's.
"""
from __future__ import annotations

import uuid

import pytest

# A test file under one of these prefixes belongs to the named group: one worker runs the whole group.
GROUPS = {
    "tests/integration/test_sglang_parser.py": "sglang",             # one SGLang import: the shared checker
    "tests/integration/test_model_families_sglang.py": "sglang",
    "tests/integration/test_tool_parsers.py": "sglang",
    "tests/integration/embed/": "embed",                              # one model, one valkey-server
    "tests/integration/dashboard/": "dashboard",                      # one chromium
}
# The units that take longest, longest first (measured; the rest follow in collection order).
HEAVY_FIRST = (
    "embed",
    "tests/integration/test_kt_compat.py",
    "sglang",
    "tests/integration/test_gpu_setup.py",
    "dashboard",
    "tests/integration/test_native_start.py",
    "tests/integration/test_start_without_gpu.py",
)


def unit_of(nodeid: str) -> str:
    """The scheduling unit of a test: its group, else its file."""
    path = nodeid.split("::", 1)[0]
    for prefix, group in GROUPS.items():
        if path.startswith(prefix):
            return group
    return path


def _rank(unit: str) -> int:
    return HEAVY_FIRST.index(unit) if unit in HEAVY_FIRST else len(HEAVY_FIRST)


def pytest_collection_modifyitems(config, items):
    """Heavy units first, each unit's tests together, otherwise pytest's order (a stable sort)."""
    if getattr(config.option, "numprocesses", None):
        items.sort(key=lambda item: _rank(unit_of(item.nodeid)))


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
        for path in (run_file(run_id), run_file(run_id).with_suffix(".lock")):
            path.unlink(missing_ok=True)


try:
    from xdist.scheduler import LoadScopeScheduling
except ImportError:  # plain pytest: no workers, nothing to schedule
    LoadScopeScheduling = None

if LoadScopeScheduling is not None:
    class UnitScheduling(LoadScopeScheduling):
        """xdist's load-scope scheduling with `unit_of` as the scope, units in collection order."""

        def __init__(self, config, log=None):
            super().__init__(config, log)
            config.option.loadscopereorder = False   # keep HEAVY_FIRST's order, not "most tests first"

        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_make_scheduler(config, log):
        if config.getoption("dist") != "load":   # an explicit --dist other than -n's default: as asked
            return None
        return UnitScheduling(config, log)
