"""Rendering a bench result: markdown golden, PNG plots, the A/B table."""
from pathlib import Path

import pytest

from vramkit.bench.report import (
    build_result,
    default_label,
    render_compare_markdown,
    render_markdown,
    server_subset,
    write_compare_plot,
    write_plots,
)
from vramkit.bench.summary import compare, summarize_run

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

SERVER_INFO = {  # the fields of a real /server_info this report reads, plus noise it must drop
    "version": "0.5.15.post1", "model_path": "/models/qwen2.5-coder-14b-instruct-gptq-int4",
    "kv_cache_dtype": "fp8_e5m2", "mem_fraction_static": 0.8, "max_total_num_tokens": 30603,
    "max_req_input_len": 30597, "context_length": None, "enable_hierarchical_cache": False,
    "tp_size": 1, "api_key": None, "random_seed": 123,
    "internal_states": [{"memory_usage": {"weight": 9.41, "kvcache": 2.8, "token_capacity": 30603,
                                          "graph": 0.21}, "last_gen_throughput": 90.0}],
}


def _sample(start, ttft, latency, n, **tags):
    step = (latency - ttft) / max(n - 1, 1)
    return {"ok": True, "error": "", "timed_out": False, "input_tokens": tags.pop("inp", 512),
            "max_new_tokens": n, "prompt_tokens": tags.pop("prompt", 512), "completion_tokens": n,
            "cached_tokens": tags.pop("cached", 0), "cached_device_tokens": None,
            "cached_host_tokens": tags.pop("host", None), "num_retractions": 0, "start_s": start,
            "ttft_s": ttft, "latency_s": latency, "tpot_s": step if n > 1 else None,
            "decode_tok_s": 1 / step if n > 1 else None,
            "chunk_times_s": [ttft + i * step for i in range(n)], "chunk_tokens": list(range(1, n + 1)),
            **tags}


def _refused(start, inp, msg, **tags):
    return {"ok": False, "error": msg, "timed_out": False, "input_tokens": inp, "max_new_tokens": 5,
            "prompt_tokens": 0, "completion_tokens": 0, "cached_tokens": 0,
            "cached_device_tokens": None, "cached_host_tokens": None, "num_retractions": 0,
            "start_s": start, "ttft_s": None, "latency_s": 0.004, "tpot_s": None,
            "decode_tok_s": None, "chunk_times_s": [], "chunk_tokens": [], **tags}


def _suites(revisit_ttft: float, host: int | None) -> dict:
    refusal = ("Input length (30597 tokens) exceeds the maximum allowed length (30597 tokens). "
               "Use a shorter input or enable --allow-auto-truncate.")
    return {
        "latency": {"params": {"prompt_tokens": 512, "output_tokens": 11, "repeats": 3},
                    "truncated": False,
                    "samples": [_sample(0.0, 0.050, 0.150, 11, repeat=0),
                                _sample(1.0, 0.060, 0.160, 11, repeat=1),
                                _sample(2.0, 0.040, 0.140, 11, repeat=2)]},
        "concurrency": {"params": {"levels": [1, 2], "rounds": 1, "prompt_tokens": 1024,
                                   "output_tokens": 11}, "truncated": False,
                        "samples": [_sample(3.0, 0.05, 0.15, 11, concurrency=1, round=0, slot=0),
                                    _sample(4.0, 0.06, 0.26, 11, concurrency=2, round=0, slot=0),
                                    _sample(4.0, 0.06, 0.26, 11, concurrency=2, round=0, slot=1)]},
        "capacity": {"params": {"prompt_tokens": 8192, "output_tokens": 11, "requests": 4,
                                "kv_pool_tokens": 30603, "fit_by_pool": 3}, "truncated": False,
                     "samples": [_sample(5.0, 0.5, 1.5, 11, slot=0), _sample(5.0, 0.6, 1.6, 11, slot=1),
                                 _sample(5.0, 0.7, 1.7, 11, slot=2), _sample(5.0, 1.6, 2.6, 11, slot=3)]},
        "context": {"params": {"start_tokens": 1024, "output_tokens": 11, "max_req_input_len": 30597,
                               "max_accepted_input_tokens": 30596, "points": [1024, 30596, 30597]},
                    "truncated": False,
                    "samples": [_sample(8.0, 0.08, 0.18, 11, inp=1024, point=1024, over_limit=False),
                                _sample(9.0, 2.50, 2.54, 5, inp=30596, point=30596, over_limit=False),
                                _refused(12.0, 30597, refusal, point=30597, over_limit=True)]},
        "multiturn": {"params": {"sessions": 2, "turns": 2, "kv_pool_tokens": 30603,
                                 "history_tokens_total": 20480, "cache_flushed": True},
                      "truncated": False,
                      "samples": [
                          _sample(13.0, 1.0, 1.1, 11, inp=10752, prompt=10752, session=0, turn=0),
                          _sample(14.2, 1.1, 1.2, 11, inp=10752, prompt=10752, session=1, turn=0),
                          _sample(15.5, revisit_ttft, revisit_ttft + 0.1, 11, inp=11275,
                                  prompt=11275, cached=10752 if host else 0, host=host,
                                  session=0, turn=1),
                          _sample(16.8, revisit_ttft, revisit_ttft + 0.1, 11, inp=11275,
                                  prompt=11275, cached=10752 if host else 0, host=host,
                                  session=1, turn=1)]},
    }


