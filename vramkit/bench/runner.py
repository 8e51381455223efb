"""Runs the benchmark suites against a live SGLang server and returns every raw sample.

Each suite is bounded: a fixed number of requests, a per-request deadline, and a time budget after
which it starts no new request (it then records `truncated`). A refused or failed request is a
sample with `ok: false` and SGLang's message, never an exception. Summaries are computed from the
samples by vramkit.bench.summary, so a saved result can be re-summarised.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from typing import Protocol

from vramkit.adapters.sglang_http import GenerateResult
from vramkit.bench.workloads import (
    AGENT_TOOLS,
    ANY_MODEL_VOCAB,
    AgentTurnPlan,
    MultiturnPlan,
    agent_prefix_words,
    context_points,
    derive_seed,
    fit_history_to_limit,
    max_accepted_input_tokens,
    max_new_tokens_for,
    random_token_ids,
    sessions_to_exceed,
)
from vramkit.core.bench_stats import decode_tok_s, tpot_s

SUITES = ("latency", "concurrency", "capacity", "context", "multiturn", "agent")


@dataclass(frozen=True)
class BenchConfig:
    """Every knob of a run; `quick()` gives the short variant. Sizes are tokens, times seconds."""

    suites: tuple[str, ...] = SUITES
    vocab_size: int = ANY_MODEL_VOCAB   # token ids are drawn below it
    seed: int = 0
    request_timeout_s: float = 120.0  # one short request, whole stream
    long_request_timeout_s: float = 600.0  # context sweep / capacity: a 128K prefill with offload is slow
    # 1. latency: single request, fixed prompt
    latency_prompt_tokens: int = 512
    latency_output_tokens: int = 128
    latency_repeats: int = 5
    # 2. concurrency: decode tokens/s at N simultaneous requests
    concurrency_levels: tuple[int, ...] = (1, 2, 4, 8)
    concurrency_prompt_tokens: int = 1024
    concurrency_output_tokens: int = 256
    concurrency_rounds: int = 2
    # 3. capacity: how many 8K requests the server decodes at once
    capacity_prompt_tokens: int = 8192
    capacity_output_tokens: int = 64
    capacity_max_requests: int = 16
    # 4. context sweep
    context_start_tokens: int = 1024
    context_output_tokens: int = 64
    context_probe_over: bool = True  # one request just over the limit, to record SGLang's refusal
    # 5. multi-turn (hierarchical cache)
    multiturn_sessions: int | None = None  # None: enough to exceed the KV pool (8..32)
    multiturn_turns: int = 3
    multiturn_history_min_tokens: int = 8192
    multiturn_history_max_tokens: int = 12288
    multiturn_user_tokens: int = 512
    multiturn_answer_tokens: int = 64
    kv_pool_tokens: int | None = None  # None: /server_info max_total_num_tokens
    # 6. the agent turn (chat with tools; needs the server's tokenizer)
    agent_prefix_words: int = 8000     # at most a third of the input limit (workloads.agent_prefix_words)
    agent_message_words: int = 40
    agent_turns: int = 4
    agent_output_tokens: int = 32
    # time budgets: after this many seconds a suite starts no new request
    budget_s: dict = field(default_factory=lambda: {
        "latency": 45.0, "concurrency": 90.0, "capacity": 60.0, "context": 180.0,
        "multiturn": 150.0, "agent": 120.0})

    def quick(self) -> BenchConfig:
        """Fewer repeats and shorter outputs: a smoke run in well under a minute on an H100."""
        return replace(self, latency_repeats=3, latency_output_tokens=64,
                       concurrency_output_tokens=64, concurrency_rounds=1,
                       capacity_output_tokens=16, context_output_tokens=16,
                       multiturn_turns=2, multiturn_answer_tokens=16, agent_output_tokens=16)


class Progress(Protocol):
    def suite(self, name: str, total: int) -> None: ...
    def step(self, note: str = "") -> None: ...


class NoProgress:
    def suite(self, name: str, total: int) -> None:
        pass

    def step(self, note: str = "") -> None:
        pass


class Client(Protocol):
    def generate(self, input_ids: list[int] | None = ..., max_new_tokens: int = ...,
                 stream: bool = ..., deadline_s: float | None = ...) -> GenerateResult: ...
    def flush_cache(self) -> tuple[bool, str]: ...
    def chat(self, model: str, messages: list[dict], tools: list[dict] | None = ..., max_tokens: int = ...,
             temperature: float = ..., deadline_s: float | None = ...) -> GenerateResult: ...


def _r6(x: float | None) -> float | None:
    return None if x is None else round(x, 6)


def sample_from(res: GenerateResult, run_t0: float, input_tokens: int, max_new_tokens: int,
                **tags) -> dict:
    """One request as a JSON-ready record: what was sent, what came back, every chunk time."""
    details = res.cached_tokens_details or {}
    return {
        **tags,
        "ok": res.ok,
        "error": res.error,
        "timed_out": res.timed_out,
        "input_tokens": input_tokens,
        "max_new_tokens": max_new_tokens,
        "prompt_tokens": res.prompt_tokens,
        "completion_tokens": res.completion_tokens,
        "cached_tokens": res.cached_tokens,
        "cached_device_tokens": details.get("device"),
        "cached_host_tokens": details.get("host"),
        "num_retractions": res.num_retractions,
        "start_s": _r6(res.start_s - run_t0),
        "ttft_s": _r6(res.ttft_s),
        "latency_s": _r6(res.latency_s),
        "tpot_s": _r6(tpot_s(res.latency_s, res.ttft_s, res.completion_tokens)),
        "decode_tok_s": _r6(decode_tok_s(res.latency_s, res.ttft_s, res.completion_tokens)),
        "chunk_times_s": [_r6(t) for t in res.token_times_s],
        "chunk_tokens": list(res.chunk_completion_tokens),
    }


class BenchRunner:
    def __init__(self, client: Client, cfg: BenchConfig, server: dict,
                 progress: Progress | None = None, clock: Callable[[], float] = time.perf_counter):
        """server: /server_info (needs max_req_input_len; max_total_num_tokens for the KV pool)."""
        self.client = client
        self.cfg = cfg
        self.server = server
        self.progress = progress or NoProgress()
        self.clock = clock
        self.t0 = clock()

    # --- helpers -------------------------------------------------------------------------------
    def _ids(self, n: int, *label) -> list[int]:
        return random_token_ids(n, self.cfg.vocab_size, derive_seed(self.cfg.seed, *label))

    def _one(self, ids: list[int], max_new: int, timeout_s: float, **tags) -> dict:
        t_send = self.clock()
        try:
            res = self.client.generate(input_ids=ids, max_new_tokens=max_new, stream=True,
                                       deadline_s=timeout_s)
        except Exception as e:  # noqa: BLE001 - a malformed answer is a failed sample, not a crash
            res = GenerateResult(ok=False, start_s=t_send, error=f"{type(e).__name__}: {e}",
                                 latency_s=self.clock() - t_send)
        return sample_from(res, self.t0, len(ids), max_new, **tags)

    def _together(self, batch: list[tuple[list[int], int, dict]], timeout_s: float) -> list[dict]:
        """Send every request of `batch` at the same instant (one thread each) and wait for all."""
        gate = threading.Barrier(len(batch))

        def go(item):
            ids, max_new, tags = item
            gate.wait()
            out = self._one(ids, max_new, timeout_s, **tags)
            self.progress.step()
            return out

        with ThreadPoolExecutor(max_workers=len(batch)) as pool:
            return list(pool.map(go, batch))

    def _over_budget(self, suite: str, started: float) -> bool:
        return self.clock() - started > self.cfg.budget_s.get(suite, float("inf"))

    @property
    def max_req_input_len(self) -> int:
        return int(self.server["max_req_input_len"])

    @property
    def kv_pool_tokens(self) -> int:
        return int(self.cfg.kv_pool_tokens or self.server.get("max_total_num_tokens") or 0)

    def warmup(self) -> None:
        """One short request first, so the first measured one pays no one-time start cost."""
        self.client.generate(input_ids=self._ids(128, "warmup"), max_new_tokens=8, stream=True,
                             deadline_s=self.cfg.request_timeout_s)

    # --- suites --------------------------------------------------------------------------------
    def run(self) -> dict:
        """Run the configured suites in order; returns {suite: {"params", "samples", ...}}."""
        out = {}
        self.warmup()
        for name in self.cfg.suites:
            started = self.clock()
            suite = getattr(self, f"suite_{name}")()
            suite["wall_s"] = round(self.clock() - started, 3)
            out[name] = suite
        return out

    def suite_latency(self) -> dict:
        c = self.cfg
        self.progress.suite("latency", c.latency_repeats)
        started, samples, truncated = self.clock(), [], False
        for i in range(c.latency_repeats):
            if self._over_budget("latency", started):
                truncated = True
                break
            ids = self._ids(c.latency_prompt_tokens, "latency", i)
            samples.append(self._one(ids, c.latency_output_tokens, c.request_timeout_s, repeat=i))
            self.progress.step()
        return {"params": {"prompt_tokens": c.latency_prompt_tokens,
                           "output_tokens": c.latency_output_tokens, "repeats": c.latency_repeats},
                "samples": samples, "truncated": truncated}

    def suite_concurrency(self) -> dict:
        c = self.cfg
        self.progress.suite("concurrency", sum(c.concurrency_levels) * c.concurrency_rounds)
        started, samples, truncated = self.clock(), [], False
        for rnd in range(c.concurrency_rounds):
            for level in c.concurrency_levels:
                if self._over_budget("concurrency", started):
                    truncated = True
                    break
                batch = [(self._ids(c.concurrency_prompt_tokens, "concurrency", rnd, level, k),
                          c.concurrency_output_tokens, {"concurrency": level, "round": rnd, "slot": k})
                         for k in range(level)]
                samples += self._together(batch, c.request_timeout_s)
        return {"params": {"levels": list(c.concurrency_levels), "rounds": c.concurrency_rounds,
                           "prompt_tokens": c.concurrency_prompt_tokens,
                           "output_tokens": c.concurrency_output_tokens},
                "samples": samples, "truncated": truncated}

    def suite_capacity(self) -> dict:
        """Send one more request of prompt_tokens than the KV pool can hold at once, all together;
        the most that decoded at the same time is the server's simultaneous-request capacity."""
        c = self.cfg
        prompt = min(c.capacity_prompt_tokens, max_accepted_input_tokens(self.max_req_input_len))
        max_new = max_new_tokens_for(prompt, self.max_req_input_len, c.capacity_output_tokens)
        fits = self.kv_pool_tokens // (prompt + max_new) if self.kv_pool_tokens else 1
        n = max(2, min(c.capacity_max_requests, fits + 1))
        self.progress.suite("capacity", n)
        batch = [(self._ids(prompt, "capacity", k), max_new, {"slot": k}) for k in range(n)]
        samples = self._together(batch, c.long_request_timeout_s)
        return {"params": {"prompt_tokens": prompt, "output_tokens": max_new, "requests": n,
                           "kv_pool_tokens": self.kv_pool_tokens, "fit_by_pool": fits},
                "samples": samples, "truncated": False}

    def suite_context(self) -> dict:
        """Prompt lengths doubling up to the longest SGLang admits (always tried, budget or not),
        then one token over it to record the refusal."""
        c = self.cfg
        longest = max_accepted_input_tokens(self.max_req_input_len)
        points = context_points(longest, c.context_start_tokens)
        probes = points + ([longest + 1] if c.context_probe_over else [])
        self.progress.suite("context", len(probes))
        started, samples, truncated = self.clock(), [], False
        for n in probes:
            is_edge = n >= longest
            if not is_edge and self._over_budget("context", started):
                truncated = True
                self.progress.step("skipped")
                continue
            max_new = max_new_tokens_for(n, self.max_req_input_len, c.context_output_tokens)
            samples.append(self._one(self._ids(n, "context", n), max_new, c.long_request_timeout_s,
                                     point=n, over_limit=n > longest))
            self.progress.step(f"{n} tokens")
        return {"params": {"start_tokens": c.context_start_tokens,
                           "output_tokens": c.context_output_tokens,
                           "max_req_input_len": self.max_req_input_len,
                           "max_accepted_input_tokens": longest, "points": probes},
                "samples": samples, "truncated": truncated}

    def multiturn_plan(self) -> MultiturnPlan:
        c = self.cfg
        mean_hist = (c.multiturn_history_min_tokens + c.multiturn_history_max_tokens) // 2
        sessions = c.multiturn_sessions or sessions_to_exceed(self.kv_pool_tokens, mean_hist)
        plan = MultiturnPlan(sessions=sessions, turns=c.multiturn_turns,
                             history_min_tokens=c.multiturn_history_min_tokens,
                             history_max_tokens=c.multiturn_history_max_tokens,
                             user_chunk_tokens=c.multiturn_user_tokens,
                             answer_tokens=c.multiturn_answer_tokens,
                             vocab_size=c.vocab_size, seed=c.seed)
        return fit_history_to_limit(plan, max_accepted_input_tokens(self.max_req_input_len))

    def suite_multiturn(self) -> dict:
        c = self.cfg
        plan = self.multiturn_plan()
        flushed, flush_msg = self.client.flush_cache()  # both A/B runs start from an empty cache
        self.progress.suite("multiturn", plan.sessions * plan.turns)
        started, samples, truncated = self.clock(), [], False
        for session, turn, ids in plan.requests():
            if self._over_budget("multiturn", started):
                truncated = True
                break
            samples.append(self._one(ids, plan.answer_tokens, c.long_request_timeout_s,
                                     session=session, turn=turn))
            self.progress.step(f"s{session} t{turn}")
        return {"params": {**asdict(plan), "kv_pool_tokens": self.kv_pool_tokens,
                           "history_tokens_total": plan.total_history_tokens(),
                           "cache_flushed": flushed, "flush_message": flush_msg},
                "samples": samples, "truncated": truncated}

    # --- the agent turn (issue 21) -------------------------------------------------------------
    def agent_plan(self) -> AgentTurnPlan:
        c = self.cfg
        return AgentTurnPlan(prefix_words=agent_prefix_words(self.max_req_input_len, c.agent_prefix_words),
                             message_words=c.agent_message_words, turns=c.agent_turns, seed=c.seed)

    def suite_agent(self) -> dict:
        """A coding agent's loop through OpenAI's chat API with tools: an empty cache, then turns that re-send
        the whole session plus a short new part (warm: the prefix cache holds all but that part); then the
        last turn once more after a cache flush (cold) and once more again (warm), so the same prompt is timed
        both ways; last, one request twice the server's input limit, to record SGLang's refusal."""
        c = self.cfg
        plan = self.agent_plan()
        params = {**asdict(plan), "tools": len(AGENT_TOOLS), "output_tokens": c.agent_output_tokens,
                  "max_req_input_len": self.max_req_input_len}
        if self.server.get("skip_tokenizer_init"):
            return {"params": params, "samples": [], "truncated": False,
                    "skipped": "the server runs with --skip-tokenizer-init: chat requests need its tokenizer"}
        model = str(self.server.get("served_model_name") or "default")
        tools = [dict(t) for t in AGENT_TOOLS]
        last = plan.turns - 1
        steps = [(t, "cold" if t == 0 else "warm", False) for t in range(plan.turns)]
        steps += [(last, "cold-repeat", True), (last, "warm-repeat", False)]
        self.progress.suite("agent", len(steps) + 1)
        flushed, flush_msg = self.client.flush_cache()
        started, samples, truncated = self.clock(), [], False
        for turn, phase, flush in steps:
            if self._over_budget("agent", started):
                truncated = True
                break
            if flush:
                flushed = self.client.flush_cache()[0] and flushed
            samples.append(self._chat(model, plan.messages(turn), tools, c.agent_output_tokens,
                                      turn=turn, phase=phase, words=plan.words(turn)))
            self.progress.step(f"{phase} t{turn}")
        # twice the input limit in words: over it at any tokenizer (each word is at least one token)
        over = AgentTurnPlan(prefix_words=2 * self.max_req_input_len, message_words=c.agent_message_words,
                             turns=1, seed=c.seed)
        samples.append(self._chat(model, over.messages(0), tools, c.agent_output_tokens, turn=0,
                                  phase="over-limit", words=over.words(0)))
        self.progress.step("over the limit")
        return {"params": {**params, "cache_flushed": flushed, "flush_message": flush_msg},
                "samples": samples, "truncated": truncated}

    def _chat(self, model: str, messages: list[dict], tools: list[dict], max_tokens: int, **tags) -> dict:
        t_send = self.clock()
        try:
            res = self.client.chat(model, messages, tools=tools, max_tokens=max_tokens,
                                   deadline_s=self.cfg.long_request_timeout_s)
        except Exception as e:  # noqa: BLE001 - a malformed answer is a failed sample, not a crash
            res = GenerateResult(ok=False, start_s=t_send, error=f"{type(e).__name__}: {e}",
                                 latency_s=self.clock() - t_send)
        return sample_from(res, self.t0, res.prompt_tokens, max_tokens, **tags)
