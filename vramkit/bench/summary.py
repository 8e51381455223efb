"""Summaries of a run's raw samples (pure: dicts in, dicts out), and the headline figures that
`--compare` sets side by side. Re-running these on a saved result gives the same summary."""
from __future__ import annotations

from vramkit.core.bench_stats import (
    aggregate_decode_tok_s,
    change_pct,
    itls_s,
    max_overlap,
    percentile,
    prefix_hit_ratio,
    roofline_ratio,
    summarize,
)


def _ok(samples: list[dict]) -> list[dict]:
    return [s for s in samples if s.get("ok")]


def _vals(samples: list[dict], key: str) -> list[float]:
    return [s[key] for s in samples if s.get(key) is not None]


def _p50(values: list[float]) -> float | None:
    return percentile(values, 50) if values else None


def _decode_span(s: dict) -> tuple[float, float, int] | None:
    """(first token, end, output tokens) on the run's clock, for requests that streamed a token."""
    if s.get("ttft_s") is None:
        return None
    return (s["start_s"] + s["ttft_s"], s["start_s"] + s["latency_s"], s["completion_tokens"])


def summarize_latency(suite: dict) -> dict:
    ok = _ok(suite["samples"])
    itl: list[float] = []
    for s in ok:
        itl += itls_s(s["chunk_times_s"], s["chunk_tokens"])
    return {
        **suite["params"],
        "ok": len(ok), "failed": len(suite["samples"]) - len(ok),
        "ttft_s": summarize(_vals(ok, "ttft_s")),
        "tpot_s": summarize(_vals(ok, "tpot_s")),
        "itl_s": summarize(itl),
        "decode_tok_s_p50": _p50(_vals(ok, "decode_tok_s")),
        "errors": sorted({s["error"] for s in suite["samples"] if s.get("error")}),
    }


def summarize_concurrency(suite: dict) -> dict:
    levels = []
    for level in suite["params"]["levels"]:
        rounds = sorted({s["round"] for s in suite["samples"] if s["concurrency"] == level})
        agg, per_req, out_tok_s, ttft, n_ok, n_all = [], [], [], [], 0, 0
        for rnd in rounds:
            group = [s for s in suite["samples"] if s["concurrency"] == level and s["round"] == rnd]
            ok = _ok(group)
            n_all += len(group)
            n_ok += len(ok)
            spans = [sp for sp in map(_decode_span, ok) if sp]
            a = aggregate_decode_tok_s(spans)
            if a is not None:
                agg.append(a)
            per_req += _vals(ok, "decode_tok_s")
            ttft += _vals(ok, "ttft_s")
            if ok:
                wall = (max(s["start_s"] + s["latency_s"] for s in ok)
                        - min(s["start_s"] for s in ok))
                if wall > 0:
                    out_tok_s.append(sum(s["completion_tokens"] for s in ok) / wall)
        if not n_all:
            continue
        levels.append({
            "concurrency": level, "ok": n_ok, "failed": n_all - n_ok,
            "decode_tok_s_aggregate": _p50(agg),          # median over rounds
            "decode_tok_s_per_request": _p50(per_req),    # median over requests
            "output_tok_s": _p50(out_tok_s),              # incl. prefill time
            "ttft_s_p50": _p50(ttft),
        })
    return {**suite["params"], "levels": levels,
            "errors": sorted({s["error"] for s in suite["samples"] if s.get("error")})}


def summarize_capacity(suite: dict) -> dict:
    ok = _ok(suite["samples"])
    spans = [sp for sp in map(_decode_span, ok) if sp]
    return {
        **suite["params"],
        "ok": len(ok), "failed": len(suite["samples"]) - len(ok),
        # most requests decoding at one instant: first token to last token
        "max_simultaneous": max_overlap([(a, b) for a, b, _ in spans]) if spans else 0,
        "retractions": sum(s.get("num_retractions") or 0 for s in suite["samples"]),
        "ttft_s": summarize(_vals(ok, "ttft_s")),
        "errors": sorted({s["error"] for s in suite["samples"] if s.get("error")}),
    }


def summarize_context(suite: dict) -> dict:
    points = []
    for s in suite["samples"]:
        points.append({
            "prompt_tokens": s["input_tokens"], "ok": s["ok"], "over_limit": s.get("over_limit", False),
            "ttft_s": s.get("ttft_s"), "decode_tok_s": s.get("decode_tok_s"),
            "output_tokens": s.get("completion_tokens"), "error": s.get("error", ""),
            "timed_out": s.get("timed_out", False),
        })
    done = [p["prompt_tokens"] for p in points if p["ok"]]
    return {**suite["params"], "points": points,
            "longest_completed_prompt_tokens": max(done) if done else None}


