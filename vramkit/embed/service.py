"""Cache-then-encode: the path every embedding takes (HTTP routes and precache alike).

One MGET for the batch, duplicates encoded once, misses through the micro-batcher, one pipelined
write. Redis away: the texts are encoded and answered uncached; nothing raises.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vramkit.adapters.redis_store import RedisStore, Unavailable
from vramkit.embed.encoder import Encoder
from vramkit.embed.keys import (
    EmbedSettings,
    bytes_to_vector,
    cache_keys,
    dedupe,
    vector_to_bytes,
)
from vramkit.embed.queue import MicroBatcher
from vramkit.embed.stats import Stats


@dataclass
class EmbedResult:
    vectors: np.ndarray        # (len(texts), dim) float32, in input order
    cached: list[bool]         # per input text: came from Redis
    settings: EmbedSettings
    hits: int                  # unique texts found in Redis
    misses: int                # unique texts encoded
    redis_ok: bool             # False when Redis could not be used for this call


class EmbedService:
    def __init__(self, encoder: Encoder, batcher: MicroBatcher, store: RedisStore | None,
                 stats: Stats):
        self.encoder = encoder
        self.batcher = batcher
        self.store = store
        self.stats = stats

    async def embed(self, texts: list[str], normalize: bool = True,
                    max_seq_tokens: int | None = None, client: str = "") -> EmbedResult:
        """`client`: who asks (an address), for the queue's per-client bound."""
        settings = self.encoder.settings(normalize, max_seq_tokens)
        dim = settings.dim
        uniq, where = dedupe(texts)
        keys = cache_keys(settings, uniq)
        got = await self.store.get_many(keys) if self.store else Unavailable("no redis configured")
        cached: list[bytes | None] = [] if isinstance(got, Unavailable) else got
        redis_ok = not isinstance(got, Unavailable)
        n = len(uniq)
        if redis_ok and all(raw is not None and len(raw) == dim * 4 for raw in cached):
            # All hits: one buffer, one frombuffer, no per-vector copies.
            mat = np.frombuffer(b"".join(raw for raw in cached if raw is not None), dtype="<f4").reshape(n, dim)
            hit = [True] * n
        else:
            mat = np.empty((n, dim), dtype=np.float32)
            hit = [False] * n
            if redis_ok:
                for i, raw in enumerate(cached):
                    vec = bytes_to_vector(raw, dim)
                    if vec is not None:
                        mat[i] = vec
                        hit[i] = True
            miss = [i for i in range(n) if not hit[i]]
            new = await self.batcher.encode([uniq[i] for i in miss], normalize,
                                            settings.max_seq_tokens, client)
            mat[miss] = new
            if redis_ok and self.store is not None:
                wrote = await self.store.set_many(
                    [(keys[i], vector_to_bytes(new[j])) for j, i in enumerate(miss)])
                redis_ok = not isinstance(wrote, Unavailable)
        hits = sum(hit)
        s = self.stats
        s.texts += len(texts)
        s.hits += hits
        s.misses += n - hits
        if not redis_ok:
            s.redis_unavailable += 1
        vectors = mat if n == len(texts) and where == list(range(n)) else mat[where]
        return EmbedResult(vectors, [hit[w] for w in where], settings, hits, n - hits, redis_ok)