def _result(label: str, revisit_ttft: float = 1.05, host: int | None = None, hicache=False) -> dict:
    server = server_subset({**SERVER_INFO, "enable_hierarchical_cache": hicache,
                            **({"hicache_size": 24} if hicache else {})})
    suites = _suites(revisit_ttft, host)
    planner = {"plan": {"perf": {"decode_tok_s_ceiling": 125.0}}}
    return build_result(label=label, url="http://127.0.0.1:30000", date_utc="2026-11-22T12:00:00+00:00",
                        tool_version="0.1.0", device_label="H100 80GB HBM3, memory emulated at 16 GB",
                        server=server, planner=planner, config={"seed": 0}, suites=suites,
                        summary=summarize_run(suites, planner))


GOLDEN = """\
# vramkit bench: baseline

2026-11-22T12:00:00+00:00 · H100 80GB HBM3, memory emulated at 16 GB · SGLang 0.5.15.post1 · vramkit bench 0.1.0

Model `/models/qwen2.5-coder-14b-instruct-gptq-int4` · KV cache fp8_e5m2 · mem fraction 0.8 · KV pool 30,603 tokens · max input 30,597 tokens · hierarchical cache off

## Single request (512 in, 11 out, 3 of 3 completed)

| metric | p50 | p95 | max |
| --- | --- | --- | --- |
| time to first token | 50.0 ms | 59.0 ms | 60.0 ms |
| time per output token | 10.0 ms | 10.0 ms | 10.0 ms |
| inter-token latency | 10.0 ms | 10.0 ms | 10.0 ms |

Single-stream decode: 100.0 tok/s (1 / TPOT, median).

## Concurrent requests (1024 in, 11 out, median of 1 round(s))

| requests | decode tok/s (aggregate) | decode tok/s (per request) | output tok/s (incl. prefill) | TTFT p50 | failed |
| --- | --- | --- | --- | --- | --- |
| 1 | 100.0 | 100.0 | 73.3 | 50.0 ms | 0 |
| 2 | 100.0 | 50.0 | 84.6 | 60.0 ms | 0 |

## Simultaneous long requests (8,192 in, 11 out)

4 sent at once (the KV pool of 30,603 tokens fits 3): at most **3** decoded at the same time; 4 completed, 0 failed, 0 retraction(s); TTFT p50 650.0 ms, max 1.60 s.

## Context sweep (up to the longest accepted prompt, 30,596 tokens)

| prompt tokens | result | TTFT (prefill) | decode tok/s | output tokens | SGLang said |
| --- | --- | --- | --- | --- | --- |
| 1,024 | completed | 80.0 ms | 100.0 | 11 |  |
| 30,596 | completed | 2.50 s | 100.0 | 5 |  |
| 30,597 | refused | - | - | 0 | Input length (30597 tokens) exceeds the maximum allowed length (30597 tokens). Use a shor… |

Longest request completed: **30,596** prompt tokens.

## Multi-turn sessions (2 sessions × 2 turns, 20,480 history tokens against a KV pool of 30,603)

| requests | TTFT p50 | TTFT p95 | prefix hit ratio |
| --- | --- | --- | --- |
| all turns | 1.05 s | 1.09 s | 0.0 % |
| revisits (turn > 0) | 1.05 s | 1.05 s | 0.0 % |

Throughput: 0.81 requests/s, 8,900 prompt tok/s over 4.95 s; 4 completed, 0 failed.

## Roofline

Single-stream decode 100.0 tok/s against a bandwidth ceiling of 125.0 tok/s (planner): **80.0 %** of the roof.
"""


