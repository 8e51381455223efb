"""The one adapter for talking HTTP to a running SGLang server (0.5.15.post1 native API).

Endpoints used (sglang/srt/entrypoints/http_server.py):
- GET /health: 503 while the server is starting or shutting down, 200 once ready.
- POST /generate: `{"input_ids" | "text", "sampling_params", "stream"}`; with stream=true an SSE stream of
  `data: {json}` events ending with `data: [DONE]`; each event's `meta_info` carries
  `completion_tokens`, `prompt_tokens`, `cached_tokens`.
- GET /server_info: server args plus scheduler info (`max_total_num_tokens`, `max_req_input_len`, ...).
  (`/get_server_info` is the same, deprecated in 0.5.15.)
- GET /v1/loads?include=core,memory: KV tokens used / available, requests running and waiting, and the
  server's own memory figures (`memory.weight_gb`, `kv_cache_gb`, `graph_gb`, GiB); no flag needed.
- GET /metrics: Prometheus text, only when the server was started with --enable-metrics (404 otherwise).
- POST /v1/chat/completions: OpenAI's chat API (messages, tools, max_tokens, stream with
  stream_options.include_usage); needs the server's tokenizer (not --skip-tokenizer-init). The last streamed
  chunk carries `usage` (prompt_tokens, completion_tokens; prompt_tokens_details.cached_tokens only with
  --enable-cache-report). A refusal is HTTP 400 `{"object": "error", "message": ...}` or a streamed `error`.
- GET/POST /flush_cache: empties the radix (prefix) cache; 200 "Cache flushed..." or 400 when requests are
  still running.

Ways SGLang refuses a streamed request (both end with `data: [DONE]`):
- the tokenizer manager's checks (input or input + max_new_tokens over the context length) raise ValueError,
  streamed as `data: {"error": {"message": ..., "type": "invalid_request_error", "code": 400}}`;
- the scheduler's checks (input >= max_req_input_len, "Input length (N tokens) exceeds the maximum allowed
  length (M tokens)...") finish the request with `meta_info.finish_reason = {"type": "abort", "message": ...,
  "status_code": 400}` and no output token.
"""
from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import httpx

from vramkit.errors import Exit, VramkitError


@dataclass
class GenerateResult:
    """One /generate call as the client saw it. Times are seconds from sending the request."""

    ok: bool
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    ttft_s: float | None = None           # first streamed chunk carrying >= 1 output token
    latency_s: float = 0.0                # whole request
    token_times_s: list[float] = field(default_factory=list)  # arrival time of each chunk's last token
    # completion_tokens as of each entry of token_times_s: a chunk can carry several tokens, and
    # SGLang's bench_serving spreads a chunk's gap evenly over them when it computes ITL.
    chunk_completion_tokens: list[int] = field(default_factory=list)
    error: str = ""
    finish_reason: dict | None = None     # meta_info.finish_reason of the last event
    num_retractions: int = 0              # times the scheduler evicted it to make room (KV pool full)
    cached_tokens_details: dict | None = None  # {"device": N, "host": M} with the hierarchical cache
    start_s: float = 0.0                  # time.perf_counter() when sent: lines up requests of one run
    timed_out: bool = False               # stopped by the client's deadline, not by the server


