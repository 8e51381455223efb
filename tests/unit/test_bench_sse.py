"""Parsing SGLang 0.5.15.post1's streamed /generate answer, from bytes shaped as its server writes them.

http_server.py `generate_request`: each event is `b"data: " + orjson.dumps(out) + b"\\n\\n"`, the stream
ends with `b"data: [DONE]\\n\\n"`. With --skip-tokenizer-init, `out` is
{"output_ids": [...all so far...], "meta_info": {...}} (tokenizer_manager `_handle_batch_output`).
Scheduler refusals end the request with finish_reason {"type": "abort", ...}; tokenizer-manager
refusals (ValueError) are streamed as {"error": {...}}.
"""
import json

import httpx
import pytest

from vramkit.adapters.sglang_http import GenerateResult, fold_stream_event, iter_sse_events
from vramkit.core.bench_stats import itls_s, tpot_s


def _event(obj) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def _meta(completion, finish=None, cached=0, **extra):
    return {"id": "8f1c", "finish_reason": finish, "prompt_tokens": 512, "weight_version": "default",
            "num_retractions": 0, "reasoning_tokens": 0, "completion_tokens": completion,
            "cached_tokens": cached, **extra}


def _lines(blob: bytes, cut: int = 7):
    """httpx's own line splitting over the bytes, arriving in awkward pieces (mid-line, mid-UTF-8)."""
    pieces = (blob[i:i + cut] for i in range(0, len(blob), cut))
    return httpx.Response(200, content=pieces).iter_lines()


def _fold(blob: bytes, times):
    res = GenerateResult(ok=False)
    for event, now in zip(iter_sse_events(_lines(blob)), times, strict=True):
        if not fold_stream_event(res, event, now):
            break
    res.ok = not res.error and res.completion_tokens > 0
    return res


def test_a_normal_stream_gives_ttft_chunk_times_and_counts():
    ids = []
    blob = b""
    # 4 chunks: 1 token, 1 token, 2 tokens (a chunk can carry several), 1 token + finish
    for n_new, finish in ((1, None), (1, None), (2, None), (1, {"type": "length", "length": 5})):
        ids = ids + [151] * n_new
        meta = _meta(len(ids), finish, cached=256,
                     cached_tokens_details={"device": 192, "host": 64})
        if finish:
            meta["e2e_latency"] = 0.31
        blob += _event({"output_ids": ids, "meta_info": meta})
    blob += b"data: [DONE]\n\n"
    res = _fold(blob, [0.10, 0.12, 0.16, 0.18])
    assert res.ok and res.error == ""
    assert res.ttft_s == 0.10
    assert res.token_times_s == [0.10, 0.12, 0.16, 0.18]
    assert res.chunk_completion_tokens == [1, 2, 4, 5]
    assert (res.prompt_tokens, res.completion_tokens, res.cached_tokens) == (512, 5, 256)
    assert res.cached_tokens_details == {"device": 192, "host": 64}
    assert res.finish_reason == {"type": "length", "length": 5}
    assert itls_s(res.token_times_s, res.chunk_completion_tokens) == pytest.approx(
        [0.02, 0.02, 0.02, 0.02])
    assert tpot_s(0.18, res.ttft_s, res.completion_tokens) == pytest.approx(0.02)


def test_scheduler_refusal_is_a_failed_sample_with_sglangs_message():
    msg = ("Input length (60000 tokens) exceeds the maximum allowed length (30597 tokens). "
           "Use a shorter input or enable --allow-auto-truncate.")
    blob = _event({"output_ids": [], "meta_info": _meta(
        0, {"type": "abort", "message": msg, "status_code": 400, "err_type": None})})
    blob += b"data: [DONE]\n\n"
    res = _fold(blob, [0.004])
    assert not res.ok
    assert res.error == msg
    assert res.ttft_s is None and res.token_times_s == []


def test_tokenizer_manager_refusal_arrives_as_an_error_event():
    msg = "The input (40000 tokens) is longer than the model's context length (32768 tokens)."
    blob = _event({"error": {"message": msg, "type": "invalid_request_error", "code": 400,
                             "retryable": False}}) + b"data: [DONE]\n\n"
    res = _fold(blob, [0.002])
    assert not res.ok and res.error == msg


def test_events_stop_at_done_and_skip_blank_and_comment_lines():
    lines = ["", ": keep-alive", 'data: {"a":1}', "", "data: [DONE]", 'data: {"b":2}']
    assert list(iter_sse_events(iter(lines))) == [{"a": 1}]


def test_a_chunk_repeating_the_count_adds_no_token_time():
    blob = (_event({"output_ids": [1], "meta_info": _meta(1)})
            + _event({"output_ids": [1], "meta_info": _meta(1)})
            + _event({"output_ids": [1, 2], "meta_info": _meta(2, {"type": "length", "length": 2})})
            + b"data: [DONE]\n\n")
    res = _fold(blob, [0.1, 0.11, 0.2])
    assert res.token_times_s == [0.1, 0.2] and res.chunk_completion_tokens == [1, 2]
