"""A bench run as files: the result JSON (every sample + summary), a markdown report, PNG plots.

`build_result` and the markdown renderers are pure; `write_plots*` draw with matplotlib's Agg
backend (no display needed) and only they touch the disk.
"""
from __future__ import annotations

import math
from pathlib import Path

from vramkit.bench.summary import HEADLINES, compare
from vramkit.core.bench_stats import ecdf

SCHEMA = "vramkit.bench/1"

# /server_info keys worth keeping with a result (server args + scheduler info, SGLang 0.5.15.post1)
SERVER_KEYS = (
    "version", "model_path", "served_model_name", "quantization", "dtype", "load_format",
    "context_length", "kv_cache_dtype", "mem_fraction_static", "max_total_num_tokens",
    "max_req_input_len", "max_running_requests", "chunked_prefill_size", "max_prefill_tokens",
    "page_size", "tp_size", "cpu_offload_gb", "enable_hierarchical_cache", "hicache_size",
    "hicache_ratio", "hicache_write_policy", "disable_cuda_graph", "cuda_graph_max_bs_decode",
    "attention_backend", "json_model_override_args", "disable_radix_cache",
    "skip_tokenizer_init", "tool_call_parser", "reasoning_parser",
)


def server_subset(info: dict) -> dict:
    """The facts of /server_info a reader needs to know what was measured."""
    out = {k: info.get(k) for k in SERVER_KEYS if k in info}
    states = info.get("internal_states") or []
    if states and isinstance(states[0], dict) and "memory_usage" in states[0]:
        out["memory_usage_gb"] = states[0]["memory_usage"]  # SGLang's own GB figures per part
    return out


def default_label(server: dict) -> str:
    model = Path(str(server.get("model_path") or "model")).name
    kv = server.get("kv_cache_dtype") or "auto"
    parts = [model, f"kv-{kv}", f"mf{server.get('mem_fraction_static')}"]
    if server.get("enable_hierarchical_cache"):
        parts.append("hicache")
    return "-".join(str(p) for p in parts)


def build_result(*, label: str, url: str, date_utc: str, tool_version: str, device_label: str,
                 server: dict, planner: dict | None, config: dict, suites: dict,
                 summary: dict) -> dict:
    return {
        "schema": SCHEMA,
        "tool": {"name": "vramkit bench", "version": tool_version},
        "label": label,
        "date_utc": date_utc,
        "url": url,
        "device": {"label": device_label or "unlabelled"},
        "server": server,
        "planner": planner,
        "config": config,
        "suites": suites,
        "summary": summary,
    }