class SglangClient:
    def __init__(self, base_url: str = "http://127.0.0.1:30000", timeout_s: float = 600.0,
                 api_key: str | None = None):
        self.base_url = base_url.rstrip("/")
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.Client(base_url=self.base_url, timeout=timeout_s, headers=headers)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> SglangClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- readiness -------------------------------------------------------------------------
    def health(self) -> int | None:
        """HTTP status of GET /health, or None when nothing answers (not started, refused)."""
        try:
            return self._http.get("/health", timeout=5.0).status_code
        except httpx.HTTPError:
            return None

    def flush_cache(self) -> tuple[bool, str]:
        """Empty SGLang's prefix cache so a workload starts cold. (False, why) when it refused."""
        try:
            r = self._http.post("/flush_cache", timeout=30.0)
        except httpx.HTTPError as e:
            return False, f"{type(e).__name__}: {e}"
        return r.status_code == 200, r.text.strip()[:300]

    def server_info(self) -> dict:
        try:
            r = self._http.get("/server_info", timeout=30.0)
            r.raise_for_status()
            return r.json()
        except httpx.HTTPError as e:
            raise VramkitError(f"SGLang at {self.base_url} did not answer /server_info ({e})",
                               "check the server log", Exit.SERVICE_DOWN) from None

    def loads(self) -> dict | None:
        """GET /v1/loads?include=core,memory, or None when the server does not answer it."""
        try:
            r = self._http.get("/v1/loads", params={"include": "core,memory"}, timeout=10.0)
            return r.json() if r.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            return None

    def metrics_text(self) -> str | None:
        """GET /metrics (Prometheus text), or None: not started with --enable-metrics, or no answer."""
        try:
            r = self._http.get("/metrics", timeout=10.0)
            return r.text if r.status_code == 200 else None
        except httpx.HTTPError:
            return None

    # --- OpenAI chat ----------------------------------------------------------------------
    def chat(self, model: str, messages: list[dict], tools: list[dict] | None = None, max_tokens: int = 16,
             temperature: float = 0.0, deadline_s: float | None = None) -> GenerateResult:
        """One streamed /v1/chat/completions request (with usage), timed like `generate`: ttft_s is the first
        chunk that carries content, reasoning or a tool call."""
        payload: dict = {"model": model, "messages": messages, "max_tokens": max_tokens, "temperature": temperature,
                         "stream": True, "stream_options": {"include_usage": True}}
        if tools:
            payload["tools"] = tools
        timeout = self._http.timeout if deadline_s is None else httpx.Timeout(deadline_s)
        t0 = time.perf_counter()
        res = GenerateResult(ok=False, start_s=t0)
        try:
            with self._http.stream("POST", "/v1/chat/completions", json=payload, timeout=timeout) as r:
                if r.status_code != 200:
                    r.read()
                    res.error = _error_text(r.text)
                else:
                    for event in iter_sse_events(r.iter_lines()):
                        if not fold_chat_event(res, event, time.perf_counter() - t0):
                            break
                    res.ok = not res.error and res.ttft_s is not None
        except httpx.HTTPError as e:
            self._transport_failed(res, e, deadline_s)
        res.latency_s = time.perf_counter() - t0
        return res

    def _transport_failed(self, res: GenerateResult, e: httpx.HTTPError, deadline_s: float | None) -> None:
        """A request that got no (whole) answer: a timeout is said as one, any other transport error as is."""
        if isinstance(e, httpx.TimeoutException):
            res.timed_out = True
            res.error = f"{type(e).__name__}: no answer within {deadline_s or self._http.timeout.read} s"
        else:
            res.error = f"{type(e).__name__}: {e}"

    # --- generation ------------------------------------------------------------------------
    @staticmethod
    def _payload(input_ids: list[int] | None, text: str | None, max_new_tokens: int,
                 stream: bool, temperature: float, ignore_eos: bool) -> dict:
        payload: dict = {
            "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": temperature,
                                "ignore_eos": ignore_eos},
            "stream": stream,
        }
        if input_ids is not None:
            payload["input_ids"] = input_ids
        else:
            payload["text"] = text
        return payload

    def generate(self, input_ids: list[int] | None = None, text: str | None = None,
                 max_new_tokens: int = 16, temperature: float = 0.0, ignore_eos: bool = True,
                 stream: bool = True, deadline_s: float | None = None) -> GenerateResult:
        """One request; with stream=True it records time to first token and per-chunk times.

        deadline_s bounds the whole request (httpx's timeout bounds each read only, and a stream
        that keeps sending never trips it); past it the stream is closed, which makes SGLang abort
        the request, and the result says timed_out.
        """
        payload = self._payload(input_ids, text, max_new_tokens, stream, temperature, ignore_eos)
        timeout = self._http.timeout if deadline_s is None else httpx.Timeout(deadline_s)
        t0 = time.perf_counter()
        res = GenerateResult(ok=False, start_s=t0)
        try:
            if not stream:
                r = self._http.post("/generate", json=payload, timeout=timeout)
                res.latency_s = time.perf_counter() - t0
                if r.status_code != 200:
                    res.error = _error_text(r.text)
                    return res
                body = r.json()
                _fill_meta(res, body.get("meta_info", {}))
                res.ok = not res.error
                return res
            with self._http.stream("POST", "/generate", json=payload, timeout=timeout) as r:
                if r.status_code != 200:
                    r.read()
                    res.error = _error_text(r.text)
                    res.latency_s = time.perf_counter() - t0
                    return res
                for event in iter_sse_events(r.iter_lines()):
                    now = time.perf_counter() - t0
                    if not fold_stream_event(res, event, now):
                        break
                    if deadline_s is not None and now > deadline_s:
                        res.timed_out = True
                        res.error = f"client deadline of {deadline_s:g} s passed"
                        break
                res.ok = not res.error and res.completion_tokens > 0
        except httpx.HTTPError as e:
            self._transport_failed(res, e, deadline_s)
        res.latency_s = time.perf_counter() - t0
        return res


