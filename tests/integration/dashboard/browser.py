"""One real headless chromium for every dashboard test of a run, driven over the DevTools protocol.

Before, each page read started its own chromium (`--dump-dom` / `--screenshot`, ~1-2 s of start-up each). Here
the browser starts once (`shared()`, closed at the end of the session by the dashboard conftest) and each page
gets a fresh browser context (its own cookies and storage, as a fresh profile had) and tab. Once the page has loaded, it runs
as `--virtual-time-budget` ran it: on virtual time, paused while a network fetch is pending, until the budget
is spent; then the DOM is read as `--dump-dom` printed it, or the tab is captured as `--screenshot` did.

The protocol goes over a pipe (`--remote-debugging-pipe`: chromium reads fd 3, writes fd 4, messages are JSON
ended by a NUL byte): no port, no websocket library.
"""
from __future__ import annotations

import base64
import fcntl
import json
import os
import selectors
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

# what chromium's own --dump-dom prints (headless_command_handler: the doctype, then the root's outerHTML)
DUMP_DOM = ("(document.doctype ? new XMLSerializer().serializeToString(document.doctype) + '\\n' : '') "
            "+ document.documentElement.outerHTML")


class BrowserError(RuntimeError):
    pass


def _above_4(fd: int) -> int:
    high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return high


class Browser:
    def __init__(self, chromium: str, profile_dir: Path):
        self.profile_dir = profile_dir
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()
        # above fd 4, so that the shell's `3<&r 4>&w` cannot overwrite one end with the other
        to_chrome_r, from_chrome_w = (_above_4(fd) for fd in (to_chrome_r, from_chrome_w))
        args = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                "--no-first-run", "--no-default-browser-check", f"--user-data-dir={profile_dir}",
                "--remote-debugging-pipe", "about:blank"]
        # bash puts our two pipe ends on fds 3 and 4, where chromium expects them, then becomes chromium
        self.proc = subprocess.Popen(
            ["/bin/bash", "-c", f'exec "$@" 3<&{to_chrome_r} 4>&{from_chrome_w}', "chromium", *args],
            pass_fds=(to_chrome_r, from_chrome_w), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._buffer = b""
        self._events: list[dict[str, Any]] = []
        self._next_id = 0
        self._lock = threading.Lock()

    # -- the protocol ---------------------------------------------------------------------------
    def _read_message(self, deadline: float) -> dict[str, Any]:
        with selectors.DefaultSelector() as sel:
            sel.register(self._from_chrome, selectors.EVENT_READ)
            while b"\0" not in self._buffer:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise BrowserError("chromium did not answer in time")
                if not sel.select(min(left, 1.0)):
                    continue
                chunk = os.read(self._from_chrome, 1 << 20)
                if not chunk:
                    raise BrowserError(f"chromium exited ({self.proc.poll()})")
                self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def send(self, method: str, params: dict[str, Any] | None = None, session: str | None = None,
             timeout_s: float = 60.0) -> dict[str, Any]:
        self._next_id += 1
        mid = self._next_id
        message: dict[str, Any] = {"id": mid, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._to_chrome, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout_s
        while True:
            answer = self._read_message(deadline)
            if answer.get("id") == mid:
                if "error" in answer:
                    raise BrowserError(f"{method}: {answer['error']}")
                return answer.get("result", {})
            if "method" in answer:
                self._events.append(answer)

    def wait_event(self, method: str, session: str, timeout_s: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while True:
            for i, event in enumerate(self._events):
                if event["method"] == method and event.get("sessionId") == session:
                    return self._events.pop(i)
            message = self._read_message(deadline)
            if "method" in message:
                self._events.append(message)

    # -- a page ---------------------------------------------------------------------------------
    def _load(self, url: str, budget_ms: int, size: tuple[int, int] | None, then) -> Any:
        with self._lock:
            context = self.send("Target.createBrowserContext")["browserContextId"]
            target = self.send("Target.createTarget", {"url": "about:blank", "browserContextId": context})["targetId"]
            try:
                session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
                self.send("Page.enable", session=session)
                if size is not None:
                    self.send("Emulation.setDeviceMetricsOverride", {"width": size[0], "height": size[1],
                                                                     "deviceScaleFactor": 1, "mobile": False},
                              session=session)
                self.send("Page.navigate", {"url": url}, session=session)
                self.wait_event("Page.loadEventFired", session, timeout_s=120)
                # then the page's own work on virtual time (set before the navigation, it would not survive the
                # switch to the page's renderer process): timers run at once, paused while a fetch is pending
                self.send("Emulation.setVirtualTimePolicy",
                          {"policy": "pauseIfNetworkFetchesPending", "budget": budget_ms}, session=session)
                self.wait_event("Emulation.virtualTimeBudgetExpired", session, timeout_s=120)
                return then(session)
            finally:
                self.send("Target.closeTarget", {"targetId": target})
                self.send("Target.disposeBrowserContext", {"browserContextId": context})
                self._events = [e for e in self._events if e.get("sessionId") is None]

    def dom(self, url: str, budget_ms: int = 8000) -> str:
        """The page's DOM after its JavaScript ran, as `chromium --dump-dom --virtual-time-budget=...` prints it."""
        def read(session: str) -> str:
            result = self.send("Runtime.evaluate", {"expression": DUMP_DOM, "returnByValue": True}, session=session)
            return str(result["result"]["value"])
        return self._load(url, budget_ms, None, read)

    def screenshot(self, url: str, path: Path, size: tuple[int, int] = (1000, 900), budget_ms: int = 8000) -> Path:
        """A PNG of the page at `size`, as `chromium --screenshot --window-size=W,H` writes it."""
        def capture(session: str) -> Path:
            data = self.send("Page.captureScreenshot", {"format": "png"}, session=session)["data"]
            path.write_bytes(base64.b64decode(data))
            return path
        return self._load(url, budget_ms, size, capture)

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.send("Browser.close", timeout_s=10)
            except (BrowserError, OSError):
                pass
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        for fd in (self._to_chrome, self._from_chrome):
            try:
                os.close(fd)
            except OSError:
                pass


_SHARED: Browser | None = None


def shared(chromium: str) -> Browser:
    """The run's one browser, started on first use, its profile in a temporary folder."""
    global _SHARED
    if _SHARED is None or _SHARED.proc.poll() is not None:
        close_shared()
        _SHARED = Browser(chromium, Path(tempfile.mkdtemp(prefix="vramkit-chromium-")))
    return _SHARED


def close_shared() -> None:
    global _SHARED
    if _SHARED is not None:
        _SHARED.close()
        shutil.rmtree(_SHARED.profile_dir, ignore_errors=True)
        _SHARED = None