def summarize_multiturn(suite: dict) -> dict:
    samples = suite["samples"]
    ok = _ok(samples)
    revisit = [s for s in ok if s["turn"] > 0]
    wall = 0.0
    if ok:
        wall = max(s["start_s"] + s["latency_s"] for s in ok) - min(s["start_s"] for s in ok)
    p = suite["params"]
    host = [s["cached_host_tokens"] for s in ok if s.get("cached_host_tokens") is not None]
    return {
        "sessions": p["sessions"], "turns": p["turns"], "kv_pool_tokens": p["kv_pool_tokens"],
        "history_tokens_total": p["history_tokens_total"], "cache_flushed": p.get("cache_flushed"),
        "ok": len(ok), "failed": len(samples) - len(ok),
        "ttft_s": summarize(_vals(ok, "ttft_s")),
        # turns > 0 re-send a history seen before: where a prefix cache can help
        "ttft_revisit_s": summarize(_vals(revisit, "ttft_s")),
        "prefix_hit_ratio": prefix_hit_ratio([s["cached_tokens"] for s in ok],
                                             [s["prompt_tokens"] for s in ok]),
        "revisit_hit_ratio": prefix_hit_ratio([s["cached_tokens"] for s in revisit],
                                              [s["prompt_tokens"] for s in revisit]),
        "host_hit_tokens": sum(host) if host else None,
        "wall_s": wall,
        "requests_per_s": len(ok) / wall if wall > 0 else None,
        "prompt_tok_s": sum(s["prompt_tokens"] for s in ok) / wall if wall > 0 else None,
        "errors": sorted({s["error"] for s in samples if s.get("error")}),
    }


def summarize_agent(suite: dict) -> dict:
    """The agent turn: cold vs warm time to first token, and the same prompt timed both ways."""
    if suite.get("skipped"):
        return {"skipped": suite["skipped"]}
    samples = suite["samples"]
    by_phase: dict[str, list[dict]] = {}
    for s in samples:
        by_phase.setdefault(s["phase"], []).append(s)

    def ttft(phase: str) -> float | None:
        ok = _ok(by_phase.get(phase, []))
        return ok[0]["ttft_s"] if ok else None

    warm = _ok(by_phase.get("warm", []))
    cold_repeat, warm_repeat = ttft("cold-repeat"), ttft("warm-repeat")
    over = by_phase.get("over-limit", [])
    return {
        "turns": suite["params"]["turns"], "prefix_words": suite["params"]["prefix_words"],
        "prompt_tokens": [s["prompt_tokens"] for s in samples if s.get("phase") != "over-limit"],
        "ttft_cold_s": ttft("cold"),
        "ttft_warm_s": summarize(_vals(warm, "ttft_s")),
        "last_turn_ttft_cold_s": cold_repeat, "last_turn_ttft_warm_s": warm_repeat,
        # how much faster the first token comes when the session's prefix is cached (same prompt, measured)
        "prefix_cache_speedup": (cold_repeat / warm_repeat if cold_repeat and warm_repeat else None),
        "over_limit_refused": bool(over) and not over[0]["ok"],
        "over_limit_error": over[0]["error"] if over else None,
        "failed": sum(1 for s in samples if not s["ok"] and s.get("phase") != "over-limit"),
        "errors": sorted({s["error"] for s in samples if s.get("error") and s.get("phase") != "over-limit"}),
    }


SUMMARIZERS = {
    "latency": summarize_latency,
    "concurrency": summarize_concurrency,
    "capacity": summarize_capacity,
    "context": summarize_context,
    "multiturn": summarize_multiturn,
    "agent": summarize_agent,
}


def find_key(obj, key: str):
    """First value under `key` anywhere in nested dicts/lists (the planner JSON's layout may nest it)."""
    if isinstance(obj, dict):
        if key in obj:
            return obj[key]
        obj = list(obj.values())
    if isinstance(obj, list):
        for v in obj:
            found = find_key(v, key)
            if found is not None:
                return found
    return None


def single_stream_decode_tok_s(summary: dict) -> float | None:
    """Single-stream decode tokens/s: the latency suite's median, else concurrency 1's."""
    lat = summary.get("latency") or {}
    if lat.get("decode_tok_s_p50") is not None:
        return lat["decode_tok_s_p50"]
    for lvl in (summary.get("concurrency") or {}).get("levels", []):
        if lvl["concurrency"] == 1:
            return lvl["decode_tok_s_per_request"]
    return None


def summarize_run(suites: dict, planner: dict | None = None,
                  ceiling_tok_s: float | None = None) -> dict:
    """Summary of every suite present, plus the roofline against the planner's decode ceiling."""
    summary = {name: SUMMARIZERS[name](suite) for name, suite in suites.items() if name in SUMMARIZERS}
    source = "flag" if ceiling_tok_s else None
    if not ceiling_tok_s and planner:
        ceiling_tok_s = find_key(planner, "decode_tok_s_ceiling")
        source = "planner" if ceiling_tok_s else None
    measured = single_stream_decode_tok_s(summary)
    summary["roofline"] = {
        "single_stream_decode_tok_s": measured,
        "decode_tok_s_ceiling": ceiling_tok_s,
        "ceiling_source": source,
        "ratio": roofline_ratio(measured, ceiling_tok_s),
    }
    return summary


