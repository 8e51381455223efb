"""What the benchmark sends: seeded token-id prompts, the context sweep's points, the multi-turn sessions.

Pure and deterministic: the same seed gives the same ids on every Python version (only
`random.Random(int).random()` is used, whose sequence Python guarantees stays the same), so two runs,
e.g. with and without the host cache, send identical traffic. Servers run with dummy weights and
`--skip-tokenizer-init`, so prompts are token ids, drawn below the model's vocabulary size. The agent turn
(AgentTurnPlan) is the exception: it is chat messages with tools, for a server with a tokenizer.
"""
from __future__ import annotations

import hashlib
import json
import math
import random
from dataclasses import dataclass

# Token ids below this are valid for every catalogued model (the smallest vocabulary, Mistral v0.3's, is
# 32,768; tests/unit/test_bench_workloads.py checks it against config/): what the benchmark and the
# warm-up requests draw from when they do not know the model.
ANY_MODEL_VOCAB = 32000


def derive_seed(*parts: object) -> int:
    """A 64-bit seed from labelled parts; stable across processes (unlike hash(), salted per run)."""
    digest = hashlib.sha256(repr(parts).encode()).digest()
    return int.from_bytes(digest[:8], "big")


def random_token_ids(n: int, vocab_size: int, seed: int) -> list[int]:
    """n token ids in [0, vocab_size), the same list for the same (n, vocab_size, seed).

    Distinct seeds share no prefix in practice, so SGLang's prefix cache cannot help one prompt with
    another's tokens (a match of the first token alone has odds 1/vocab_size).
    """
    if n < 0 or vocab_size < 2:
        raise ValueError(f"need n >= 0 and vocab_size >= 2, got n={n}, vocab_size={vocab_size}")
    rng = random.Random(seed)
    return [int(rng.random() * vocab_size) for _ in range(n)]


def context_points(max_input_tokens: int, start_tokens: int = 1024) -> list[int]:
    """Prompt lengths doubling from start_tokens, then max_input_tokens itself as the last point."""
    if max_input_tokens < 1:
        return []
    points = []
    n = start_tokens
    while n < max_input_tokens:
        points.append(n)
        n *= 2
    points.append(max_input_tokens)
    return points


def max_accepted_input_tokens(max_req_input_len: int) -> int:
    """Longest prompt SGLang 0.5.15.post1 admits: the scheduler refuses len >= max_req_input_len.

    (sglang/srt/managers/utils.py `validate_input_length`.)
    """
    return max_req_input_len - 1


def max_new_tokens_for(input_tokens: int, max_req_input_len: int, wanted: int) -> int:
    """Output tokens to ask for so a long prompt is not refused for its output alone.

    SGLang sets max_req_input_len = max_req_len - 5 with max_req_len = min(context_len, pool) - 1
    (tp_worker.get_worker_info); the scheduler clips max_new_tokens to max_req_len - input - 1, and
    the tokenizer manager refuses input + max_new_tokens > context_len. Asking for at most
    max_req_len - input - 1 passes both. At the longest prompt that leaves 5 tokens.
    """
    max_req_len = max_req_input_len + 5
    return max(1, min(wanted, max_req_len - input_tokens - 1))


@dataclass(frozen=True)
class MultiturnPlan:
    """N sessions, each a long history of its own, visited round-robin for T turns.

    Each turn sends the session's whole history so far plus a new user chunk; afterwards the chunk and
    a seeded stand-in for the answer are appended. (The server's real answer tokens would differ between
    two servers with different random weights; a seeded stand-in keeps the traffic identical, at the
    cost that answer tokens are never a prefix-cache hit.)
    """

    sessions: int = 8
    turns: int = 3
    history_min_tokens: int = 8192
    history_max_tokens: int = 12288
    user_chunk_tokens: int = 512
    answer_tokens: int = 64
    vocab_size: int = 32000
    seed: int = 0

    def history_tokens(self, session: int) -> int:
        """This session's initial history length: spread evenly over [min, max] (deterministic)."""
        if self.sessions == 1:
            return self.history_min_tokens
        span = self.history_max_tokens - self.history_min_tokens
        return self.history_min_tokens + round(span * session / (self.sessions - 1))

    def total_history_tokens(self) -> int:
        return sum(self.history_tokens(s) for s in range(self.sessions))

    def longest_prompt_tokens(self) -> int:
        """The last turn's prompt of the longest session: it must be under max_req_input_len."""
        return (self.history_max_tokens + self.turns * self.user_chunk_tokens
                + (self.turns - 1) * self.answer_tokens)

    def _part(self, kind: str, session: int, turn: int, n: int) -> list[int]:
        return random_token_ids(n, self.vocab_size, derive_seed("multiturn", self.seed, kind,
                                                                 session, turn))

    def requests(self):
        """Yield (session, turn, input_ids) in round-robin order: s0t0, s1t0, ..., s0t1, ..."""
        history = {s: self._part("history", s, 0, self.history_tokens(s))
                   for s in range(self.sessions)}
        for turn in range(self.turns):
            for s in range(self.sessions):
                prompt = history[s] + self._part("user", s, turn, self.user_chunk_tokens)
                yield s, turn, prompt
                history[s] = prompt + self._part("answer", s, turn, self.answer_tokens)


