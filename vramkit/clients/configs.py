"""A ClientTarget -> each client's configuration text. Pure: values in, text out.

The window a client may fill is the plan's longest prompt (SGLang's max_req_input_len, `Plan.max_request_tokens`):
SGLang refuses a prompt that long or longer (managers/utils.py validate_input_length), and the tokenizer manager
refuses prompt + max_tokens over the context length, so the prompt AND the answer must fit in it. Clients that
reserve the answer out of the window themselves (Continue's contextLength/maxTokens, Cline's context window/max
output) get the window; aider does not reserve, so its max_input_tokens is the window minus the answer.

The answer's budget is the kit's choice, not a measurement: an agent's turn (an edit, a tool call, a short
explanation) rarely needs more than OUTPUT_CAP_TOKENS, and it never takes more than a quarter of the window, so
the history keeps at least three quarters.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass

CLIENTS = ("aider", "continue", "cline", "openai")
OUTPUT_CAP_TOKENS = 8192        # the kit's choice (see above)
OUTPUT_SHARE = 4                # at most 1/4 of the window
NO_KEY = "none"                 # SGLang without --api-key accepts any key; the clients want a non-empty one


def output_budget(window_tokens: int) -> int:
    """Tokens a client should ask for as the answer (max_tokens): min(8192, window / 4), at least 1."""
    return max(1, min(OUTPUT_CAP_TOKENS, window_tokens // OUTPUT_SHARE))


@dataclass(frozen=True)
class ClientTarget:
    base_url: str                   # the OpenAI-compatible root, ending in /v1
    model: str                      # what clients send as "model" (SGLang's --served-model-name)
    context_window_tokens: int      # prompt + answer must fit (the plan's longest prompt)
    output_tokens: int              # the answer's budget (max_tokens)
    api_key: str | None             # None: the server takes none (any value works)
    tool_calls: bool                # the server parses tool calls (--tool-call-parser)
    source: str                     # where these figures come from, in words

    @property
    def prompt_tokens(self) -> int:
        """The longest history a client should send so the answer still fits."""
        return self.context_window_tokens - self.output_tokens

    def to_json(self) -> dict:
        return asdict(self) | {"prompt_tokens": self.prompt_tokens}


def _key(t: ClientTarget) -> str:
    return t.api_key or NO_KEY


def aider(t: ClientTarget) -> str:
    name = f"openai/{t.model}"
    metadata = {name: {"max_input_tokens": t.prompt_tokens, "max_output_tokens": t.output_tokens,
                       "max_tokens": t.output_tokens, "input_cost_per_token": 0.0, "output_cost_per_token": 0.0,
                       "litellm_provider": "openai", "mode": "chat", "supports_function_calling": t.tool_calls}}
    return "\n".join([
        f"# aider -> {t.base_url} ({t.source})",
        f"# context window {t.context_window_tokens:,} tokens = the longest prompt the plan allows; the answer's "
        f"budget {t.output_tokens:,}, so aider's max_input_tokens is {t.prompt_tokens:,}",
        f"export OPENAI_API_BASE={t.base_url}",
        f"export OPENAI_API_KEY={_key(t)}",
        "",
        "# .aider.model.metadata.json (in the repository or your home folder):",
        json.dumps(metadata, indent=2),
        "",
        "# .aider.model.settings.yml:",
        f"- name: {name}",
        "  edit_format: diff",
        "  use_repo_map: true",
        "  extra_params:",
        f"    max_tokens: {t.output_tokens}",
        "",
        f"aider --model {name}",
    ])


def continue_dev(t: ClientTarget) -> str:
    lines = [
        f"# Continue (~/.continue/config.yaml) -> {t.base_url} ({t.source})",
        "name: vramkit",
        "version: 0.0.1",
        "schema: v1",
        "models:",
        f"  - name: {t.model} (vramkit)",
        "    provider: openai",
        f"    model: {t.model}",
        f"    apiBase: {t.base_url}",
        f"    apiKey: {_key(t)}",
        "    roles: [chat, edit, apply]",
    ]
    if t.tool_calls:
        lines.append("    capabilities: [tool_use]")
    lines += [
        "    defaultCompletionOptions:",
        f"      contextLength: {t.context_window_tokens}   # the longest prompt (SGLang's max_req_input_len)",
        f"      maxTokens: {t.output_tokens}   # reserved out of contextLength for the answer",
    ]
    return "\n".join(lines)


def cline(t: ClientTarget) -> str:
    return "\n".join([
        f"# Cline (and Roo Code): Settings -> API Provider 'OpenAI Compatible' -> {t.base_url} ({t.source})",
        f"Base URL:            {t.base_url}",
        f"API Key:             {_key(t)}",
        f"Model ID:            {t.model}",
        f"Context Window Size: {t.context_window_tokens}",
        f"Max Output Tokens:   {t.output_tokens}",
        "Supports Images:     off",
        "Supports Computer Use: off",
        "Native tool calls: " + ("on (the server parses tool calls into tool_calls)" if t.tool_calls
                                 else "off (the server parses no tool calls for this model)"),
    ])


def openai_sdk(t: ClientTarget) -> str:
    tools = ('    tools=[{"type": "function", "function": {"name": "read_file", "parameters": {"type": "object",\n'
             '        "properties": {"path": {"type": "string"}}, "required": ["path"]}}}],\n') if t.tool_calls else ""
    return "\n".join([
        f"# the OpenAI SDK -> {t.base_url} ({t.source})",
        f"export OPENAI_BASE_URL={t.base_url}",
        f"export OPENAI_API_KEY={_key(t)}",
        "",
        "from openai import OpenAI",
        "client = OpenAI()",
        "reply = client.chat.completions.create(",
        f'    model="{t.model}",',
        '    messages=[{"role": "user", "content": "Read src/app.py"}],',
        tools + f"    max_tokens={t.output_tokens},  # prompt + max_tokens must stay within "
                f"{t.context_window_tokens:,} tokens",
        ")",
    ])


RENDER = {"aider": aider, "continue": continue_dev, "cline": cline, "openai": openai_sdk}


def render(client: str, target: ClientTarget) -> str:
    return RENDER[client](target)
