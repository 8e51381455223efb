"""Decode speed at 1/2/4 streams and time to first token at 512 / 8K / 30K-token prompts (issue 12).

    python3 benchmarks/gpu/moe_probe.py --url http://127.0.0.1:30000 --out probe.json [--streams 1,2,4]
    python3 benchmarks/gpu/moe_probe.py --api llamacpp --url http://127.0.0.1:8080 ...   # llama-server

Random token ids (the random-weight checkpoints have no tokenizer); every request through the kit's
SglangClient, streamed, so TTFT and decode rate are the client's view, as `vramkit bench` reports them.
`--api llamacpp` sends the same requests to llama-server's /completion (token ids as the prompt, streamed,
greedy, EOS ignored, no prompt cache) and times them the same way; llama-server's own timings are kept
beside (issue 18: the side-by-side).
Decode tok/s per stream = 1 / TPOT (tokens after the first over the time after the first); aggregate =
streams x the mean of the per-stream rates. `--repeat N` measures each point N times with fresh prompts (no
prefix-cache hit) and reports the median of each figure, every round kept beside it: one request of the hybrid
mode varies by about a fifth (benchmarks/results/gpu/moe-vs-llamacpp-wna16/gensweep/).
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from vramkit.adapters.sglang_http import SglangClient  # noqa: E402
from vramkit.core.bench_stats import decode_tok_s  # noqa: E402

VOCAB = 151000
API = "sglang"
SEED_OFFSET = 0     # --seed-offset: another set of prompts, the same shapes (every seed below shifted by it)


def ids(n: int, seed: int) -> list[int]:
    rng = random.Random(seed + SEED_OFFSET)
    return [rng.randrange(10, VOCAB) for _ in range(n)]


def one_llamacpp(url: str, prompt: list[int], new: int, deadline_s: float = 300) -> dict:
    """One streamed /completion request to llama-server, timed as SglangClient times SGLang's."""
    import http.client
    from urllib.parse import urlsplit
    u = urlsplit(url)
    body = json.dumps({"prompt": prompt, "n_predict": new, "stream": True, "ignore_eos": True,
                       "cache_prompt": False, "temperature": 0.0, "top_k": 1, "samplers": ["top_k"]})
    t0 = time.perf_counter()
    ttft = None
    n = 0
    timings: dict = {}
    err = ""
    try:
        c = http.client.HTTPConnection(u.hostname, u.port, timeout=deadline_s)
        c.request("POST", "/completion", body, {"Content-Type": "application/json"})
        r = c.getresponse()
        if r.status != 200:
            err = f"HTTP {r.status}: {r.read()[:200]!r}"
        else:
            for line in r:
                if not line.startswith(b"data: "):
                    continue
                d = json.loads(line[6:])
                if d.get("content") is not None and not d.get("stop"):
                    n += 1
                    if ttft is None:
                        ttft = time.perf_counter() - t0
                if d.get("stop"):
                    timings = d.get("timings") or {}
                    break
        c.close()
    except OSError as e:
        err = f"{type(e).__name__}: {e}"
    lat = time.perf_counter() - t0
    n = int(timings.get("predicted_n") or n)
    ok = not err and ttft is not None
    return {"ok": ok, "prompt_tokens": len(prompt), "completion_tokens": n, "ttft_s": ttft, "latency_s": lat,
            "error": err, "decode_tok_s": decode_tok_s(lat, ttft, n) if ok else None,
            "server_timings": {k: timings.get(k) for k in ("prompt_n", "prompt_ms", "predicted_n", "predicted_ms",
                                                            "predicted_per_second", "prompt_per_second")}}


def one(url: str, prompt: list[int], new: int, deadline_s: float = 300) -> dict:
    if API == "llamacpp":
        return one_llamacpp(url, prompt, new, deadline_s)
    with SglangClient(url, timeout_s=600) as c:
        r = c.generate(input_ids=prompt, max_new_tokens=new, stream=True, deadline_s=deadline_s)
    return {"ok": r.ok, "prompt_tokens": len(prompt), "completion_tokens": r.completion_tokens,
            "ttft_s": r.ttft_s, "latency_s": r.latency_s, "error": r.error,
            "decode_tok_s": decode_tok_s(r.latency_s, r.ttft_s, r.completion_tokens) if r.ok else None}


