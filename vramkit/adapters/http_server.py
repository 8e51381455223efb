"""The one adapter for serving HTTP: uvicorn with the connection hygiene both of the kit's servers share
(the embed service on 8002, the dashboard on 8003), and the Host-header check against DNS rebinding.

Issue 20 item 2: 19,990 bare TCP connections from another user made every keyed request fail for as long
as they were held (1,010 under systemd's default LimitNOFILE=1024): uvicorn sets no timeout on a
connection that has not sent a request, and caps nothing. Here:

- `header_timeout_s`: a connection must complete a request's headers this long after it opened (or after
  its last response); else it is closed. uvicorn's own `timeout_keep_alive` closes idle keep-alive ones.
- `max_connections`: past it, the oldest connection that has not sent a byte of a request is closed to make
  room (then the oldest idle keep-alive one): idle connections cannot crowd out a client that sends
  requests. The process raises its open-files soft limit toward 65536 (the units set LimitNOFILE=65536)
  and lowers the cap to fit what it got, so accept() never runs out of descriptors.
- `max_requests_per_client`: requests in flight per client address; more get 429 (ASGI middleware).
- uvicorn's `limit_concurrency` backs these up: past it, new requests get 503.

One `RateLimitedLog` line per window says what was refused or dropped, never a traceback per client.
"""
from __future__ import annotations

import asyncio
import importlib.util
import logging
import resource
import time
from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import Any

HEADER_TIMEOUT_S = 10.0        # a slow client on a loaded laptop sends its headers in well under a second
KEEP_ALIVE_S = 5.0             # uvicorn's default, said here once
MAX_CONNECTIONS = 4096         # far below the units' LimitNOFILE=65536; 1 fd each
MAX_REQUESTS_PER_CLIENT = 64   # in flight per client address
OPEN_FILES_WANTED = 65536      # the units' LimitNOFILE; raised toward it at start where the hard limit allows
FD_RESERVE = 256               # descriptors kept for everything but client connections
LOOPBACK_NAMES = frozenset({"127.0.0.1", "localhost", "[::1]", "::1"})


@dataclass(frozen=True)
class ConnectionLimits:
    header_timeout_s: float = HEADER_TIMEOUT_S
    keep_alive_s: float = KEEP_ALIVE_S
    max_connections: int = MAX_CONNECTIONS
    max_requests_per_client: int = MAX_REQUESTS_PER_CLIENT


class RateLimitedLog:
    """`say(text)`: the first line of a window is logged, the rest are counted and summed up in the next
    logged line (a flood of disconnects is one line per `every_s`, not megabytes of log)."""

    def __init__(self, logger: logging.Logger, every_s: float = 10.0):
        self.logger = logger
        self.every_s = every_s
        self._last = -1e9
        self._held = 0

    def say(self, text: str, level: int = logging.WARNING) -> bool:
        now = time.monotonic()
        if now - self._last < self.every_s:
            self._held += 1
            return False
        more = f" (and {self._held} more like it in the last {self.every_s:g} s)" if self._held else ""
        self._held, self._last = 0, now
        self.logger.log(level, "%s%s", text, more)
        return True


# --- the Host header (DNS rebinding) -------------------------------------------------------------------