# --- headline figures, for the A/B table ----------------------------------------------------------
def _level(summary: dict, c: int, key: str):
    for lvl in (summary.get("concurrency") or {}).get("levels", []):
        if lvl["concurrency"] == c:
            return lvl.get(key)
    return None


def _get(d: dict | None, *path):
    for p in path:
        if not isinstance(d, dict):
            return None
        d = d.get(p)
    return d


# (key, label, unit, better: "lower" | "higher" | None)
HEADLINES = [
    ("kv_pool_tokens", "KV pool", "tokens", "higher"),
    ("ttft_p50_s", "TTFT p50 (single request)", "s", "lower"),
    ("tpot_p50_s", "TPOT p50 (single request)", "s", "lower"),
    ("decode_tok_s_1", "decode tok/s, 1 request", "tok/s", "higher"),
    ("decode_tok_s_2", "decode tok/s, 2 requests (aggregate)", "tok/s", "higher"),
    ("decode_tok_s_4", "decode tok/s, 4 requests (aggregate)", "tok/s", "higher"),
    ("decode_tok_s_8", "decode tok/s, 8 requests (aggregate)", "tok/s", "higher"),
    ("max_simultaneous", "simultaneous long requests", "requests", "higher"),
    ("longest_completed", "longest request completed", "tokens", "higher"),
    ("mt_ttft_p50_s", "multi-turn TTFT p50 (revisits)", "s", "lower"),
    ("mt_ttft_p95_s", "multi-turn TTFT p95 (revisits)", "s", "lower"),
    ("mt_requests_per_s", "multi-turn throughput", "req/s", "higher"),
    ("mt_hit_ratio", "multi-turn prefix hit ratio", "share", "higher"),
    ("roofline_ratio", "decode / bandwidth ceiling", "share", "higher"),
]


def headline(result: dict) -> dict:
    """The figures worth comparing between runs, by HEADLINES key (None where not measured)."""
    s = result.get("summary", {})
    server = result.get("server", {})
    return {
        "kv_pool_tokens": server.get("max_total_num_tokens"),
        "ttft_p50_s": _get(s, "latency", "ttft_s", "p50"),
        "tpot_p50_s": _get(s, "latency", "tpot_s", "p50"),
        "decode_tok_s_1": single_stream_decode_tok_s(s),
        "decode_tok_s_2": _level(s, 2, "decode_tok_s_aggregate"),
        "decode_tok_s_4": _level(s, 4, "decode_tok_s_aggregate"),
        "decode_tok_s_8": _level(s, 8, "decode_tok_s_aggregate"),
        "max_simultaneous": _get(s, "capacity", "max_simultaneous"),
        "longest_completed": _get(s, "context", "longest_completed_prompt_tokens"),
        "mt_ttft_p50_s": _get(s, "multiturn", "ttft_revisit_s", "p50"),
        "mt_ttft_p95_s": _get(s, "multiturn", "ttft_revisit_s", "p95"),
        "mt_requests_per_s": _get(s, "multiturn", "requests_per_s"),
        "mt_hit_ratio": _get(s, "multiturn", "revisit_hit_ratio"),
        "roofline_ratio": _get(s, "roofline", "ratio"),
    }


MULTITURN_TRAFFIC_KEYS = ("sessions", "turns", "history_min_tokens", "history_max_tokens",
                          "user_chunk_tokens", "answer_tokens", "vocab_size", "seed")


def compare(results: list[dict]) -> dict:
    """Headline figures of each run and each one's change against the first (the baseline)."""
    heads = [headline(r) for r in results]
    rows = []
    for key, label, unit, better in HEADLINES:
        values = [h[key] for h in heads]
        if all(v is None for v in values):
            continue
        rows.append({"key": key, "label": label, "unit": unit, "better": better, "values": values,
                     "change_pct": [change_pct(values[0], v) for v in values]})
    # settings as asked for, plus the multi-turn plan as resolved (its session count follows each
    # server's KV pool unless pinned with --sessions): an A/B of the host cache needs identical traffic
    configs = [{**(r.get("config") or {}),
                **{f"multiturn.{k}": v for k, v in
                   ((r.get("suites") or {}).get("multiturn") or {}).get("params", {}).items()
                   if k in MULTITURN_TRAFFIC_KEYS}}
               for r in results]
    differs = sorted(k for k in set().union(*configs)
                     if k not in ("suites", "kv_pool_tokens")
                     and len({repr(c.get(k)) for c in configs}) > 1)
    return {"labels": [r.get("label", f"run {i}") for i, r in enumerate(results)], "rows": rows,
            "config_differs": differs}