def sessions_to_exceed(kv_pool_tokens: int, mean_history_tokens: int, minimum: int = 8,
                       cap: int = 32, overshoot: float = 1.25) -> int:
    """Sessions whose histories together exceed the GPU KV pool by `overshoot` (so the pool cannot keep
    them all and revisits miss on the GPU), at least `minimum`, at most `cap` (bounded run time)."""
    need = math.ceil(overshoot * kv_pool_tokens / max(mean_history_tokens, 1))
    return max(minimum, min(cap, need))


def fit_history_to_limit(plan: MultiturnPlan, max_input_tokens: int) -> MultiturnPlan:
    """Shrink the histories so the longest turn's prompt stays under the server's input limit."""
    over = plan.longest_prompt_tokens() - max_input_tokens
    if over <= 0:
        return plan
    hi = max(plan.history_max_tokens - over, 1)
    lo = min(plan.history_min_tokens, hi)
    return MultiturnPlan(**{**plan.__dict__, "history_min_tokens": lo, "history_max_tokens": hi})


# --- the agent turn (issue 21): what a coding agent sends each turn ---------------------------------------------
# Words a code model's tokenizer keeps whole (one token each in BPE vocabularies, with their leading space), so a
# text of N of them is about N tokens; the GPU host's stand-in word-level tokenizer has each as one token exactly.
AGENT_LEXICON = tuple(dict.fromkeys("""
def return self import from class if else elif for while in not and or is None True False try except finally
with as raise yield lambda pass break continue global async await print len range list dict set
tuple str int float bool open read write file path line name value key items append extend update get pop sort
index count split join strip replace format start end size data result error test assert config model server
client request response token cache prefix plan memory buffer queue thread lock event time sleep log debug info
warning module package function method argument parameter default option flag build run check parse render load
save copy move delete create remove insert select update where order group limit offset user session state
""".split()))
AGENT_TOOLS: tuple[dict, ...] = tuple(
    {"type": "function", "function": {"name": name, "description": text, "parameters": {
        "type": "object", "properties": {p: {"type": t} for p, t in params}, "required": [p for p, _ in params]}}}
    for name, text, params in (
        ("read_file", "Read a file of the repository", (("path", "string"),)),
        ("edit_file", "Replace text in a file", (("path", "string"), ("old", "string"), ("new", "string"))),
        ("run_command", "Run a shell command in the repository", (("command", "string"), ("timeout_s", "integer"))),
    ))


def seeded_words(n: int, seed: int) -> str:
    """n words of AGENT_LEXICON, the same text for the same (n, seed)."""
    rng = random.Random(seed)
    return " ".join(AGENT_LEXICON[int(rng.random() * len(AGENT_LEXICON))] for _ in range(n))


@dataclass(frozen=True)
class AgentTurnPlan:
    """One agent session: a long fixed prefix (the agent's instructions and the repository map, `prefix_words`)
    with tools attached, then turns that each re-send everything so far plus a short new part: the assistant's
    tool call, the tool's result and a new instruction (`message_words` each). The assistant's calls are seeded
    stand-ins, not the server's answers, so two servers get identical traffic (as MultiturnPlan does).

    Turn 0 meets an empty cache (cold: the whole prefix is computed); each later turn shares all but its new part
    with the turn before (warm: the prefix cache's case)."""

    prefix_words: int = 8000
    message_words: int = 40
    turns: int = 4
    seed: int = 0

    def _text(self, kind: str, turn: int, n: int) -> str:
        return seeded_words(n, derive_seed("agent", self.seed, kind, turn))

    def messages(self, turn: int) -> list[dict]:
        """The chat messages of turn `turn` (0-based)."""
        out: list[dict] = [{"role": "system", "content": "You are a coding agent. " + self._text("prefix", 0,
                                                                                                 self.prefix_words)},
                           {"role": "user", "content": self._text("user", 0, self.message_words)}]
        for k in range(turn):
            call_id = f"call_{k}"
            out += [{"role": "assistant", "content": "", "tool_calls": [{
                        "id": call_id, "type": "function", "function": {
                            "name": "read_file", "arguments": json.dumps({"path": f"src/module_{k}.py"})}}]},
                    {"role": "tool", "tool_call_id": call_id, "content": self._text("tool", k, self.message_words)},
                    {"role": "user", "content": self._text("user", k + 1, self.message_words)}]
        return out

    def words(self, turn: int) -> int:
        """Words of content in turn `turn`'s messages (the tokens are about this many, plus the template's)."""
        return self.prefix_words + self.message_words * (1 + 3 * turn)


def agent_prefix_words(max_req_input_len: int, wanted: int = 8000, tokens_per_word: float = 1.5) -> int:
    """A prefix that leaves the session's last turns room under the server's input limit: at most a third of
    the limit at `tokens_per_word` (BPE tokenizers split a few lexicon words in two)."""
    return max(64, min(wanted, int(max_req_input_len / 3 / tokens_per_word)))
