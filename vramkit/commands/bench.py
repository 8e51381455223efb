"""`vramkit bench`: measure a running SGLang server; `vramkit bench --compare A.json B.json`: A/B.

A run writes one JSON (every raw sample, the summary, the server's /server_info subset, the device
label and the planner's prediction), a markdown report beside it and PNG plots. Progress goes to
stderr; `--json` prints the summary to stdout.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
import threading
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path

from vramkit import __version__, catalog
from vramkit.bench.workloads import ANY_MODEL_VOCAB
from vramkit.errors import Exit, VramkitError

RESULTS_DIR = Path("benchmarks/results")
DEFAULT_URL = f"http://127.0.0.1:{catalog.sglang().port}"  # config/sglang.toml


def register(subparsers) -> None:
    from vramkit.bench.runner import SUITES

    p = subparsers.add_parser(
        "bench", help="benchmark a running SGLang server (TTFT, TPOT, concurrency, context, multi-turn)",
        description="Benchmark a running SGLang server and write JSON, markdown and PNG plots; "
                    "or compare saved results with --compare.")
    p.add_argument("--url", default=os.environ.get("VRAMKIT_SGLANG_URL", DEFAULT_URL),
                   help="SGLang server (env VRAMKIT_SGLANG_URL; default %(default)s)")
    p.add_argument("--suites", default=",".join(SUITES),
                   help=f"comma-separated, from {','.join(SUITES)}, or all (default: all)")
    p.add_argument("--quick", action="store_true", help="fewer repeats, shorter outputs")
    p.add_argument("--label", help="name of this run in tables and plots (default: from the server)")
    p.add_argument("--out", type=Path,
                   help="result JSON path (default benchmarks/results/<UTC time>-<label>.json); with "
                        "--compare, the markdown path")
    p.add_argument("--device-label", default=os.environ.get("VRAMKIT_DEVICE_LABEL", ""),
                   help='what ran it, e.g. "H100 80GB HBM3, memory emulated at 16 GB" '
                        "(env VRAMKIT_DEVICE_LABEL)")
    p.add_argument("--planner-json", type=Path,
                   help="the planner's prediction (vramkit plan --json) to embed; its "
                        "decode_tok_s_ceiling gives the roofline")
    p.add_argument("--decode-ceiling-tok-s", type=float,
                   help="bandwidth ceiling for single-stream decode (overrides the planner's)")
    p.add_argument("--vocab-size", type=int, default=ANY_MODEL_VOCAB,
                   help="token ids are drawn below this (default %(default)s; Qwen2.5: 151000)")
    p.add_argument("--seed", type=int, default=0, help="workload seed: same seed, same traffic")
    p.add_argument("--kv-pool-tokens", type=int,
                   help="GPU KV pool to size the multi-turn sessions against (default: the server's "
                        "max_total_num_tokens)")
    p.add_argument("--sessions", type=int, help="multi-turn sessions (default: enough to exceed the pool)")
    p.add_argument("--turns", type=int, help="multi-turn turns per session (default 3, quick 2)")
    p.add_argument("--request-timeout-s", type=float, help="whole-request limit, short requests (120)")
    p.add_argument("--long-request-timeout-s", type=float,
                   help="whole-request limit, context sweep / capacity / multi-turn (600)")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    p.add_argument("--compare", nargs="+", type=Path, metavar="RESULT_JSON",
                   help="compare saved results (the first is the baseline) instead of running")
    p.add_argument("--json", action="store_true", help="print the summary as JSON on stdout")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.compare:
        return _run_compare(args)
    return _run_bench(args)


# --- a run -----------------------------------------------------------------------------------------
def _config(args):
    from dataclasses import replace

    from vramkit.bench.runner import SUITES, BenchConfig

    suites = tuple(s.strip() for s in args.suites.split(",") if s.strip())
    if suites == ("all",):
        suites = SUITES
    unknown = [s for s in suites if s not in SUITES]
    if unknown or not suites:
        raise VramkitError(f"unknown suite(s) {', '.join(unknown) or '(none)'}",
                           f"pick from {','.join(SUITES)}", Exit.BAD_INPUT)
    if args.vocab_size < 2:
        raise VramkitError(f"--vocab-size {args.vocab_size} is too small",
                           "give the model's vocabulary size", Exit.BAD_INPUT)
    cfg = BenchConfig(suites=suites, vocab_size=args.vocab_size, seed=args.seed)
    if args.quick:
        cfg = cfg.quick()
    over = {"kv_pool_tokens": args.kv_pool_tokens, "multiturn_sessions": args.sessions,
            "multiturn_turns": args.turns, "request_timeout_s": args.request_timeout_s,
            "long_request_timeout_s": args.long_request_timeout_s}
    return replace(cfg, **{k: v for k, v in over.items() if v is not None})


def _read_json(path: Path, what: str) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise VramkitError(f"cannot read {what} {path} ({e})", "pass a readable JSON file",
                           Exit.BAD_FILE) from None


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-") or "run"


def _connect(url: str):
    from vramkit.adapters.sglang_http import SglangClient

    client = SglangClient(url)
    status = client.health()
    if status is None:
        client.close()
        raise VramkitError(f"SGLang at {url} is unreachable",
                           "start it (make start-qwen-optimized, or vramkit up --preset optimized) or pass --url",
                           Exit.SERVICE_DOWN)
    if status != 200:
        client.close()
        raise VramkitError(f"SGLang at {url} is not ready (/health answered {status})",
                           "wait for it to finish starting, then rerun", Exit.SERVICE_DOWN)
    info = client.server_info()
    if "max_req_input_len" not in info:
        client.close()
        raise VramkitError(f"{url}/server_info has no max_req_input_len: not SGLang 0.5.x?",
                           "point --url at an SGLang server", Exit.SERVICE_DOWN)
    return client, info


class RichProgress:
    """The runner's progress callbacks drawn as one rich bar per suite on stderr (thread-safe)."""

    def __init__(self, progress):
        self.p = progress
        self.task = None
        self.lock = threading.Lock()

    def suite(self, name: str, total: int) -> None:
        with self.lock:
            if self.task is not None:
                self.p.update(self.task, completed=self.p.tasks[self.task].total)
            self.task = self.p.add_task(name, total=total, note="")

    def step(self, note: str = "") -> None:
        with self.lock:
            self.p.update(self.task, advance=1, note=note)