def test_markdown_report_matches_golden():
    assert render_markdown(_result("baseline")) == GOLDEN


def test_server_subset_keeps_what_was_measured_and_drops_the_rest():
    s = server_subset(SERVER_INFO)
    assert s["max_total_num_tokens"] == 30603 and s["kv_cache_dtype"] == "fp8_e5m2"
    assert s["memory_usage_gb"]["weight"] == 9.41
    assert "api_key" not in s and "random_seed" not in s and "internal_states" not in s
    assert default_label(s) == "qwen2.5-coder-14b-instruct-gptq-int4-kv-fp8_e5m2-mf0.8"


def test_summary_figures():
    s = _result("x")["summary"]
    assert s["capacity"]["max_simultaneous"] == 3      # the 4th began decoding after one finished
    assert s["context"]["longest_completed_prompt_tokens"] == 30596
    assert s["roofline"]["ratio"] == pytest.approx(0.8)
    assert s["concurrency"]["levels"][1]["decode_tok_s_aggregate"] == pytest.approx(100.0)


def test_plots_are_written_as_non_empty_pngs(tmp_path: Path):
    paths = write_plots(_result("baseline"), tmp_path / "run")
    assert sorted(p.name for p in paths) == ["run-concurrency.png", "run-context.png",
                                             "run-multiturn.png"]
    for p in paths:
        data = p.read_bytes()
        assert data[:8] == PNG_MAGIC and len(data) > 5000


def test_compare_table_and_plot_for_host_cache_on_and_off(tmp_path: Path):
    off = _result("no-hicache", revisit_ttft=1.05)
    on = _result("hicache", revisit_ttft=0.21, host=10000, hicache=True)
    cmp = compare([off, on])
    row = next(r for r in cmp["rows"] if r["key"] == "mt_ttft_p50_s")
    assert row["values"] == [pytest.approx(1.05), pytest.approx(0.21)]
    assert row["change_pct"][1] == pytest.approx(-80.0)
    md = render_compare_markdown([off, on])
    assert "| multi-turn TTFT p50 (revisits) | 1.05 s | 210.0 ms (-80 %) |" in md
    assert "| multi-turn prefix hit ratio | 0.0 % | 95.4 % |" in md
    assert "Not like for like" not in md
    png = write_compare_plot([off, on], tmp_path / "ab.png")
    assert png.read_bytes()[:8] == PNG_MAGIC and png.stat().st_size > 5000


def test_compare_says_when_settings_differ():
    a, b = _result("a"), _result("b")
    b["config"] = {"seed": 1}
    assert "the runs' settings differ in `seed`" in render_compare_markdown([a, b])


def test_compare_says_when_multiturn_traffic_differs():
    a, b = _result("a"), _result("b")
    b["suites"]["multiturn"]["params"]["sessions"] = 3   # auto-sized against another KV pool
    assert "`multiturn.sessions`" in render_compare_markdown([a, b])