def host_name(header: str) -> str:
    """'127.0.0.1:8002' -> '127.0.0.1', '[::1]:8002' -> '[::1]', lower-cased."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[:header.find("]") + 1] if "]" in header else header
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


def allowed_host_names(bind: str, listed: str = "") -> set[str] | None:
    """Host names a server answers to: the operator's comma-separated list, else the loopback names when it
    listens on loopback (a page that rebinds its name to 127.0.0.1 still sends its own name), else None
    (any: it listens beyond loopback, where the API key is the guard)."""
    if listed:
        return {h.strip().lower() for h in listed.split(",") if h.strip()}
    if bind in ("127.0.0.1", "::1", "localhost"):
        return set(LOOPBACK_NAMES)
    return None


def host_ok(names: set[str] | None, header: str) -> bool:
    return names is None or host_name(header) in names


# --- per-client concurrency ------------------------------------------------------------------------------

class PerClientLimit:
    """ASGI middleware: at most `limit` HTTP requests in flight per client address; more get 429."""

    def __init__(self, app: Any, limit: int, log: RateLimitedLog):
        self.app = app
        self.limit = limit
        self.log = log
        self.in_flight: dict[str, int] = {}

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or self.limit <= 0:
            await self.app(scope, receive, send)
            return
        who = (scope.get("client") or ("?", 0))[0]
        n = self.in_flight.get(who, 0)
        if n >= self.limit:
            self.log.say(f"refused a request from {who}: {n} in flight, the bound is {self.limit} (429)")
            body = (b'{"error": {"message": "too many requests in flight from your address (bound %d): '
                    b'wait for some to finish", "code": 429}}' % self.limit)
            await send({"type": "http.response.start", "status": 429,
                        "headers": [(b"content-type", b"application/json"), (b"retry-after", b"1"),
                                    (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})
            return
        self.in_flight[who] = n + 1
        try:
            await self.app(scope, receive, send)
        finally:
            left = self.in_flight[who] - 1
            if left:
                self.in_flight[who] = left
            else:
                del self.in_flight[who]


# --- the protocol: header timeout and the connection cap ------------------------------------------------

def _protocol_base() -> type:
    if importlib.util.find_spec("httptools") is None:
        raise RuntimeError("httptools is needed (pip install httptools): the connection limits hook "
                           "uvicorn's httptools protocol")
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol  # noqa: PLC0415

    return HttpToolsProtocol


def protocol_class(limits: ConnectionLimits, log: RateLimitedLog) -> type:
    """uvicorn's httptools protocol with the header timeout and the connection cap (one class per server:
    the registry of open connections is the class's own)."""
    base: Any = _protocol_base()
    fresh: OrderedDict[Any, None] = OrderedDict()     # open, no byte of a request yet: oldest first
    idle: OrderedDict[Any, None] = OrderedDict()      # open, between requests (keep-alive)
    everyone: set[Any] = set()

    class Guarded(base):
        header_timer: asyncio.TimerHandle | None = None

        def connection_made(self, transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            everyone.add(self)
            fresh[self] = None
            self._arm_header_timer()
            while len(everyone) > limits.max_connections:
                victim = next(iter(fresh), None) or next(iter(idle), None)
                if victim is None or victim is self:
                    victim = self
                log.say(f"over {limits.max_connections} open connections: closed the oldest idle one "
                        f"(from {(victim.client or ('?',))[0]})")
                victim._drop()
                if victim is self:
                    break

        def _drop(self) -> None:
            fresh.pop(self, None)
            idle.pop(self, None)
            everyone.discard(self)
            if not self.transport.is_closing():
                self.transport.close()

        def _arm_header_timer(self) -> None:
            if self.header_timer is None:
                self.header_timer = self.loop.call_later(limits.header_timeout_s, self._header_timeout)

        def _disarm_header_timer(self) -> None:
            if self.header_timer is not None:
                self.header_timer.cancel()
                self.header_timer = None

        def _header_timeout(self) -> None:
            self.header_timer = None
            log.say(f"closed a connection from {(self.client or ('?',))[0]} that sent no complete request "
                    f"headers within {limits.header_timeout_s:g} s")
            self._drop()

        def data_received(self, data: bytes) -> None:
            fresh.pop(self, None)
            idle.pop(self, None)
            super().data_received(data)

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._arm_header_timer()

        def on_headers_complete(self) -> None:
            self._disarm_header_timer()
            super().on_headers_complete()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing() and not self.pipeline:
                idle[self] = None
                self._arm_header_timer()

        def connection_lost(self, exc) -> None:
            self._disarm_header_timer()
            fresh.pop(self, None)
            idle.pop(self, None)
            everyone.discard(self)
            super().connection_lost(exc)

    Guarded.open_connections = everyone   # type: ignore[attr-defined]  # read by tests and /stats
    return Guarded


def fit_to_open_files(limits: ConnectionLimits, soft_limit: int) -> ConnectionLimits:
    """The connection cap lowered to fit the process's open-files limit, FD_RESERVE kept for everything else
    (Redis connections, the worker's pipes, logs): outside systemd a shell's 1,024 would otherwise run out
    before a cap of 4,096 is reached, and every accept() fails (issue 20 item 2)."""
    room = max(16, soft_limit - FD_RESERVE)
    if soft_limit <= 0 or limits.max_connections <= room:
        return limits
    return replace(limits, max_connections=room)


def raise_open_files_limit(want: int = OPEN_FILES_WANTED) -> int:
    """Raise this process's soft open-files limit toward `want` (as far as the hard limit allows; no
    privilege needed); the soft limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = want if hard == resource.RLIM_INFINITY else min(want, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    return soft if soft != resource.RLIM_INFINITY else 1 << 30


def uvicorn_config(app: Any, host: str, port: int, limits: ConnectionLimits | None = None,
                   log_level: str = "info", logger_name: str = "vramkit.http", **kw: Any):
    """The uvicorn.Config both servers run under (uvloop when installed). The open-files limit is raised
    toward the units' 65536 and the connection cap fitted under it."""
    import uvicorn  # noqa: PLC0415

    log = RateLimitedLog(logging.getLogger(logger_name))
    asked = limits or ConnectionLimits()
    limits = fit_to_open_files(asked, raise_open_files_limit())
    if limits.max_connections < asked.max_connections:
        log.logger.warning("at most %d open connections (not %d): the open-files limit is low; raise it "
                           "(ulimit -n, or LimitNOFILE= as the units do)", limits.max_connections,
                           asked.max_connections)
    wrapped = PerClientLimit(app, limits.max_requests_per_client, log)
    loop = "uvloop" if importlib.util.find_spec("uvloop") else "asyncio"
    kw.setdefault("access_log", False)
    return uvicorn.Config(wrapped, host=host, port=port, loop=loop, http=protocol_class(limits, log),
                          timeout_keep_alive=int(max(1, limits.keep_alive_s)),
                          limit_concurrency=limits.max_connections + 2 * limits.max_requests_per_client,
                          log_level=log_level, **kw)
