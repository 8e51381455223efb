"""The one module that talks to Redis (or any Redis-protocol server) for the embedding cache.

Every call returns a value or `UNAVAILABLE`, never raises a connection error: the service keeps
answering uncached while Redis is away and uses the cache again by itself when it returns.
After a failure the store stays "down" for `retry_after_s` so requests do not each pay a
connect timeout; the next call after that window (or a /health ping) tries again.

Round trips: a batch lookup is one MGET; the writes of a batch are one pipeline of
`SET key value [EX ttl]` (no MULTI: atomicity is not needed, one round trip is).
"""
from __future__ import annotations

import time
from typing import cast

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from vramkit.core.na import NotAvailable

# Redis could not be used for this call: the kit's one "not available" type (falsy, so `if result:` reads
# as "got something"; `reason` is the error text for /health and logs).
Unavailable = NotAvailable
UNAVAILABLE = NotAvailable("redis unavailable")


def redact_url(url: str) -> str:
    """The URL without its password, for logs and /health."""
    if "@" not in url:
        return url
    scheme, rest = url.split("://", 1) if "://" in url else ("", url)
    return f"{scheme}://***@{rest.rsplit('@', 1)[1]}"


class RedisStore:
    def __init__(self, url: str, ttl_s: int | None = None, timeout_s: float = 0.5,
                 retry_after_s: float = 1.0):
        self.url = url
        self.ttl_s = ttl_s if ttl_s and ttl_s > 0 else None
        self.retry_after_s = retry_after_s
        self._down_until = 0.0
        self.last_error = ""
        # One quick retry: after a Redis restart the first command on a pooled connection fails
        # with a reset; the retry reconnects. redis-py's default backs off for seconds instead.
        self._r = aioredis.Redis.from_url(
            url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s,
            retry=Retry(NoBackoff(), 1), health_check_interval=0)

    # --- state -----------------------------------------------------------------------------
    @property
    def available(self) -> bool:
        """False while inside the back-off window after a failure."""
        return time.monotonic() >= self._down_until

    def _fail(self, err: Exception) -> Unavailable:
        self._down_until = time.monotonic() + self.retry_after_s
        self.last_error = f"{type(err).__name__}: {err}"
        return Unavailable(self.last_error)

    def _ok(self) -> None:
        self._down_until = 0.0
        self.last_error = ""

    # --- cache -----------------------------------------------------------------------------
    async def get_many(self, keys: list[bytes]) -> list[bytes | None] | Unavailable:
        if not keys:
            return []
        if not self.available:
            return Unavailable(self.last_error or "redis unavailable")
        try:
            values = await self._r.mget(keys)
        except (RedisError, OSError) as err:
            return self._fail(err)
        self._ok()
        return cast(list[bytes | None], values)     # bytes: the client decodes nothing (decode_responses off)

    async def set_many(self, items: list[tuple[bytes, bytes]]) -> int | Unavailable:
        """Store the pairs in one round trip (TTL in the same SET); returns how many were sent."""
        if not items:
            return 0
        if not self.available:
            return Unavailable(self.last_error or "redis unavailable")
        try:
            pipe = self._r.pipeline(transaction=False)
            for key, value in items:
                pipe.set(key, value, ex=self.ttl_s)
            await pipe.execute()
        except (RedisError, OSError) as err:
            return self._fail(err)
        self._ok()
        return len(items)

    # --- health and counts ---------------------------------------------------------------------
    async def ping(self) -> bool:
        """A real PING, ignoring the back-off window (this is how recovery is noticed)."""
        try:
            ok = bool(await self._r.ping())
        except (RedisError, OSError) as err:
            self._fail(err)
            return False
        self._ok()
        return ok

    async def counts(self) -> dict | Unavailable:
        """Keys in the database (DBSIZE) and bytes Redis holds (INFO memory used_memory)."""
        if not self.available:
            return Unavailable(self.last_error or "redis unavailable")
        try:
            pipe = self._r.pipeline(transaction=False)
            pipe.dbsize()
            pipe.info("memory")
            keys, mem = await pipe.execute()
        except (RedisError, OSError) as err:
            return self._fail(err)
        self._ok()
        return {"keys": int(keys), "used_memory_bytes": int(mem.get("used_memory", 0)),
                "maxmemory_bytes": int(mem.get("maxmemory", 0)),
                "maxmemory_policy": str(mem.get("maxmemory_policy", ""))}

    async def close(self) -> None:
        try:
            await self._r.aclose()
        except (RedisError, OSError):
            pass
