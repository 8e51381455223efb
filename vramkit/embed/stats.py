"""Counters and latencies of the embed service: one record that both /stats and /metrics read.

Latency percentiles are over the last `window` requests (a ring), measured inside the handler
from the first byte of the parsed body to the response object (HTTP framing excluded).
The Prometheus histogram keeps cumulative bucket counts since start.
"""
from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field

from vramkit.core.bench_stats import percentile

LATENCY_BUCKETS_S = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


@dataclass
class Stats:
    window: int = 10_000
    started_at: float = field(default_factory=time.time)
    requests: int = 0            # /embed and /v1/embeddings calls that returned vectors
    errors: int = 0              # 4xx/5xx answers of those routes
    texts: int = 0               # texts asked for (duplicates counted)
    hits: int = 0                # unique texts found in Redis
    misses: int = 0              # unique texts encoded
    redis_unavailable: int = 0   # requests served uncached because Redis was away
    latencies_s: deque = field(default_factory=deque)
    bucket_counts: list[int] = field(default_factory=lambda: [0] * (len(LATENCY_BUCKETS_S) + 1))
    latency_sum_s: float = 0.0

    def observe(self, seconds: float) -> None:
        self.requests += 1
        self.latency_sum_s += seconds
        lat = self.latencies_s
        lat.append(seconds)
        if len(lat) > self.window:
            lat.popleft()
        for i, edge in enumerate(LATENCY_BUCKETS_S):
            if seconds <= edge:
                self.bucket_counts[i] += 1
                return
        self.bucket_counts[-1] += 1

    def snapshot(self) -> dict:
        lat = list(self.latencies_s)
        looked_up = self.hits + self.misses

        def ms(q: float) -> float | None:
            # the kit's one percentile (numpy's default, linear between ranks)
            return round(percentile(lat, q) * 1000, 3) if lat else None

        return {
            "uptime_s": round(time.time() - self.started_at, 1),
            "requests": self.requests, "errors": self.errors, "texts": self.texts,
            "hits": self.hits, "misses": self.misses,
            "hit_ratio": round(self.hits / looked_up, 4) if looked_up else None,
            "redis_unavailable_requests": self.redis_unavailable,
            "latency_ms": {"p50": ms(50), "p95": ms(95), "p99": ms(99), "window": len(lat)},
        }


class StatsCollector:
    """prometheus_client collector that renders `Stats` at scrape time (no second set of counters)."""

    def __init__(self, stats: Stats, extra=None):
        self.stats = stats
        self.extra = extra   # callable -> dict of gauges (name -> (help, value)) read at scrape time

    def collect(self):
        from prometheus_client.core import (  # noqa: PLC0415
            CounterMetricFamily,
            GaugeMetricFamily,
            HistogramMetricFamily,
        )

        s = self.stats
        for name, help_, value in (
            ("vramkit_embed_requests", "embedding requests answered", s.requests),
            ("vramkit_embed_errors", "embedding requests refused or failed", s.errors),
            ("vramkit_embed_texts", "texts asked for, duplicates included", s.texts),
            ("vramkit_embed_cache_hits", "unique texts served from Redis", s.hits),
            ("vramkit_embed_cache_misses", "unique texts encoded by the model", s.misses),
            ("vramkit_embed_redis_unavailable", "requests served uncached, Redis away",
             s.redis_unavailable),
        ):
            yield CounterMetricFamily(name, help_, value=value)
        buckets, running = [], 0
        for edge, count in zip(LATENCY_BUCKETS_S, s.bucket_counts, strict=False):
            running += count
            buckets.append((repr(edge), running))
        buckets.append(("+Inf", running + s.bucket_counts[-1]))
        yield HistogramMetricFamily("vramkit_embed_request_seconds",
                                    "handler time of embedding requests",
                                    buckets=buckets, sum_value=s.latency_sum_s)
        for name, (help_, value) in (self.extra() if self.extra else {}).items():
            if value is not None:
                yield GaugeMetricFamily(name, help_, value=value)