def fold_chat_event(res: GenerateResult, event: dict, now_s: float) -> bool:
    """Fold one streamed /v1/chat/completions chunk into `res`: the first chunk carrying content, reasoning or a
    tool call is the first token; the usage chunk gives the counts. False on a streamed error."""
    if "error" in event:
        err = event["error"]
        res.error = str(err.get("message", err)) if isinstance(err, dict) else str(err)
        return False
    for choice in event.get("choices") or []:
        delta = choice.get("delta") or {}
        if delta.get("content") or delta.get("reasoning_content") or delta.get("tool_calls"):
            if res.ttft_s is None:
                res.ttft_s = now_s
            res.token_times_s.append(now_s)
        if choice.get("finish_reason"):
            res.finish_reason = {"type": choice["finish_reason"]}
    usage = event.get("usage")
    if usage:
        res.prompt_tokens = int(usage.get("prompt_tokens") or 0)
        res.completion_tokens = int(usage.get("completion_tokens") or 0)
        res.cached_tokens = int((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)
    return True


def fold_stream_event(res: GenerateResult, event: dict, now_s: float) -> bool:
    """Fold one streamed /generate event, received `now_s` after sending, into `res`.

    Returns False when the event ends the request with an error (the caller stops reading).
    """
    if "error" in event:
        err = event["error"]
        res.error = str(err.get("message", err)) if isinstance(err, dict) else str(err)
        return False
    seen = res.completion_tokens
    _fill_meta(res, event.get("meta_info", {}))
    if res.completion_tokens > seen:
        if res.ttft_s is None:
            res.ttft_s = now_s
        res.token_times_s.append(now_s)
        res.chunk_completion_tokens.append(res.completion_tokens)
    return not res.error


def iter_sse_events(lines: Iterator[str]) -> Iterator[dict]:
    """Parse SGLang's `data: {...}` server-sent events; stops at `data: [DONE]`."""
    for line in lines:
        if not line.startswith("data:"):
            continue
        body = line[5:].strip()
        if body == "[DONE]":
            return
        if body:
            yield json.loads(body)


def _fill_meta(res: GenerateResult, meta: dict) -> None:
    res.prompt_tokens = int(meta.get("prompt_tokens", res.prompt_tokens) or 0)
    res.completion_tokens = int(meta.get("completion_tokens", res.completion_tokens) or 0)
    res.cached_tokens = int(meta.get("cached_tokens", res.cached_tokens) or 0)
    res.num_retractions = int(meta.get("num_retractions", res.num_retractions) or 0)
    if meta.get("cached_tokens_details"):
        res.cached_tokens_details = dict(meta["cached_tokens_details"])
    reason = meta.get("finish_reason")
    if isinstance(reason, dict):
        res.finish_reason = reason
        if reason.get("type") == "abort":
            res.error = str(reason.get("message") or "aborted by the server")


def _error_text(body: str) -> str:
    try:
        data = json.loads(body)
    except ValueError:
        return body[:300]
    if isinstance(data, dict):
        err = data.get("error", data)
        if isinstance(err, dict):
            return str(err.get("message", err))[:300]
        return str(err)[:300]
    return str(data)[:300]
