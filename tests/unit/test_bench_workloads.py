"""Workloads are deterministic (two runs send identical traffic) and respect SGLang's input limits."""
import subprocess
import sys
from pathlib import Path

import pytest

from vramkit.bench.workloads import (
    MultiturnPlan,
    context_points,
    derive_seed,
    fit_history_to_limit,
    max_accepted_input_tokens,
    max_new_tokens_for,
    random_token_ids,
    sessions_to_exceed,
)


def test_same_seed_same_ids_other_seed_other_ids():
    a = random_token_ids(4096, 151000, derive_seed(0, "latency", 1))
    assert a == random_token_ids(4096, 151000, derive_seed(0, "latency", 1))
    b = random_token_ids(4096, 151000, derive_seed(0, "latency", 2))
    assert a[:8] != b[:8]
    assert all(0 <= t < 151000 for t in a)


def test_ids_are_the_same_in_another_process_with_another_hash_salt():
    code = ("from vramkit.bench.workloads import *;"
            "print(random_token_ids(64, 151000, derive_seed(3, 'multiturn', 'history', 5, 0)))")
    runs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={"PYTHONHASHSEED": salt, "PATH": ""},
                           cwd=Path(__file__).resolve().parents[2]).stdout
            for salt in ("1", "2")}
    assert len(runs) == 1
    assert runs.pop().strip() == str(random_token_ids(64, 151000,
                                                      derive_seed(3, "multiturn", "history", 5, 0)))


def test_bad_sizes_are_refused():
    with pytest.raises(ValueError):
        random_token_ids(-1, 100, 0)
    with pytest.raises(ValueError):
        random_token_ids(10, 1, 0)


def test_context_points_double_then_end_on_the_exact_maximum():
    # the emulated-16 GB fp8 server of shared/gpu/README.md: max_req_input_len 30597
    longest = max_accepted_input_tokens(30597)
    assert longest == 30596
    assert context_points(longest) == [1024, 2048, 4096, 8192, 16384, 30596]
    assert context_points(4096) == [1024, 2048, 4096]
    assert context_points(500) == [500]


def test_output_request_stays_inside_sglang_limits():
    # max_req_len = max_req_input_len + 5; the scheduler clips max_new_tokens to max_req_len - input - 1
    assert max_new_tokens_for(1024, 30597, 64) == 64
    assert max_new_tokens_for(30596, 30597, 64) == 5
    assert max_new_tokens_for(30601, 30597, 64) == 1


def test_multiturn_round_robin_and_each_turn_extends_the_last():
    plan = MultiturnPlan(sessions=3, turns=3, history_min_tokens=100, history_max_tokens=200,
                         user_chunk_tokens=10, answer_tokens=5, vocab_size=1000, seed=1)
    reqs = list(plan.requests())
    assert [(s, t) for s, t, _ in reqs] == [(s, t) for t in range(3) for s in range(3)]
    by_session = {}
    for s, _t, ids in reqs:
        by_session.setdefault(s, []).append(ids)
    for s, prompts in by_session.items():
        assert len(prompts[0]) == plan.history_tokens(s) + 10
        for earlier, later in zip(prompts, prompts[1:], strict=False):
            assert later[: len(earlier)] == earlier          # whole history re-sent
            assert len(later) == len(earlier) + 5 + 10       # + answer + new user chunk
    assert max(len(ids) for _, _, ids in reqs) == plan.longest_prompt_tokens()
    assert [plan.history_tokens(s) for s in range(3)] == [100, 150, 200]
    # sessions do not share a prefix: a hit can only come from a session's own history
    assert by_session[0][0][:16] != by_session[1][0][:16]


def test_multiturn_traffic_is_identical_for_the_same_plan():
    plan = MultiturnPlan(sessions=2, turns=2, history_min_tokens=50, history_max_tokens=60, seed=9)
    assert list(plan.requests()) == list(MultiturnPlan(**plan.__dict__).requests())
    other = MultiturnPlan(**{**plan.__dict__, "seed": 10})
    assert list(plan.requests())[0][2] != list(other.requests())[0][2]


def test_sessions_exceed_the_kv_pool_within_bounds():
    # 16 GB emulation, fp16 KV: 15,493 tokens; 8 sessions of ~10K already exceed it
    assert sessions_to_exceed(15493, 10240) == 8
    n = sessions_to_exceed(200_000, 10240)
    assert n * 10240 > 200_000 and n <= 32
    assert sessions_to_exceed(10_000_000, 10240) == 32


def test_histories_shrink_to_fit_the_input_limit():
    plan = MultiturnPlan(sessions=4, turns=3, history_min_tokens=8192, history_max_tokens=12288,
                         user_chunk_tokens=512, answer_tokens=64)
    fitted = fit_history_to_limit(plan, 10000)
    assert fitted.longest_prompt_tokens() <= 10000
    assert fitted.history_min_tokens <= fitted.history_max_tokens
    assert fit_history_to_limit(plan, 100_000) is plan


def test_any_model_vocab_is_below_every_catalogued_vocabulary():
    from vramkit import catalog
    from vramkit.bench.workloads import ANY_MODEL_VOCAB
    assert ANY_MODEL_VOCAB <= min(m.vocab_size for m in catalog.models().values())