def _run_bench(args) -> int:
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
    )

    from vramkit.bench.report import (
        build_result,
        default_label,
        render_markdown,
        server_subset,
    )
    from vramkit.bench.runner import BenchRunner
    from vramkit.bench.summary import summarize_run

    cfg = _config(args)
    planner = _read_json(args.planner_json, "planner JSON") if args.planner_json else None
    client, info = _connect(args.url)
    server = server_subset(info)
    label = args.label or default_label(server)
    now = datetime.now(UTC)
    err = Console(stderr=True)
    err.print(f"[bold]vramkit bench[/] {label}: {args.url}, suites {', '.join(cfg.suites)}"
              f"{' (quick)' if args.quick else ''}")
    columns = (SpinnerColumn(), TextColumn("{task.description:<12}"), BarColumn(),
               MofNCompleteColumn(), TimeElapsedColumn(), TextColumn("{task.fields[note]}"))
    if "multiturn" in cfg.suites:
        plan = BenchRunner(client, cfg, info).multiturn_plan()
        err.print(f"multi-turn: {plan.sessions} sessions × {plan.turns} turns, "
                  f"{plan.total_history_tokens():,} history tokens against a KV pool of "
                  f"{int(cfg.kv_pool_tokens or info.get('max_total_num_tokens') or 0):,}"
                  + ("" if cfg.multiturn_sessions else
                     f" (for an A/B, pin it on both runs: --sessions {plan.sessions})"))
    try:
        with Progress(*columns, console=err, transient=False) as bar:
            suites = BenchRunner(client, cfg, info, RichProgress(bar)).run()
    finally:
        client.close()
    summary = summarize_run(suites, planner, args.decode_ceiling_tok_s)
    result = build_result(label=label, url=args.url, date_utc=now.isoformat(timespec="seconds"),
                          tool_version=__version__, device_label=args.device_label, server=server,
                          planner=planner, config=asdict(cfg), suites=suites, summary=summary)
    path = args.out or RESULTS_DIR / f"{now.strftime('%Y%m%dT%H%M%SZ')}-{_slug(label)}.json"
    written = _write_result(result, path, plots=not args.no_plots)
    if args.json:
        json.dump({"label": label, "files": [str(p) for p in written], "summary": summary},
                  sys.stdout, indent=2, default=str)
        print()
    else:
        print(render_markdown(result))
        for p in written:
            print(f"wrote {p}")
    return int(Exit.OK)


def _write_result(result: dict, path: Path, plots: bool) -> list[Path]:
    from vramkit.bench.report import render_markdown, write_plots

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result, indent=1, default=str) + "\n")
        md = path.with_suffix(".md")
        md.write_text(render_markdown(result))
        written = [path, md]
        if plots:
            written += write_plots(result, path.with_suffix(""))
    except OSError as e:
        raise VramkitError(f"cannot write results to {path.parent} ({e})",
                           "pass --out to a writable path", Exit.BAD_FILE) from None
    return written


# --- A/B -------------------------------------------------------------------------------------------
def _run_compare(args) -> int:
    from vramkit.bench.report import SCHEMA, render_compare_markdown, write_compare_plot
    from vramkit.bench.summary import compare

    results = []
    for path in args.compare:
        r = _read_json(path, "bench result")
        if r.get("schema") != SCHEMA:
            raise VramkitError(f"{path} is not a vramkit bench result (schema {r.get('schema')!r})",
                               "pass files written by vramkit bench", Exit.BAD_FILE)
        results.append(r)
    if len(results) < 2:
        raise VramkitError("--compare needs two or more results", "pass A.json B.json", Exit.BAD_INPUT)
    md_path = args.out or RESULTS_DIR / ("compare-" + "-vs-".join(_slug(r["label"]) for r in results)
                                         + ".md")
    text = render_compare_markdown(results)
    try:
        md_path.parent.mkdir(parents=True, exist_ok=True)
        md_path.write_text(text)
        files = [md_path]
        if not args.no_plots:
            files.append(write_compare_plot(results, md_path.with_suffix(".png")))
    except OSError as e:
        raise VramkitError(f"cannot write {md_path} ({e})", "pass --out to a writable path",
                           Exit.BAD_FILE) from None
    if args.json:
        json.dump({"files": [str(f) for f in files], **compare(results)}, sys.stdout, indent=2)
        print()
    else:
        print(text)
        for f in files:
            print(f"wrote {f}")
    return int(Exit.OK)
