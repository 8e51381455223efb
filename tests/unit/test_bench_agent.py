"""The agent-turn workload (issue 21): a long fixed prefix with tools, each turn re-sending the session plus a short
new part, and its summary (cold vs warm time to first token, the over-limit refusal)."""
from __future__ import annotations

from vramkit.bench.runner import BenchConfig, BenchRunner
from vramkit.bench.summary import summarize_agent
from vramkit.bench.workloads import AGENT_LEXICON, AGENT_TOOLS, AgentTurnPlan, agent_prefix_words, seeded_words


def test_each_turn_extends_the_last_so_the_prefix_cache_can_serve_it():
    p = AgentTurnPlan(prefix_words=200, message_words=10, turns=4)
    for t in range(1, p.turns):
        before, now = p.messages(t - 1), p.messages(t)
        assert now[:len(before)] == before                 # everything sent before is sent again, unchanged
        assert len(now) == len(before) + 3                 # the call, its result, a new instruction
    assert p.messages(3) == AgentTurnPlan(prefix_words=200, message_words=10, turns=4).messages(3)   # seeded
    assert p.messages(0)[0] != AgentTurnPlan(prefix_words=200, message_words=10, seed=1).messages(0)[0]


def test_word_counts_and_the_lexicon():
    p = AgentTurnPlan(prefix_words=300, message_words=20, turns=3)
    system = p.messages(0)[0]["content"]
    assert len(system.split()) == 300 + 5                  # "You are a coding agent." + the prefix
    assert p.words(2) == 300 + 20 * 7
    assert set(seeded_words(500, 1).split()) <= set(AGENT_LEXICON)
    assert len(AGENT_LEXICON) == len(set(AGENT_LEXICON))
    assert {t["function"]["name"] for t in AGENT_TOOLS} == {"read_file", "edit_file", "run_command"}


def test_the_prefix_leaves_room_under_the_input_limit():
    assert agent_prefix_words(32762) == 7280               # a third of the limit at 1.5 tokens per word
    assert agent_prefix_words(131066) == 8000              # capped at the wanted size
    assert agent_prefix_words(100) == 64


def _sample(phase, ttft, ok=True, error="", turn=0, prompt=1000):
    return {"phase": phase, "ttft_s": ttft, "ok": ok, "error": error, "turn": turn, "prompt_tokens": prompt}


def test_summary_compares_the_same_prompt_cold_and_warm():
    suite = {"params": {"turns": 3, "prefix_words": 7000}, "samples": [
        _sample("cold", 0.50), _sample("warm", 0.06, turn=1), _sample("warm", 0.08, turn=2),
        _sample("cold-repeat", 0.60, turn=2), _sample("warm-repeat", 0.05, turn=2),
        _sample("over-limit", None, ok=False, error="Input length (65536 tokens) exceeds the maximum allowed length")]}
    s = summarize_agent(suite)
    assert s["ttft_cold_s"] == 0.50 and s["ttft_warm_s"]["p50"] == 0.07
    assert abs(s["prefix_cache_speedup"] - 12.0) < 1e-9
    assert s["over_limit_refused"] and "exceeds" in s["over_limit_error"]
    assert s["failed"] == 0


def test_an_over_limit_request_that_is_served_is_reported_as_not_refused():
    suite = {"params": {"turns": 1, "prefix_words": 10}, "samples": [_sample("cold", 0.1),
                                                                      _sample("over-limit", 0.2)]}
    assert summarize_agent(suite)["over_limit_refused"] is False


def test_a_server_without_a_tokenizer_is_skipped_with_the_reason():
    runner = BenchRunner(client=None, cfg=BenchConfig(suites=("agent",)),   # type: ignore[arg-type]
                         server={"max_req_input_len": 32762, "skip_tokenizer_init": True})
    suite = runner.suite_agent()
    assert suite["samples"] == [] and "skip-tokenizer-init" in suite["skipped"]
    assert "skipped" in summarize_agent(suite)
