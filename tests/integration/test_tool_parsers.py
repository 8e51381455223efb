"""Each catalogued family's tool-call and reasoning output, as its model card documents it, through the pinned
SGLang's own parser classes under the parser name the kit renders for that family (issue 21). No mock of SGLang:
the shared checker worker (vramkit/adapters/_sglang_check_worker.py, in .venv-sglang) builds
`FunctionCallParser(tools, name)` / `ReasoningParser(name)` as SGLang's OpenAI chat endpoint does, parses each
text whole and streamed (the `stream: true` path), and answers the structured calls.

One worker process for the module: every parse and the two launch controls ride one SGLang import.
"""
from __future__ import annotations

import json

import pytest

from vramkit import catalog
from vramkit.adapters import sglang_check
from vramkit.adapters.sglang_check import LaunchCase, ParseCase

pytestmark = pytest.mark.sglang


def _fn(name: str, **props: str) -> dict:
    return {"type": "function", "function": {"name": name, "parameters": {
        "type": "object", "properties": {k: {"type": t} for k, t in props.items()}, "required": list(props)}}}


# Qwen's function-calling guide (qwen.readthedocs.io, "Function Calling", the Qwen2.5 template; Qwen3 keeps it):
WEATHER_TOOLS = [_fn("get_current_temperature", location="string", unit="string"),
                 _fn("get_temperature_date", location="string", date="string", unit="string")]
CODE_TOOLS = [_fn("read_file", path="string", line="integer")]
# per family: (tools, the model's output, the calls it must become: (name, arguments))
TOOL_SAMPLES: dict[str, tuple[list, str, list[tuple[str, dict]]]] = {
    # Qwen2.5(-Coder) Instruct: one <tool_call> JSON block per call (hermes style), parallel calls allowed
    "qwen2.5": (WEATHER_TOOLS,
                '<tool_call>\n{"name": "get_current_temperature", "arguments": {"location": "San Francisco, CA, USA"}}\n'
                '</tool_call>\n<tool_call>\n{"name": "get_temperature_date", "arguments": {"location": "San Francisco, '
                'CA, USA", "date": "2024-10-01"}}\n</tool_call>',
                [("get_current_temperature", {"location": "San Francisco, CA, USA"}),
                 ("get_temperature_date", {"location": "San Francisco, CA, USA", "date": "2024-10-01"})]),
    # Qwen3 (after its </think>, which the reasoning parser has taken off): the same JSON blocks
    "qwen3": (WEATHER_TOOLS,
              '<tool_call>\n{"name": "get_current_temperature", "arguments": {"location": "Paris, France", '
              '"unit": "celsius"}}\n</tool_call>',
              [("get_current_temperature", {"location": "Paris, France", "unit": "celsius"})]),
    # Qwen3-Coder's chat template (its model card's tool-use section): XML, one <parameter=...> per argument,
    # values converted by the tool's schema (42 is an integer because `line` is declared one)
    "qwen3-coder": (CODE_TOOLS,
                    "I will read it.\n<tool_call>\n<function=read_file>\n<parameter=path>\nsrc/app.py\n</parameter>\n"
                    "<parameter=line>\n42\n</parameter>\n</function>\n</tool_call>",
                    [("read_file", {"path": "src/app.py", "line": 42})]),
    # Llama 3.1's prompt-format guide (JSON-based tool calling): the call is the whole answer, "parameters"
    "llama3.1": ([_fn("get_current_conditions", location="string", unit="string")],
                 '{"name": "get_current_conditions", "parameters": {"location": "San Francisco, CA", '
                 '"unit": "Fahrenheit"}}',
                 [("get_current_conditions", {"location": "San Francisco, CA", "unit": "Fahrenheit"})]),
    # Mistral-7B-Instruct-v0.3's model card (function calling): [TOOL_CALLS] then a JSON list
    "mistral-v0.3": ([_fn("get_current_weather", location="string", format="string")],
                     '[TOOL_CALLS] [{"name": "get_current_weather", "arguments": {"location": "Paris, France", '
                     '"format": "celsius"}}]',
                     [("get_current_weather", {"location": "Paris, France", "format": "celsius"})]),
    # gpt-oss (OpenAI's harmony format guide): reasoning on analysis, the call on commentary to=functions.NAME
    "gpt-oss": ([_fn("get_current_weather", location="string")],
                "<|channel|>analysis<|message|>Need to use function get_current_weather.<|end|><|start|>assistant"
                "<|channel|>commentary to=functions.get_current_weather <|constrain|>json<|message|>"
                '{"location":"San Francisco"}<|call|>',
                [("get_current_weather", {"location": "San Francisco"})]),
}
# per family: (the model's output, its reasoning, its answer), stripped of surrounding whitespace
REASONING_SAMPLES: dict[str, tuple[str, str, str]] = {
    # Qwen3's model card (thinking mode): <think>...</think> then the answer
    "qwen3": ("<think>\nThe user asks for 2 + 2. That is 4.\n</think>\n\nThe answer is 4.",
              "The user asks for 2 + 2. That is 4.", "The answer is 4."),
    # harmony: analysis channel, then the final channel
    "gpt-oss": ("<|channel|>analysis<|message|>User asks 2+2. Simple.<|end|><|start|>assistant<|channel|>final"
                "<|message|>4<|return|>", "User asks 2+2. Simple.", "4"),
}
NO_CALL = "Here is the fix: change line 3 to `return 0`."     # an answer without a tool call stays text
QWEN_DIR = catalog.models()["qwen2.5-0.5b-instruct"].config_dir


