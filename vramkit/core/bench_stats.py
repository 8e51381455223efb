"""Benchmark statistics: plain numbers in, plain numbers out (no HTTP, no clock, no numpy).

Definitions follow SGLang's own serving benchmark (sglang/benchmark/serving.py, 0.5.15.post1) so our
figures can be set beside its:
- TTFT: time from sending the request to the first streamed chunk that carries an output token.
- TPOT (time per output token): (latency - ttft) / (output_tokens - 1); undefined for one token.
- ITL (inter-token latency): the gap between consecutive chunks, spread evenly over the tokens the
  later chunk brought (a chunk can carry several tokens).
Single-stream decode tokens/s is 1 / TPOT.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100), linear interpolation between closest ranks.

    Same as numpy.percentile's default method ('linear'): rank = q/100 * (n - 1).
    NaN for an empty sequence.
    """
    if not values:
        return math.nan
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile q={q} is outside 0..100")
    xs = sorted(values)
    rank = q / 100.0 * (len(xs) - 1)
    lo = math.floor(rank)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (rank - lo)


def summarize(values: Sequence[float]) -> dict[str, Any]:
    """n, mean, min, p50, p95, p99, max of a sample; None for each statistic of an empty one."""
    if not values:
        return {"n": 0, "mean": None, "min": None, "p50": None, "p95": None, "p99": None,
                "max": None}
    return {
        "n": len(values),
        "mean": sum(values) / len(values),
        "min": min(values),
        "p50": percentile(values, 50),
        "p95": percentile(values, 95),
        "p99": percentile(values, 99),
        "max": max(values),
    }


def tpot_s(latency_s: float, ttft_s: float | None, output_tokens: int) -> float | None:
    """Time per output token after the first: (latency - ttft) / (output_tokens - 1).

    None when it is undefined: no first token, or a single output token.
    """
    if ttft_s is None or output_tokens < 2:
        return None
    return (latency_s - ttft_s) / (output_tokens - 1)


def decode_tok_s(latency_s: float, ttft_s: float | None, output_tokens: int) -> float | None:
    """One request's decode rate, 1 / TPOT: tokens after the first over the time after the first."""
    t = tpot_s(latency_s, ttft_s, output_tokens)
    return None if t is None or t <= 0 else 1.0 / t


def itls_s(chunk_times_s: Sequence[float], chunk_completion_tokens: Sequence[int]) -> list[float]:
    """Inter-token latencies of one streamed request, as SGLang's bench_serving computes them.

    chunk_times_s[i] is when chunk i arrived, chunk_completion_tokens[i] the completion tokens
    counted so far at it. Each later chunk's gap is split evenly over the tokens it brought.
    """
    if len(chunk_times_s) != len(chunk_completion_tokens):
        raise ValueError("chunk times and token counts differ in length")
    out: list[float] = []
    for i in range(1, len(chunk_times_s)):
        new_tokens = chunk_completion_tokens[i] - chunk_completion_tokens[i - 1]
        if new_tokens <= 0:
            continue
        gap = chunk_times_s[i] - chunk_times_s[i - 1]
        out.extend([gap / new_tokens] * new_tokens)
    return out


def aggregate_decode_tok_s(requests: Sequence[tuple[float, float, int]]) -> float | None:
    """Decode tokens/s of requests served together, from (first_token_at_s, end_at_s, output_tokens).

    Times are on one clock. Tokens after each request's first, summed, over the span from the
    earliest first token to the last finish: what the GPU produced while decoding that batch. Unlike
    a sum of per-request rates it does not count overlap that did not happen (requests the server
    ran one after another). None when no token followed a first token.
    """
    if not requests:
        return None
    tokens = sum(max(n - 1, 0) for _, _, n in requests)
    span = max(end for _, end, _ in requests) - min(first for first, _, _ in requests)
    if tokens == 0 or span <= 0:
        return None
    return tokens / span


def max_overlap(intervals: Sequence[tuple[float, float]]) -> int:
    """Most intervals (start, end) open at one instant; an end and a start at the same time don't overlap.

    Used for "simultaneous requests": the most requests that were decoding at once.
    """
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals],
                    key=lambda ev: (ev[0], ev[1]))
    best = cur = 0
    for _, step in events:
        cur += step
        best = max(best, cur)
    return best


def prefix_hit_ratio(cached_tokens: Sequence[int], prompt_tokens: Sequence[int]) -> float | None:
    """Share of prompt tokens SGLang served from its prefix cache (device + host), over all requests."""
    total = sum(prompt_tokens)
    return None if total <= 0 else sum(cached_tokens) / total


def roofline_ratio(measured_tok_s: float | None, ceiling_tok_s: float | None) -> float | None:
    """Measured single-stream decode tokens/s as a share of the bandwidth ceiling (1.0 = at the roof)."""
    if measured_tok_s is None or not ceiling_tok_s or ceiling_tok_s <= 0:
        return None
    return measured_tok_s / ceiling_tok_s


def ecdf(values: Sequence[float]) -> tuple[list[float], list[float]]:
    """Empirical CDF: sorted values and the share of samples at or below each (k/n)."""
    xs = sorted(values)
    n = len(xs)
    return xs, [(i + 1) / n for i in range(n)]


def change_pct(before: float | None, after: float | None) -> float | None:
    """Relative change from `before` to `after` in percent (negative = lower); None if undefined."""
    if before is None or after is None or before == 0:
        return None
    return (after - before) / before * 100.0