def decode_point(url: str, streams: int, new: int, repeat: int) -> dict:
    """`streams` concurrent 512-token prompts, `repeat` rounds, fresh prompts each (decode_median)."""
    rounds = []
    for rep in range(repeat):
        with ThreadPoolExecutor(streams) as ex:
            rounds.append(list(ex.map(lambda k, r=rep: one(url, ids(512, 1000 + k + 7919 * r), new), range(streams))))
    return decode_median(streams, rounds)


def decode_median(streams: int, rounds: list[list[dict]]) -> dict:
    """The median round's per-stream and aggregate rates (each its own median); every request of every round under
    "requests", so one failed request marks the point."""
    per = []
    for rs in rounds:
        rates = [r["decode_tok_s"] for r in rs if r["decode_tok_s"]]
        per.append({"per_stream_tok_s": sum(rates) / len(rates) if rates else None,
                    "aggregate_tok_s": sum(rates) if rates else None})

    def med(key):
        vals = [r[key] for r in per if r[key] is not None]
        return statistics.median(vals) if vals else None
    out = {"streams": streams, "per_stream_tok_s": med("per_stream_tok_s"), "aggregate_tok_s": med("aggregate_tok_s"),
           "requests": [q for rs in rounds for q in rs]}
    if len(rounds) > 1:
        out["rounds"] = per
    return out


def ttft_point(url: str, n: int, new: int, repeat: int, deadline_s: float) -> dict:
    """One n-token prompt per round, `repeat` rounds, fresh prompts each (ttft_median)."""
    return ttft_median([one(url, ids(n, 2000 + n + 7919 * rep), new, deadline_s=deadline_s) for rep in range(repeat)])


