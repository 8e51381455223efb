"""Issue 21 on the GPU host: what a coding agent sees from a server the kit started (random weights: the text is
noise, the contract is what is checked).

Against a running SGLang (started by `vramkit up` with a stand-in tokenizer, benchmarks/gpu/run_agents.sh):
1. /v1/models and /server_info: the served name and the parser the kit rendered;
2. /v1/chat/completions with `tools`, whole and with `stream: true`: HTTP 200 in the OpenAI shape
   (chat.completion / chat.completion.chunk objects, an assistant message, finish_reason, usage, [DONE]);
3. the input limit, counted with the server's own tokenizer (the same files, transformers' apply_chat_template
   with the same tools): a prompt one token under the plan's longest prompt is served, one at it is refused,
   and one twice the context is refused with SGLang's message naming the count we made;
4. `vramkit client aider|continue --url`: the configuration for this running server.
Writes one JSON (device, versions, date, every request's status and SGLang's words).

Usage: python3 agents_probe.py --url URL --tokenizer DIR --out FILE [--plan-json FILE]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from vramkit.bench.workloads import AGENT_TOOLS, seeded_words  # noqa: E402

TOOLS = [dict(t) for t in AGENT_TOOLS]
ASK = [{"role": "system", "content": "You are a coding agent."},
       {"role": "user", "content": "Read src/app.py and fix the failing test."}]


def shape_of_completion(body: dict) -> dict:
    """The OpenAI chat.completion fields an agent reads, and whether each is there."""
    choice = (body.get("choices") or [{}])[0]
    msg = choice.get("message") or {}
    return {"object": body.get("object"), "has_id": bool(body.get("id")), "model": body.get("model"),
            "role": msg.get("role"), "content_is_text_or_null": msg.get("content") is None
            or isinstance(msg.get("content"), str), "tool_calls": msg.get("tool_calls"),
            "finish_reason": choice.get("finish_reason"), "usage": body.get("usage"),
            "ok": body.get("object") == "chat.completion" and msg.get("role") == "assistant"
            and bool(choice.get("finish_reason")) and isinstance((body.get("usage") or {}).get("prompt_tokens"), int)}


def stream(http: httpx.Client, payload: dict) -> dict:
    t0 = time.perf_counter()
    chunks, done, first, usage, objects, roles, finish = 0, False, None, None, set(), set(), None
    with http.stream("POST", "/v1/chat/completions", json=payload) as r:
        status = r.status_code
        if status != 200:
            r.read()
            return {"status": status, "body": r.text[:500]}
        for line in r.iter_lines():
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                done = True
                break
            ev = json.loads(data)
            chunks += 1
            objects.add(ev.get("object"))
            for ch in ev.get("choices") or []:
                d = ch.get("delta") or {}
                if d.get("role"):
                    roles.add(d["role"])
                if first is None and (d.get("content") or d.get("tool_calls")):
                    first = time.perf_counter() - t0
                finish = ch.get("finish_reason") or finish
            usage = ev.get("usage") or usage
    return {"status": status, "chunks": chunks, "objects": sorted(o for o in objects if o), "roles": sorted(roles),
            "finish_reason": finish, "usage": usage, "done_marker": done, "ttft_s": first,
            "ok": status == 200 and done and objects == {"chat.completion.chunk"} and "assistant" in roles
            and bool(finish) and bool(usage)}


def post(http: httpx.Client, payload: dict) -> tuple[int, dict | str]:
    r = http.post("/v1/chat/completions", json=payload)
    try:
        return r.status_code, r.json()
    except ValueError:
        return r.status_code, r.text[:500]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default="http://127.0.0.1:30000")
    ap.add_argument("--tokenizer", required=True)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--plan-json", type=Path)
    a = ap.parse_args()
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(a.tokenizer)

    def count(messages: list[dict]) -> int:
        return len(tok.apply_chat_template(messages, tools=TOOLS, tokenize=True, add_generation_prompt=True,
                                           return_dict=False))

    out: dict = {"date_utc": datetime.now(UTC).isoformat(timespec="seconds")}
    try:
        import torch
        out["device"] = torch.cuda.get_device_name(0)
        out["versions"] = {"torch": torch.__version__}
    except Exception as e:  # noqa: BLE001
        out["device"] = f"? ({e})"
    http = httpx.Client(base_url=a.url, timeout=300)
    info = http.get("/server_info").json()
    keys = ("version", "served_model_name", "tool_call_parser", "reasoning_parser", "model_path", "tokenizer_path",
            "context_length", "max_req_input_len", "max_total_num_tokens", "kv_cache_dtype", "mem_fraction_static",
            "enable_hierarchical_cache", "hicache_size", "load_format", "skip_tokenizer_init")
    out["server"] = {k: info.get(k) for k in keys}
    out.setdefault("versions", {})["sglang"] = info.get("version")
    out["models"] = http.get("/v1/models").json()
    if a.plan_json and a.plan_json.exists():
        plan = json.loads(a.plan_json.read_text())
        out["plan"] = {k: plan.get(k) for k in ("model", "gpu", "max_request_tokens", "kv_pool_tokens",
                                                 "context_len", "sglang_args", "serving")}
    model = info["served_model_name"]

    # 2. tools, whole and streamed
    status, body = post(http, {"model": model, "messages": ASK, "tools": TOOLS, "max_tokens": 32})
    out["tools_request"] = {"status": status, "shape": shape_of_completion(body) if isinstance(body, dict) else body,
                            "prompt_tokens_counted_here": count(ASK)}
    out["tools_stream_request"] = stream(http, {"model": model, "messages": ASK, "tools": TOOLS, "max_tokens": 32,
                                                "stream": True, "stream_options": {"include_usage": True}})
    status, body = post(http, {"model": "not-the-served-name", "messages": ASK, "max_tokens": 4})
    out["wrong_model_name"] = {"status": status, "body": body}

    # 3. the input limit, counted with the same tokenizer
    limit = int(info["max_req_input_len"])      # a prompt must be shorter (managers/utils.py)
    base = count(ASK[:1] + [{"role": "user", "content": ""}])

    def ask(words: int, seed: int) -> list[dict]:
        return ASK[:1] + [{"role": "user", "content": seeded_words(words, seed)}]

    # SGLang renders the tools as its pydantic dump (with "strict": false), so its count differs from ours by a
    # constant: one served request measures it (its usage.prompt_tokens against our count of the same messages)
    status, body = post(http, {"model": model, "messages": ask(100, 3), "tools": TOOLS, "max_tokens": 1})
    offset = body["usage"]["prompt_tokens"] - count(ask(100, 3)) if status == 200 and isinstance(body, dict) else 0
    edge: dict = {"offset_sglang_minus_here": offset}
    for name, target in (("one_under", limit - 1), ("at_limit", limit), ("twice_context",
                                                                        2 * int(info["context_length"]))):
        words = target - offset - base
        msgs = ask(words, 7)
        n = count(msgs) + offset
        while n != target:              # the lexicon words are one token each; adjust if the template differs
            words += target - n
            msgs = ask(words, 7)
            n = count(msgs) + offset
        t0 = time.perf_counter()
        status, body = post(http, {"model": model, "messages": msgs, "tools": TOOLS, "max_tokens": 1})
        wall = time.perf_counter() - t0
        edge[name] = {"prompt_tokens_expected": n, "status": status, "wall_s": round(wall, 3),
                      "usage": body.get("usage") if isinstance(body, dict) else None,
                      "message": (body.get("message") if isinstance(body, dict) else str(body))}
    out["input_limit"] = {"max_req_input_len": limit, **edge}

    # 4. the client configurations for this running server
    clients = {}
    for client in ("aider", "continue"):
        r = subprocess.run([sys.executable, "-m", "vramkit", "client", client, "--url", a.url, "--json"],
                           capture_output=True, text=True, cwd=ROOT)
        clients[client] = json.loads(r.stdout) if r.returncode == 0 else {"rc": r.returncode, "err": r.stderr[-400:]}
    r = subprocess.run([sys.executable, "-m", "vramkit", "client", "continue", "--url", a.url],
                       capture_output=True, text=True, cwd=ROOT)
    clients["continue_text"] = r.stdout
    out["client"] = clients
    a.out.write_text(json.dumps(out, indent=2, default=str))
    print(json.dumps({k: out[k] for k in ("tools_request", "tools_stream_request", "input_limit")}, indent=1,
                     default=str)[:6000])
    return 0


if __name__ == "__main__":
    sys.exit(main())
