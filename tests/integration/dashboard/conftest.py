"""Fixtures for the dashboard tests: the real CLI started as a person starts it, the app under uvicorn in
this process (so NVML can be faked at the hardware boundary), and the real headless chromium."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

pytest.importorskip("fastapi", reason="dashboard extra not installed: pip install -e '.[dashboard]'")
pytest.importorskip("uvicorn", reason="dashboard extra not installed: pip install -e '.[dashboard]'")

from . import browser  # noqa: E402

REPO = Path(__file__).resolve().parents[3]
# the NVML situations faked at the hardware boundary live beside the unit tests
if str(REPO / "tests" / "unit") not in sys.path:
    sys.path.insert(0, str(REPO / "tests" / "unit"))
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_health(url: str, proc: subprocess.Popen | None = None, timeout_s: float = 30.0, headers=None) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"dashboard exited ({proc.returncode}): {proc.stdout.read() if proc.stdout else ''}")
        try:
            if httpx.get(url + "/health", timeout=1.0, headers=headers or {}).status_code in (200, 401):
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"{url}/health did not answer in {timeout_s} s")


@pytest.fixture
def state_dir(tmp_path, monkeypatch) -> Path:
    """The kit's state folder, empty: no running server recorded (and none of the user's)."""
    d = tmp_path / "state"
    monkeypatch.setenv("VRAMKIT_STATE_DIR", str(d))
    return d


def start_cli(*args: str, env: dict | None = None) -> tuple[subprocess.Popen, str]:
    """`python -m vramkit dashboard --port P ...` in the foreground, as `make dashboard` runs it."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "vramkit", "dashboard", "--port", str(port), *args],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, **(env or {})})
    url = f"http://127.0.0.1:{port}"
    try:
        wait_health(url, proc)
    except AssertionError:
        proc.kill()
        raise
    return proc, url


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


@pytest.fixture
def dashboard_cli(state_dir):
    procs = []

    def start(*args: str, env: dict | None = None) -> str:
        proc, url = start_cli(*args, env=env)
        procs.append(proc)
        return url

    yield start
    for p in procs:
        stop(p)


class InProcess:
    """The app under a real uvicorn server in a thread of this process."""

    def __init__(self, app):
        import uvicorn
        self.port = free_port()
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        url = f"http://127.0.0.1:{self.port}"
        wait_health(url)
        return url

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(10)


@pytest.fixture(scope="session", autouse=True)
def _one_browser():
    """The run's one chromium (browser.py), started by the first page read, closed after the last test."""
    yield
    browser.close_shared()


def chromium_dom(url: str, tmp_path: Path, budget_ms: int = 8000) -> str:
    """The page's DOM after its JavaScript ran, from the real headless chromium (one for the whole run; each
    page in a fresh browser context)."""
    if CHROMIUM is None:
        pytest.skip("chromium not installed (make setup-test-tools installs it)")
    return browser.shared(CHROMIUM).dom(url, budget_ms)


def chromium_screenshot(url: str, path: Path, tmp_path: Path, size: str = "1000,900") -> Path:
    if CHROMIUM is None:
        pytest.skip("chromium not installed (make setup-test-tools installs it)")
    width, height = (int(x) for x in size.split(","))
    return browser.shared(CHROMIUM).screenshot(url, path, (width, height))
