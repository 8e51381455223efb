"""`vramkit client CLIENT` (issue 21): a ready configuration whose window is the plan's longest prompt."""
from __future__ import annotations

import json

import pytest

from vramkit.cli import main
from vramkit.clients.configs import CLIENTS, OUTPUT_CAP_TOKENS, ClientTarget, output_budget, render
from vramkit.errors import Exit


@pytest.fixture(autouse=True)
def no_running_server(tmp_path, monkeypatch):
    monkeypatch.setenv("VRAMKIT_STATE_DIR", str(tmp_path / "state"))     # nothing recorded as running
    monkeypatch.delenv("VRAMKIT_API_KEY", raising=False)
    monkeypatch.delenv("VRAMKIT_PORT", raising=False)


def _json(capsys, *argv: str) -> dict:
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


def test_aider_for_the_optimized_preset_has_the_plans_longest_prompt_as_its_window(capsys):
    plan = _json(capsys, "plan", "--preset", "optimized", "--host-ram-gib", "64", "--json")
    t = _json(capsys, "client", "aider", "--preset", "optimized", "--host-ram-gib", "64", "--json")
    assert t["context_window_tokens"] == plan["max_request_tokens"]
    assert t["context_window_tokens"] < plan["kv_pool_tokens"]          # never more than the pool holds
    assert t["model"] == "qwen2.5-coder-14b" and t["tool_calls"] is True
    assert t["output_tokens"] + t["prompt_tokens"] == t["context_window_tokens"]
    assert main(["client", "aider", "--preset", "optimized", "--host-ram-gib", "64"]) == 0
    text = capsys.readouterr().out
    assert f"context window {plan['max_request_tokens']:,} tokens" in text
    metadata = json.loads(text[text.index("{"):text.rindex("}") + 1])
    assert metadata["openai/qwen2.5-coder-14b"]["max_input_tokens"] == t["prompt_tokens"]
    assert "export OPENAI_API_BASE=http://127.0.0.1:30000/v1" in text


def test_a_shorter_context_gives_a_shorter_window_within_the_pool(capsys):
    argv = ("--preset", "optimized", "--context", "8192", "--kv-dtype", "auto", "--mem-fraction", "0.75",
            "--host-ram-gib", "64", "--json")
    plan = _json(capsys, "plan", *argv)
    small = _json(capsys, "client", "openai", *argv)
    # SGLang's max_req_input_len: min(context - 1, pool - 1) - 5 (tp_worker.get_worker_info)
    assert small["context_window_tokens"] == min(plan["context_len"], plan["kv_pool_tokens"]) - 1 - 5
    assert small["context_window_tokens"] < plan["kv_pool_tokens"]
    assert small["output_tokens"] == small["context_window_tokens"] // 4


def test_output_budget_is_capped_and_a_quarter_at_most():
    assert output_budget(131_066) == OUTPUT_CAP_TOKENS
    assert output_budget(4000) == 1000
    assert output_budget(1) == 1


def _target(**over) -> ClientTarget:
    return ClientTarget(**({"base_url": "http://127.0.0.1:30000/v1", "model": "qwen2.5-coder-14b",
                            "context_window_tokens": 32762, "output_tokens": 8190, "api_key": None,
                            "tool_calls": True, "source": "test"} | over))


@pytest.mark.parametrize("client", CLIENTS)
def test_every_client_gets_the_address_the_name_and_the_window(client):
    text = render(client, _target())
    assert "http://127.0.0.1:30000/v1" in text and "qwen2.5-coder-14b" in text
    assert "32762" in text.replace(",", "") and "8190" in text


def test_continue_reserves_the_answer_out_of_the_window_and_uses_tools():
    text = render("continue", _target())
    assert "contextLength: 32762" in text and "maxTokens: 8190" in text and "capabilities: [tool_use]" in text
    assert "capabilities" not in render("continue", _target(tool_calls=False))


def test_the_api_key_is_the_one_set_in_the_environment(capsys, monkeypatch):
    monkeypatch.setenv("MY_KEY", "sk-local-123")
    t = _json(capsys, "client", "cline", "--preset", "optimized", "--host-ram-gib", "64", "--api-key-env", "MY_KEY",
              "--json")
    assert t["api_key"] == "sk-local-123"
    assert "API Key:             none" in render("cline", _target())


def test_a_plan_that_does_not_fit_is_one_line(capsys):
    assert main(["client", "aider", "--preset", "optimized", "--context", "500000", "--host-ram-gib", "64"]) \
        == Exit.NO_FIT
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "does not fit" in err


def test_no_server_of_that_name_is_one_line(capsys):
    assert main(["client", "aider", "--name", "vramkit-nosuch"]) == Exit.NOT_RUNNING
    assert "vramkit-nosuch" in capsys.readouterr().err


def test_a_server_that_does_not_answer_is_one_line(capsys):
    assert main(["client", "openai", "--url", "http://127.0.0.1:9"]) == Exit.SERVICE_DOWN
    assert capsys.readouterr().err.count("\n") == 1


def test_an_unknown_client_is_refused(capsys):
    with pytest.raises(SystemExit) as e:
        main(["client", "vim"])
    assert e.value.code == Exit.BAD_INPUT and "invalid choice: 'vim'" in capsys.readouterr().err