# --- formatting ------------------------------------------------------------------------------------
def fmt_s(x: float | None) -> str:
    """Seconds for a reader: ms below 1 s."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x * 1000:.1f} ms" if x < 1 else f"{x:.2f} s"


def fmt_num(x, digits: int = 1) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if isinstance(x, int):
        return f"{x:,}"
    return f"{x:,.{digits}f}"


def fmt_share(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:.1f} %"


def _fmt_unit(x, unit: str) -> str:
    if unit == "s":
        return fmt_s(x)
    if unit == "share":
        return fmt_share(x)
    if unit in ("tokens", "requests"):
        return fmt_num(x)
    return fmt_num(x)


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(head) + " |", "| " + " | ".join("---" for _ in head) + " |"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return lines


def _cell_error(msg: str, limit: int = 90) -> str:
    msg = (msg or "").replace("|", "/").replace("\n", " ")
    return msg if len(msg) <= limit else msg[: limit - 1] + "…"


# --- markdown --------------------------------------------------------------------------------------
def render_markdown(result: dict) -> str:
    s, srv = result["summary"], result["server"]
    hicache = ("on" + (f" ({srv.get('hicache_size')} GB host pool)" if srv.get("hicache_size") else "")
               if srv.get("enable_hierarchical_cache") else "off")
    out = [
        f"# vramkit bench: {result['label']}",
        "",
        f"{result['date_utc']} · {result['device']['label']} · SGLang {srv.get('version', '?')} · "
        f"{result['tool']['name']} {result['tool']['version']}",
        "",
        f"Model `{srv.get('model_path', '?')}` · KV cache {srv.get('kv_cache_dtype', '?')} · "
        f"mem fraction {srv.get('mem_fraction_static', '?')} · KV pool "
        f"{fmt_num(srv.get('max_total_num_tokens'))} tokens · max input "
        f"{fmt_num(srv.get('max_req_input_len'))} tokens · hierarchical cache {hicache}",
    ]
    if "latency" in s:
        lat = s["latency"]
        out += ["", f"## Single request ({lat['prompt_tokens']} in, {lat['output_tokens']} out, "
                    f"{lat['ok']} of {lat['ok'] + lat['failed']} completed)", ""]
        out += _table(["metric", "p50", "p95", "max"], [
            [name, fmt_s(lat[key]["p50"]), fmt_s(lat[key]["p95"]), fmt_s(lat[key]["max"])]
            for name, key in (("time to first token", "ttft_s"), ("time per output token", "tpot_s"),
                              ("inter-token latency", "itl_s"))])
        out += ["", f"Single-stream decode: {fmt_num(lat['decode_tok_s_p50'])} tok/s (1 / TPOT, median)."]
    if "concurrency" in s:
        con = s["concurrency"]
        out += ["", f"## Concurrent requests ({con['prompt_tokens']} in, {con['output_tokens']} out, "
                    f"median of {con['rounds']} round(s))", ""]
        out += _table(["requests", "decode tok/s (aggregate)", "decode tok/s (per request)",
                       "output tok/s (incl. prefill)", "TTFT p50", "failed"], [
            [str(lv["concurrency"]), fmt_num(lv["decode_tok_s_aggregate"]),
             fmt_num(lv["decode_tok_s_per_request"]), fmt_num(lv["output_tok_s"]),
             fmt_s(lv["ttft_s_p50"]), str(lv["failed"])] for lv in con["levels"]])
    if "capacity" in s:
        cap = s["capacity"]
        out += ["", f"## Simultaneous long requests ({fmt_num(cap['prompt_tokens'])} in, "
                    f"{cap['output_tokens']} out)", "",
                f"{cap['requests']} sent at once (the KV pool of {fmt_num(cap['kv_pool_tokens'])} tokens "
                f"fits {cap['fit_by_pool']}): at most **{cap['max_simultaneous']}** decoded at the same "
                f"time; {cap['ok']} completed, {cap['failed']} failed, {cap['retractions']} retraction(s); "
                f"TTFT p50 {fmt_s(cap['ttft_s']['p50'])}, max {fmt_s(cap['ttft_s']['max'])}."]
    if "context" in s:
        ctx = s["context"]
        out += ["", f"## Context sweep (up to the longest accepted prompt, "
                    f"{fmt_num(ctx['max_accepted_input_tokens'])} tokens)", ""]
        rows = []
        for p in ctx["points"]:
            status = "completed" if p["ok"] else ("timed out" if p["timed_out"] else "refused")
            rows.append([fmt_num(p["prompt_tokens"]), status, fmt_s(p["ttft_s"]),
                         fmt_num(p["decode_tok_s"]), fmt_num(p["output_tokens"]),
                         _cell_error(p["error"])])
        out += _table(["prompt tokens", "result", "TTFT (prefill)", "decode tok/s", "output tokens",
                       "SGLang said"], rows)
        out += ["", f"Longest request completed: **{fmt_num(ctx['longest_completed_prompt_tokens'])}** "
                    "prompt tokens."]
    if "multiturn" in s:
        mt = s["multiturn"]
        plural = "s" if mt["sessions"] != 1 else ""
        out += ["", f"## Multi-turn sessions ({mt['sessions']} session{plural} × {mt['turns']} turns, "
                    f"{fmt_num(mt['history_tokens_total'])} history tokens against a KV pool of "
                    f"{fmt_num(mt['kv_pool_tokens'])})", ""]
        out += _table(["requests", "TTFT p50", "TTFT p95", "prefix hit ratio"], [
            ["all turns", fmt_s(mt["ttft_s"]["p50"]), fmt_s(mt["ttft_s"]["p95"]),
             fmt_share(mt["prefix_hit_ratio"])],
            ["revisits (turn > 0)", fmt_s(mt["ttft_revisit_s"]["p50"]),
             fmt_s(mt["ttft_revisit_s"]["p95"]), fmt_share(mt["revisit_hit_ratio"])]])
        host = ("" if mt["host_hit_tokens"] is None
                else f"; {fmt_num(mt['host_hit_tokens'])} prompt tokens came from the host cache")
        out += ["", f"Throughput: {fmt_num(mt['requests_per_s'], 2)} requests/s, "
                    f"{fmt_num(mt['prompt_tok_s'], 0)} prompt tok/s over {fmt_s(mt['wall_s'])}; "
                    f"{mt['ok']} completed, {mt['failed']} failed{host}."]
    if "agent" in s:
        ag = s["agent"]
        if ag.get("skipped"):
            out += ["", f"## Agent turn: skipped ({ag['skipped']})"]
        else:
            p = (result.get("suites", {}).get("agent") or {}).get("params", {})
            out += ["", f"## Agent turn ({ag['turns']} turns, a {fmt_num(ag['prefix_words'])}-word prefix, "
                        f"{p.get('tools', '?')} tools, prompts of {', '.join(fmt_num(t) for t in ag['prompt_tokens'])} "
                        "tokens)", ""]
            out += _table(["request", "TTFT"], [
                ["turn 0, empty cache", fmt_s(ag["ttft_cold_s"])],
                ["later turns (prefix cached), p50", fmt_s(ag["ttft_warm_s"]["p50"])],
                ["last turn after a cache flush", fmt_s(ag["last_turn_ttft_cold_s"])],
                ["last turn again (cached)", fmt_s(ag["last_turn_ttft_warm_s"])]])
            speed = ag.get("prefix_cache_speedup")
            out += ["", (f"The prefix cache made the same turn's first token **{speed:.1f}x** faster. "
                         if speed else "") + ("A request twice the input limit was refused: "
                                              f"{_cell_error(ag['over_limit_error'] or '', 200)}"
                                              if ag.get("over_limit_refused") else
                                              "The over-limit request was NOT refused.")]
    roof = s.get("roofline") or {}
    if roof.get("single_stream_decode_tok_s") is not None:
        out += ["", "## Roofline", ""]
        if roof.get("ratio") is not None:
            out += [f"Single-stream decode {fmt_num(roof['single_stream_decode_tok_s'])} tok/s against a "
                    f"bandwidth ceiling of {fmt_num(roof['decode_tok_s_ceiling'])} tok/s "
                    f"({roof['ceiling_source']}): **{fmt_share(roof['ratio'])}** of the roof."]
        else:
            out += [f"Single-stream decode {fmt_num(roof['single_stream_decode_tok_s'])} tok/s; no "
                    "ceiling given (--planner-json or --decode-ceiling-tok-s)."]
    failed = {name: v.get("errors") for name, v in s.items() if isinstance(v, dict) and v.get("errors")}
    if failed:
        out += ["", "## Errors seen", ""]
        for name, errs in failed.items():
            out += [f"- {name}: " + "; ".join(_cell_error(e, 160) for e in errs or [])]
    truncated = [n for n, su in result.get("suites", {}).items() if su.get("truncated")]
    if truncated:
        out += ["", f"Time budget reached (fewer requests than planned): {', '.join(truncated)}."]
    return "\n".join(out) + "\n"


def render_compare_markdown(results: list[dict]) -> str:
    cmp = compare(results)
    head = ["metric"] + cmp["labels"]
    rows = []
    for row in cmp["rows"]:
        unit = "" if row["unit"] in ("s", "share") else f" ({row['unit']})"
        cells = [f"{row['label']}{unit}"]
        for i, v in enumerate(row["values"]):
            cell = _fmt_unit(v, row["unit"])
            ch = row["change_pct"][i]
            if i > 0 and ch is not None:
                cell += f" ({ch:+.0f} %)"
            cells.append(cell)
        rows.append(cells)
    lines = ["# vramkit bench: A/B", "",
             "Changes are against the first column. " +
             " · ".join(f"{r['label']}: {r['date_utc']}, {r['device']['label']}" for r in results),
             ""]
    lines += _table(head, rows)
    if cmp["config_differs"]:
        lines += ["", "Not like for like: the runs' settings differ in "
                      + ", ".join(f"`{k}`" for k in cmp["config_differs"]) + "."]
    return "\n".join(lines) + "\n"


# --- plots -----------------------------------------------------------------------------------------
def _pyplot():
    import matplotlib  # noqa: PLC0415 - the bench extra: only plotting needs it

    matplotlib.use("Agg")  # files only; the GPU host has no display
    import matplotlib.pyplot as plt  # noqa: PLC0415 - after use("Agg"), as matplotlib requires

    return plt


def _plot_context(ax, result: dict, label: str | None = None) -> None:
    pts = (result["summary"].get("context") or {}).get("points", [])
    ok = [p for p in pts if p["ok"] and p["ttft_s"] is not None]
    bad = [p for p in pts if not p["ok"]]
    line = ax.plot([p["prompt_tokens"] for p in ok], [p["ttft_s"] for p in ok], "o-",
                   label=label or "completed")
    if bad:
        ax.plot([p["prompt_tokens"] for p in bad], [0] * len(bad), "x", ms=10,
                color=line[0].get_color(), label=None if label else "refused / failed")
    ax.set_xscale("log", base=2)
    ticks = sorted({p["prompt_tokens"] for p in pts})
    if ticks:
        ax.set_xticks(ticks)
        ax.set_xticklabels([_k(t) for t in ticks], fontsize=7)
        ax.minorticks_off()
    ax.set_xlabel("prompt tokens")
    ax.set_ylabel("time to first token (s)")
    ax.set_title("TTFT vs context")
    ax.grid(True, alpha=0.3)


def _k(tokens: int) -> str:
    """1024 -> '1K', 30597 -> '29.9K' (binary K, as the sweep doubles from 1024)."""
    k = tokens / 1024
    return f"{k:.0f}K" if abs(k - round(k)) < 0.05 else f"{k:.1f}K"


def _plot_concurrency(ax, result: dict, label: str | None = None) -> None:
    lv = (result["summary"].get("concurrency") or {}).get("levels", [])
    xs = [x["concurrency"] for x in lv]
    ax.plot(xs, [x["decode_tok_s_aggregate"] for x in lv], "o-",
            label=f"{label}: aggregate" if label else "aggregate")
    ax.plot(xs, [x["decode_tok_s_per_request"] for x in lv], "s--",
            label=f"{label}: per request" if label else "per request")
    ax.set_xscale("log", base=2)
    ax.set_xticks(xs or [1])
    ax.set_xticklabels([str(x) for x in xs] or ["1"])
    ax.set_xlabel("concurrent requests")
    ax.set_ylabel("decode tokens/s")
    ax.set_title("Decode throughput vs concurrency")
    ax.grid(True, alpha=0.3)


def _plot_multiturn_cdf(ax, result: dict, label: str | None = None,
                        first_visits: bool = True) -> None:
    samples = (result.get("suites", {}).get("multiturn") or {}).get("samples", [])
    for revisit, style in ((True, "-"), (False, ":"))[: 2 if first_visits else 1]:
        vals = [s["ttft_s"] for s in samples
                if s.get("ok") and s.get("ttft_s") is not None and (s["turn"] > 0) == revisit]
        if not vals:
            continue
        xs, ys = ecdf(vals)
        xs, ys = [xs[0]] + xs, [0.0] + ys  # the step starts from zero
        name = "revisits" if revisit else "first visits"
        ax.step(xs, ys, style, where="post", label=f"{label}: {name}" if label else name)
    ax.set_xlabel("time to first token (s)")
    ax.set_ylabel("share of requests")
    ax.set_title("Multi-turn TTFT CDF" + ("" if first_visits else " (revisits)"))
    ax.set_ylim(0, 1.02)
    ax.grid(True, alpha=0.3)


def _save(fig, path: Path, plt) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def write_plots(result: dict, stem: Path) -> list[Path]:
    """One PNG per measured suite that has a picture: <stem>-context/-concurrency/-multiturn.png."""
    plt = _pyplot()
    written = []
    for suite, drawer, suffix in (("context", _plot_context, "context"),
                                  ("concurrency", _plot_concurrency, "concurrency"),
                                  ("multiturn", _plot_multiturn_cdf, "multiturn")):
        if suite not in result["summary"]:
            continue
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        drawer(ax, result)
        ax.legend(fontsize=8)
        fig.suptitle(f"{result['label']} · {result['device']['label']}", fontsize=8)
        written.append(_save(fig, stem.with_name(f"{stem.name}-{suffix}.png"), plt))
    return written


def write_compare_plot(results: list[dict], path: Path) -> Path:
    """One PNG: multi-turn TTFT CDF, decode tok/s vs concurrency and TTFT vs context, each run a colour."""
    plt = _pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.6))
    panels = (("multiturn", lambda ax, r: _plot_multiturn_cdf(ax, r, r["label"], first_visits=False)),
              ("concurrency", lambda ax, r: _plot_concurrency(ax, r, r["label"])),
              ("context", lambda ax, r: _plot_context(ax, r, r["label"])))
    for ax, (suite, draw) in zip(axes, panels, strict=True):
        for r in results:
            if suite in r["summary"]:      # a run without the suite would only add empty legend entries
                draw(ax, r)
        absent = [r["label"] for r in results if suite not in r["summary"]]
        if absent:
            ax.set_title(ax.get_title() + f"\n(not measured: {', '.join(absent)})", fontsize=10)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    devices = " / ".join(dict.fromkeys(r["device"]["label"] for r in results))
    fig.suptitle(" vs ".join(r["label"] for r in results) + f" · {devices}", fontsize=9)
    return _save(fig, path, plt)


__all__ = ["HEADLINES", "build_result", "render_markdown", "render_compare_markdown", "write_plots",
           "write_compare_plot", "server_subset", "default_label"]