def _families():
    return catalog.serving_families()


def _parses() -> list[ParseCase]:
    out = []
    for name, fam in _families().items():
        if fam.tool_call_parser and name in TOOL_SAMPLES:
            tools, text, _ = TOOL_SAMPLES[name]
            out += [ParseCase(f"tool-{name}", "tool", fam.tool_call_parser, text, tools),
                    ParseCase(f"plain-{name}", "tool", fam.tool_call_parser, NO_CALL, tools)]
        if fam.reasoning_parser and name in REASONING_SAMPLES:
            out.append(ParseCase(f"reasoning-{name}", "reasoning", fam.reasoning_parser, REASONING_SAMPLES[name][0]))
    tools, text, _ = TOOL_SAMPLES["qwen2.5"]
    out += [ParseCase("issue-name-qwen25", "tool", "qwen25", text, tools),     # the name the issue asked for
            ParseCase("unknown-parser", "tool", "qwen9", text, tools)]
    return out


@pytest.fixture(scope="module")
def checked():
    if not sglang_check.checker_python().exists():
        pytest.fail(f"the SGLang checking environment is missing ({sglang_check.checker_python()}): "
                    "run make setup-sglang-check", pytrace=False)
    base = ["--model-path", "Qwen/Qwen2.5-Coder-14B-Instruct-GPTQ-Int4"]
    cases = [LaunchCase("parser-qwen25", base + ["--tool-call-parser", "qwen25"], QWEN_DIR),
             LaunchCase("parser-qwen", base + ["--tool-call-parser", "qwen"], QWEN_DIR)]
    batch = sglang_check.run_batch(cases, parses=_parses())
    assert batch.sglang_version == "0.5.15.post1"
    return {r.case_id: r for r in batch.results}, {p.parse_id: p for p in batch.parses}


def _as_calls(calls: list[dict]) -> list[tuple[str, dict]]:
    return [(c["name"], json.loads(c["arguments"])) for c in calls]


def test_every_family_with_a_parser_has_a_documented_sample():
    fams = _families()
    assert {n for n, f in fams.items() if f.tool_call_parser} == set(TOOL_SAMPLES)
    assert {n for n, f in fams.items() if f.reasoning_parser} == set(REASONING_SAMPLES)


@pytest.mark.parametrize("family", sorted(TOOL_SAMPLES))
def test_the_kits_tool_call_parser_turns_the_documented_output_into_calls(checked, family):
    _, parses = checked
    r = parses[f"tool-{family}"]
    assert r.ok, r.error
    expected = TOOL_SAMPLES[family][2]
    assert _as_calls(r.calls) == expected
    assert _as_calls(r.stream["calls"]) == expected, "streamed (stream: true) differs from whole"
    assert "<tool_call>" not in r.normal_text and "[TOOL_CALLS]" not in r.normal_text


@pytest.mark.parametrize("family", sorted(TOOL_SAMPLES))
def test_an_answer_without_a_call_stays_text(checked, family):
    r = checked[1][f"plain-{family}"]
    assert r.ok and r.calls == [] and r.normal_text == NO_CALL


@pytest.mark.parametrize("family", sorted(REASONING_SAMPLES))
def test_the_kits_reasoning_parser_splits_thinking_from_the_answer(checked, family):
    r = checked[1][f"reasoning-{family}"]
    assert r.ok, r.error
    _, reasoning, answer = REASONING_SAMPLES[family]
    assert (r.reasoning_text.strip(), r.normal_text.strip()) == (reasoning, answer)
    assert (r.stream["reasoning_text"].strip(), r.stream["normal_text"].strip()) == (reasoning, answer)


def test_qwen25_is_the_same_detector_but_deprecated_so_the_kit_renders_qwen(checked):
    results, parses = checked
    assert parses["issue-name-qwen25"].calls == parses["tool-qwen2.5"].calls
    old, new = results["parser-qwen25"], results["parser-qwen"]
    assert old.ok and new.ok
    assert old.resolved["tool_call_parser"] == "qwen"          # SGLang renames it (server_args.py:2960)
    assert any("qwen25" in d and "deprecated" in d for d in old.deprecations)
    assert not new.deprecations
    assert _families()["qwen2.5"].tool_call_parser == "qwen"


def test_an_unknown_parser_name_is_refused_by_sglang(checked):
    # control: the parse is real, a name SGLang does not have fails
    r = checked[1]["unknown-parser"]
    assert not r.ok and "Unsupported tool_call_parser: qwen9" in r.error
