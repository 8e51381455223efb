"""A stand-in tokenizer for a dummy-weight Qwen2.5 folder on the offline GPU host (issue 21).

The GPU host has no network and no model tokenizer, and /v1/chat/completions needs one (the chat template turns
messages and `tools` into the prompt). This writes a tokenizer folder for SGLang's --tokenizer-path (no
config.json in it: with one saying model_type qwen2, transformers 5 rebuilds Qwen2Tokenizer's byte-level BPE
around the vocabulary and drops these words):
- tokenizer.json: a word-level tokenizer (`tokenizers`), one id per whitespace-separated word, the vocabulary
  filled to the model's vocab_size (so every id the random weights sample decodes), Qwen2.5's special tokens at
  their real ids (<|endoftext|> 151643, <|im_start|> 151644, <|im_end|> 151645, <tool_call> 151657,
  </tool_call> 151658) and every word of the bench's agent lexicon (vramkit/bench/workloads.py) as one token;
- tokenizer_config.json: Qwen2.5-Instruct's chat template (tools rendered in <tools>, calls as <tool_call> JSON,
  results as <tool_response>), eos <|im_end|>.
Token counts are this tokenizer's, not Qwen's: the run counts every prompt with this same file
(transformers' apply_chat_template), so "N tokens" in SGLang's refusal can be checked exactly.

Usage: python3 standin_tokenizer.py MODEL_CONFIG_DIR OUT_DIR   (then --tokenizer-path OUT_DIR)
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

SPECIAL = {"<|endoftext|>": 151643, "<|im_start|>": 151644, "<|im_end|>": 151645,
           "<tool_call>": 151657, "</tool_call>": 151658}

# Qwen2.5-Instruct's template (tokenizer_config.json of the Qwen2.5 Instruct/Coder-Instruct releases)
QWEN25_TEMPLATE = (
    "{%- if tools %}\n    {{- '<|im_start|>system\\n' }}\n    {%- if messages[0]['role'] == 'system' %}\n"
    "        {{- messages[0]['content'] }}\n    {%- else %}\n"
    "        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}\n    {%- endif %}\n"
    "    {{- \"\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n"
    "You are provided with function signatures within <tools></tools> XML tags:\\n<tools>\" }}\n"
    "    {%- for tool in tools %}\n        {{- \"\\n\" }}\n        {{- tool | tojson }}\n    {%- endfor %}\n"
    "    {{- \"\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments "
    "within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\\"name\\\": <function-name>, \\\"arguments\\\": "
    "<args-json-object>}\\n</tool_call><|im_end|>\\n\" }}\n{%- else %}\n"
    "    {%- if messages[0]['role'] == 'system' %}\n"
    "        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}\n    {%- else %}\n"
    "        {{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant."
    "<|im_end|>\\n' }}\n    {%- endif %}\n{%- endif %}\n{%- for message in messages %}\n"
    "    {%- if (message.role == \"user\") or (message.role == \"system\" and not loop.first) or "
    "(message.role == \"assistant\" and not message.tool_calls) %}\n"
    "        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}\n"
    "    {%- elif message.role == \"assistant\" %}\n        {{- '<|im_start|>' + message.role }}\n"
    "        {%- if message.content %}\n            {{- '\\n' + message.content }}\n        {%- endif %}\n"
    "        {%- for tool_call in message.tool_calls %}\n            {%- if tool_call.function is defined %}\n"
    "                {%- set tool_call = tool_call.function %}\n            {%- endif %}\n"
    "            {{- '\\n<tool_call>\\n{\"name\": \"' }}\n            {{- tool_call.name }}\n"
    "            {{- '\", \"arguments\": ' }}\n            {{- tool_call.arguments | tojson }}\n"
    "            {{- '}\\n</tool_call>' }}\n        {%- endfor %}\n        {{- '<|im_end|>\\n' }}\n"
    "    {%- elif message.role == \"tool\" %}\n"
    "        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != \"tool\") %}\n"
    "            {{- '<|im_start|>user' }}\n        {%- endif %}\n        {{- '\\n<tool_response>\\n' }}\n"
    "        {{- message.content }}\n        {{- '\\n</tool_response>' }}\n"
    "        {%- if loop.last or (messages[loop.index0 + 1].role != \"tool\") %}\n"
    "            {{- '<|im_end|>\\n' }}\n        {%- endif %}\n    {%- endif %}\n{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n    {{- '<|im_start|>assistant\\n' }}\n{%- endif %}\n")


def build(config_dir: Path, out: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from tokenizers.decoders import WordPiece  # joins words with spaces

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from vramkit.bench.workloads import AGENT_LEXICON

    out.mkdir(parents=True, exist_ok=True)
    vocab_size = json.loads((config_dir / "config.json").read_text())["vocab_size"]
    # every id below vocab_size is a word: the special tokens at their real ids, the agent lexicon, then w0, w1...
    by_id = {ident: text for text, ident in SPECIAL.items()}
    words = iter(["[UNK]", *AGENT_LEXICON] + [f"w{i}" for i in range(vocab_size)])
    vocab = {by_id[i] if i in by_id else next(words): i for i in range(vocab_size)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = WordPiece(prefix="##", cleanup=False)
    tok.add_special_tokens(list(SPECIAL))       # already in the vocabulary: they keep their ids
    for text, ident in SPECIAL.items():
        if tok.token_to_id(text) != ident:
            raise SystemExit(f"{text} got id {tok.token_to_id(text)}, not {ident}")
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "chat_template": QWEN25_TEMPLATE,
        "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "unk_token": "[UNK]",
        "model_max_length": 131072, "clean_up_tokenization_spaces": False,
    }, indent=1))


if __name__ == "__main__":
    build(Path(sys.argv[1]), Path(sys.argv[2]))