def ttft_median(rounds: list[dict]) -> dict:
    """The median-TTFT round, its TTFT and decode rate replaced by the medians over the rounds (each figure its own
    median); ok only when every round was (else the first failed round)."""
    if len(rounds) == 1:
        return rounds[0]
    bad = [r for r in rounds if not (r["ok"] and r["ttft_s"])]
    mid = bad[0] if bad else sorted(rounds, key=lambda r: r["ttft_s"])[(len(rounds) - 1) // 2]
    rates = [r["decode_tok_s"] for r in rounds if r["decode_tok_s"]]
    return {**mid, "ok": not bad, "ttft_s": mid["ttft_s"] if bad else statistics.median(r["ttft_s"] for r in rounds),
            "decode_tok_s": statistics.median(rates) if rates and not bad else None,
            "rounds": [{k: r[k] for k in ("ok", "ttft_s", "decode_tok_s", "completion_tokens", "error")} for r in rounds]}


def merge_starts(probes: list[dict], how: str) -> dict:
    """One point's probes from N separate server starts (each its own round) as one probe, each figure the median
    over the starts as --repeat takes it within one start (decode_median, ttft_median), every round kept. A figure
    missing from any start is left out: a median of fewer starts than the others would read as the same kind."""
    if any(p.get("repeat", 1) != 1 for p in probes):
        raise ValueError("merge_starts takes one round per start (moe_probe.py --repeat 1)")
    first = probes[0]
    out = {**{k: v for k, v in first.items() if k not in ("decode", "ttft")}, "repeat": len(probes),
           "rounds_are": how, "dates": [p.get("date") for p in probes], "decode": [], "ttft": []}

    def requests(d: dict) -> list[dict]:
        return d.get("requests") or []
    for d in first.get("decode", []):
        same = [next((e for e in p.get("decode", []) if e.get("streams") == d["streams"]), None) for p in probes]
        if all(same):
            out["decode"].append(decode_median(d["streams"], [requests(e) for e in same]))
    for t in first.get("ttft", []):
        same = [next((e for e in p.get("ttft", []) if e.get("prompt_tokens") == t["prompt_tokens"]), None)
                for p in probes]
        if all(e and "ok" in e for e in same):
            out["ttft"].append(ttft_median(same))
    return out


def greedy_point(url: str, seed: int, new: int) -> dict:
    """One greedy request with each generated token's id and log-probability (SGLang's return_logprob)."""
    import httpx
    body = {"input_ids": ids(512, seed), "return_logprob": True,
            "sampling_params": {"max_new_tokens": new, "temperature": 0.0, "ignore_eos": True}}
    try:
        r = httpx.post(f"{url}/generate", json=body, timeout=300)
        meta = r.json().get("meta_info", {}) if r.status_code == 200 else {}
    except (httpx.HTTPError, ValueError) as e:
        return {"seed": seed, "error": f"{type(e).__name__}: {e}"}
    rows = meta.get("output_token_logprobs") or []     # [logprob, token id, text] per generated token
    return {"seed": seed, "tokens": [row[1] for row in rows], "logprobs": [row[0] for row in rows],
            "error": "" if rows else f"HTTP {r.status_code}: no output_token_logprobs"}


def _post(url: str, path: str) -> str:
    """One of SGLang's control endpoints: its status and the start of its body."""
    import httpx
    try:
        r = httpx.post(f"{url}{path}", timeout=120)
        return f"{r.status_code} {r.text[:120]}"
    except httpx.HTTPError as e:
        return f"error {type(e).__name__}: {e}"


def profile_point(url: str, streams: int, steps: int, new: int, out_dir: Path) -> dict:
    """SGLang's own profiler over `steps` decode steps of `streams` concurrent 512-token requests (prefill and decode
    traced apart: profile_by_stage), the decode trace summarized by decode_profile.kineto (the per-token budget)."""
    import httpx
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from decode_profile import kineto, load
    out_dir.mkdir(parents=True, exist_ok=True)
    pid = f"decode-s{streams}-{int(time.time())}"
    body = {"output_dir": str(out_dir), "num_steps": steps, "activities": ["CPU", "GPU"], "profile_by_stage": True,
            "with_stack": False, "record_shapes": False, "profile_id": pid}
    r = httpx.post(f"{url}/start_profile", json=body, timeout=60)
    if r.status_code != 200:
        return {"streams": streams, "error": f"/start_profile: HTTP {r.status_code} {r.text[:200]}"}
    with ThreadPoolExecutor(streams) as ex:
        reqs = list(ex.map(lambda k: one(url, ids(512, 5000 + k), new), range(streams)))
    res: dict = {"streams": streams, "steps_asked": steps, "requests": reqs}
    trace = None
    t0 = time.time()
    while time.time() - t0 < 180:         # the scheduler writes the trace after the last profiled step
        found = sorted(out_dir.glob(f"{pid}*DECODE*.trace.json.gz"))
        if found:
            size = found[0].stat().st_size
            time.sleep(3)
            if found[0].stat().st_size == size:
                trace = found[0]
                break
        time.sleep(2)
    if trace is None:
        return {**res, "error": f"no decode trace in {out_dir} after 180 s: {[p.name for p in out_dir.iterdir()]}"}
    res["trace"] = trace.name
    res["trace_bytes"] = trace.stat().st_size
    try:
        res["budget"] = kineto(load(trace))
    except (ValueError, KeyError, OSError, EOFError) as e:
        res["error"] = f"{type(e).__name__}: {e}"
    return res


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default="http://127.0.0.1:30000")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--streams", default="1,2,4")
    ap.add_argument("--new-tokens", type=int, default=256)
    ap.add_argument("--ttft", default="512,8192,30000", help="prompt lengths for TTFT ('' to skip)")
    ap.add_argument("--ttft-new-tokens", type=int, default=16, help="tokens generated after each TTFT prompt "
                    "(their decode rate is the decode at that depth)")
    ap.add_argument("--api", choices=("sglang", "llamacpp"), default="sglang")
    ap.add_argument("--label", default="")
    ap.add_argument("--deadline", type=float, default=200, help="skip a TTFT point the last prefill rate says exceeds this")
    ap.add_argument("--gen-sweep", default="", help="single-stream decodes after a 512-token prompt generating each "
                    "of these token counts (e.g. 32,64,128,256): does the rate depend on how long a request runs?")
    ap.add_argument("--repeat", type=int, default=1, help="rounds of every decode and TTFT point, fresh prompts each; "
                    "the figures are the medians")
    ap.add_argument("--again", action="store_true", help="after the TTFT points, the single-stream decode once more "
                    "(same prompt length, new tokens): does the server decode faster minutes after start?")
    ap.add_argument("--profile-steps", type=int, default=0, help="before the points: SGLang's profiler over this many "
                    "decode steps at each --profile-streams count, the trace summarized (decode_profile.py)")
    ap.add_argument("--profile-streams", default="1,4")
    ap.add_argument("--profile-dir", type=Path, help="where SGLang writes the traces (default: beside --out)")
    ap.add_argument("--seed-offset", type=int, default=0, help="shift every prompt's seed: other prompts of the same "
                    "lengths (the prompts a placement was recorded on, kept apart from the ones it is measured on)")
    ap.add_argument("--greedy-logprobs", type=int, default=0, metavar="N", help="N seeded 512-token prompts decoded "
                    "greedily (32 tokens) with each token's log-probability, under `greedy` (placement_check.py "
                    "compares two servers' answers)")
    ap.add_argument("--record-experts", action="store_true", help="SGLang's expert-distribution recorder around "
                    "every point (a server started with --expert-distribution-recorder-mode stat): start before, "
                    "stop and dump after (the .pt lands in the server's $SGLANG_EXPERT_DISTRIBUTION_RECORDER_DIR)")
    a = ap.parse_args()
    global API, SEED_OFFSET
    API, SEED_OFFSET = a.api, a.seed_offset
    if a.repeat < 1:
        ap.error("--repeat must be at least 1")
    res: dict = {"label": a.label, "api": a.api, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                 "repeat": a.repeat, "decode": [], "ttft": []}
    one(a.url, ids(64, 99), 8)                          # warm
    if a.record_experts:
        res["record_experts"] = {"start": _post(a.url, "/start_expert_distribution_record")}
    if a.profile_steps:
        pdir = a.profile_dir or a.out.parent / f"{a.label or 'probe'}.profile"
        for n in [int(x) for x in a.profile_streams.split(",") if x]:
            pr = profile_point(a.url, n, a.profile_steps, a.profile_steps + 16, pdir)
            res.setdefault("profile", []).append(pr)
            b = pr.get("budget") or {}
            print(f"profile streams={n}: period {b.get('period_ms')} ms, GPU busy {b.get('gpu_busy_ms')} ms, idle "
                  f"{b.get('gpu_idle_in_graph_ms')} ms, outside {b.get('outside_graph_ms')} ms {pr.get('error', '')}",
                  flush=True)
            a.out.write_text(json.dumps(res, indent=1))
    for n in [int(x) for x in a.streams.split(",") if x]:
        res["decode"].append(decode_point(a.url, n, a.new_tokens, a.repeat))
        print(f"decode streams={n}: {res['decode'][-1]['per_stream_tok_s']}", flush=True)
        a.out.write_text(json.dumps(res, indent=1))
    rate = None
    for n in [int(x) for x in a.ttft.split(",") if x]:
        if rate and n / rate > a.deadline:
            res["ttft"].append({"prompt_tokens": n, "skipped": f"projected {n / rate:.0f} s at {rate:.0f} tok/s prefill"})
            print(f"ttft {n}: skipped ({n / rate:.0f} s projected)", flush=True)
            continue
        r = ttft_point(a.url, n, a.ttft_new_tokens, a.repeat, a.deadline * 1.5)
        if r["ok"] and r["ttft_s"]:
            rate = n / r["ttft_s"]
        res["ttft"].append(r)
        print(f"ttft {n}: {r['ttft_s']} ok={r['ok']} {r['error'] or ''}", flush=True)
        a.out.write_text(json.dumps(res, indent=1))
    for k, n in enumerate(int(x) for x in a.gen_sweep.split(",") if x):
        r = one(a.url, ids(512, 4000 + k), n)
        res.setdefault("gen_sweep", []).append(r)
        print(f"gen sweep {n} tokens: {r['decode_tok_s']}", flush=True)
        a.out.write_text(json.dumps(res, indent=1))
    for k in range(a.greedy_logprobs):
        res.setdefault("greedy", []).append(greedy_point(a.url, 5000 + k, 32))
        a.out.write_text(json.dumps(res, indent=1))
    if a.greedy_logprobs:
        print(f"greedy: {sum(1 for g in res.get('greedy', []) if g.get('tokens'))} of {a.greedy_logprobs} prompts "
              "answered", flush=True)
    if a.record_experts:
        res["record_experts"] |= {"stop": _post(a.url, "/stop_expert_distribution_record"),
                                  "dump": _post(a.url, "/dump_expert_distribution_record")}
        print(f"expert distribution: {res['record_experts']}", flush=True)
        a.out.write_text(json.dumps(res, indent=1))
    if a.again:
        r = one(a.url, ids(512, 3000), a.new_tokens)
        res["decode_again"] = {"streams": 1, "per_stream_tok_s": r["decode_tok_s"], "requests": [r]}
        print(f"decode again, streams=1: {r['decode_tok_s']}", flush=True)
        a.out.write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
