"""Issue 18 item 5: the hybrid MoE decode estimate's fitted constants are the fit of benchmarks/gpu/fit_kt.py
over the runs it marks "fit", and the runs it holds out meet the issue's bars (decode within 20 %, KV pool
within 2 %, weights within 3 %, host RAM within 10 % of the server's RSS)."""
from __future__ import annotations

import json
import sys
from functools import cache

import pytest

from vramkit import catalog
from vramkit.units import GiB

ROOT = catalog.CONFIG_DIR.parent
sys.path.insert(0, str(ROOT / "benchmarks" / "gpu"))
import fit_kt  # noqa: E402


@cache
def result() -> dict:
    return fit_kt.compute()


def test_engine_toml_holds_the_fit():
    c = catalog.engine_constants()
    for key, value in result()["constants"].items():
        assert c[key] == pytest.approx(value, rel=1e-3), key


def test_committed_table_is_the_fit():
    """benchmarks/results/gpu/kt-estimate.{json,md} (quoted by the README) are what the script writes today."""
    assert json.loads(fit_kt.OUT_JSON.read_text())["constants"] == result()["constants"]
    assert fit_kt.OUT_MD.read_text() == fit_kt.markdown(json.loads(json.dumps(result())))


def test_fit_and_held_out_sets_are_disjoint_and_both_there():
    r = result()
    assert r["fitted_on"] and r["held_out"] and not set(r["fitted_on"]) & set(r["held_out"])


# Held-out runs the decode estimate misses by more than the bar, each with why. They stay in the table
# (kt-estimate.md, quoted by the README with their error); the test below fails the day one is met.
_INT8 = ("the estimate prices CPU experts by the bytes read at the host's read rate for the thread count, AMXINT8's at "
         "its measured 0.81x FP8's CPU time per byte (config/engine.toml kt_method_cpu_time_amxint8, since 2026-11-28; "
         "that moved 27 of the held-out AMXINT8 runs inside the bar); AMXINT8 barely follows the thread count (6 "
         "against 14 threads: -25 % to +21 % measured, four of six within 12 %, where the read rate says -14 % to "
         "-29 %), so at 6 threads and after 8K on the GPTQ split the estimate stays pessimistic, and the plan prints "
         "the measured spread (KtMethod.estimate_spread)")
_PROMPT = ("the kit's rate depends on the request's prompt (moe-budget.md, the prompt table: the same seeded prompts on "
           "6 servers, the fastest 1.65x the slowest at one depth, 92 % of them on the same side of their server's "
           "mean), each depth is another prompt, and the estimate assumes uniform routing")
_Q8 = "LLAMAFILE_Q8_0's decode right after an 8K prompt at 16 GiB: 0.67-0.77x the estimate (see below)"
_SEEDED = ("with each layer's router its own (dummy weights seeded by name) the prompt moves a request's rate by 1.07x "
           "at most (moe-budget.md), yet every figure of the GPTQ split is 14-36 % faster than the estimate: not the "
           "prompt, the estimate's pessimism for AMXINT8 beside int4 GPU experts")
KNOWN_MISSES = {
    # the AMXINT8 split at 6 KT threads (kt-threads/), 16 and 24 GiB: 1.29-1.47x the estimate after 512 tokens, at
    # 24 GiB at every depth; 24 GiB at 14 threads 1.29x after 8K
    "int8-amx-16g-t6": _INT8,
    "int8-amx-24g-t6": _INT8,
    "int8-amx-24g-t14": _INT8,
    # GPTQ-Int4 GPU experts split on moe_wna16 (88 per layer) + AMXINT8: within 18 % after 512 tokens, 1.28x the
    # estimate after 8K (60.9 tok/s): another prompt each (_PROMPT), the same direction as every AMXINT8 miss above
    "int8-amx-16g-gptq": _INT8 + "; " + _PROMPT,
    # 2026-11-27, sixth session (moe-budget/): the GPTQ split once more with every figure the median of 3 rounds: it
    # decodes faster after 8K than after 512 tokens, as the first session did, so this is the split's own behaviour,
    # not a slow start. Part of it is the context term: fitted on runs with SGLang's default 8 KV splits, while these
    # ran with the 32 config/sglang.toml gives the GPU host since 2026-11-27 (3.7x less attention time at 30K,
    # measured in moe-vs-llamacpp-gptq/run3)
    "int8-amx-16g-gptq-med3": _INT8 + "; " + _PROMPT,
    # 2026-11-27, seventh session (moe-budget/kcores): the GPTQ split at 10 KT threads, 1.40x and 1.40x the estimate
    # after 8K and 30K; at 14, 12 and 8 threads every figure is within 20 %
    "int8-amx-16g-gptq-t10": _INT8 + "; " + _PROMPT,
    # 2026-11-27, tenth session (moe-budget/seed, seed-mf90): the GPTQ split on dummy weights seeded by name, 0.85
    # with 12 and 10 KT threads: 1.27x and 1.35x after 8K; the four other seeded split servers are within 20 %
    **{f"int8-amx-16g-gptq-seed-{t}": _INT8 + "; " + _SEEDED for t in ("b85", "b-t10")},
    # whole layers, the preset's FP8 GPU experts + AMXINT8 (moe-vs-llamacpp-q8/k16-int8-layers): within 10 % after 512
    # tokens and 8K; after 30K it decoded 18.5 tok/s, 0.54x its own decode after 8K (34.4), where the split server of
    # the same session decoded 31.5 (within 10 %): that one request, not the whole-layer term
    "layers-int8-amx-16g": "one decode after 30K at half the same server's rate after 8K: " + _PROMPT,
    # the split server of that session (moe-vs-llamacpp-q8/k16-int8): its decode after 8K (26.8 tok/s) slower than its
    # own after 30K (31.5), 0.78x the estimate, where 512 tokens and 30K are within 2 %
    "int8-amx-16g-q8s": "one decode after 8K slower than the same server's after 30K: " + _PROMPT,
    # 2026-11-28 (moe-vs-llamacpp-mf/run1, one round, SGLang's one-seed dummy weights): whole layers on marlin at 0.93,
    # within 10 % after 512 tokens, 0.83x and 0.78x the estimate after 8K and 30K (60.0, 48.5 tok/s; the 0.95 server of
    # the same machine decoded 80.5 and 64.8 there); the same config seeded by name on another machine (the preset
    # point) is within 11 % at every depth
    "layers-int8-amx-16g-gptq-marlin-mf93": "one round on layers that all route alike: " + _PROMPT,
    # AMXINT4 at 16 GiB, the anchor session: its first decode after start (28.8 tok/s) was slower than its own decode
    # after 8K (34.6): scored since 2026-11-27 (see below), within 8 % at 8K and 30K
    "int4-amx-16g-b": "the first decode after start of one session: " + _PROMPT,
    # 2026-11-28, twenty-first session (moe-vs-llamacpp-q8/h200-b): the FP8 preset on a second H200 machine, 1.28x and
    # 1.27x the estimate after 512 tokens and 8K (50.5, 48.4 tok/s), within 18 % after 30K. The first H200 machine's
    # same preset is within 16 % at every depth (42.6 tok/s at depth 0), and llama.cpp ran 1.41x faster on the second
    # than on the first: the machine, whose host memory was not swept (another H200 machine's sweep stands in)
    "layers-int8-amx-16g-fp8-preset-h200b": "a second H200 machine, both engines faster than on the first; its own "
                                            "host bandwidth not swept",
    # 2026-11-28, twenty-second session (moe-vs-llamacpp-q8/h200-c): the same preset on a third H200 machine, 1.40x and
    # 1.36x the estimate after 512 tokens and 8K (43.8, 41.3 tok/s), within 20 % after 30K, against its own sweep: 78
    # GB/s at 12 threads but 123 at 14 (the sweeps of these machines do not rise with the thread count), where machine
    # d's (h200-fp8cpu) read 95 at 12 and its same preset, 41.1 tok/s, is within 16 % at every depth
    "layers-int8-amx-16g-fp8-preset-h200c": "a third H200 machine whose one host-read sweep is not monotone in the "
                                            "thread count (78 GB/s at 12 threads, 123 at 14)",
    # (2026-11-28, twenty-third and twenty-fourth sessions: h200-med and h200-embhost-m1 were 1.24-1.38x the estimate
    # against their one-round sweeps; within 18 % against their sessions' best readings, the estimate's input since the
    # twenty-seventh session: fit_kt.read_for)
    # 2026-11-28, twenty-fifth session (moe-vs-llamacpp-gptq/h200-embhost): the GPTQ preset as it comes, one round: its
    # decode after 8K (61.0 tok/s) slower than its own after 30K (62.1), 0.77x the estimate, where 512 tokens and 30K
    # are within 9 %; the same preset on three later starts (h200-embhost-llama, h200-embhost-i), medians of 3 rounds,
    # decoded 81.5-85.9 tok/s after 8K, within 18 % of the estimate
    "layers-int8-amx-16g-gptq-embhost-h200g": "one round; one decode after 8K slower than the same server's after 30K: "
                                              + _PROMPT,
    # 2026-11-29, thirty-third session (moe-vs-llamacpp-int4/r6/): the GPTQ preset with the int4 decode on a sixth H200
    # machine, within 4 % after 512 tokens and 8K, 0.83x the estimate after 30K (69.5 tok/s, its three rounds 66.2-78.7;
    # after 512 tokens 92.4-108.2: the widest spread of the int4 runs); its AVX2 twin on the same machine decoded 72.8
    # there, where the int4 points of r4/ and r5/ decoded 88.7 after 30K and are within 8 % at every depth
    "layers-int4dec-amx-16g-gptq-preset-h200q": "one machine's decode after 30K, 0.78x the same preset's on two other "
                                                "machines, its rounds spread 66-79 tok/s",
    # LLAMAFILE_Q8_0 (kt-kernel's llamafile backend): on kt-kernel 0.5.1 every decode after a 512-token prompt is within
    # 4 % and the 24 GiB one after 8K within 7 %; right after an 8K prompt at 16 GiB (85 CPU experts per layer) four runs
    # decoded 0.67-0.77x the estimate, the same on the avx2 and amx builds and on 0.7.0's avx2 build. Not explained by the bytes read (the 24 GiB run reads 61 %
    # of them and matches); the plan prints the spread (KtMethod.estimate_spread)
    "q8-avx2-16g": _Q8,
    "q8-amx-16g": _Q8,
    "q8-avx2-16g-b": _Q8,
    # kt-kernel 0.7.0's avx2 build (no AVX-512 code): 1.11x the estimate after 512 tokens, 0.74x after 8K
    "q8-avx2-070-16g": _Q8,
}


@pytest.mark.parametrize("role, bar", [("fit", 0.20), ("held-out", 0.20)])
def test_decode_estimate_within_20_percent(role, bar):
    rows = [m for m in result()["measurements"] if m["role"] == role and m["point"] not in KNOWN_MISSES]
    assert rows
    worst = max(rows, key=lambda m: abs(m["error"]))
    assert abs(worst["error"]) < bar, worst


@pytest.mark.parametrize("point", sorted(KNOWN_MISSES))
def test_a_known_miss_is_held_out_and_still_misses(point):
    rows = [m for m in result()["measurements"] if m["point"] == point]
    assert rows and all(m["role"] == "held-out" for m in rows)
    assert max(abs(m["error"]) for m in rows) >= 0.20, f"{point} now meets the bar: drop it from KNOWN_MISSES"


def test_the_plan_prints_the_measured_spread_for_a_method_the_estimate_misses():
    """KtMethod.estimate_spread (printed beside the estimate) is the held-out runs' measured/estimate range, rounded
    outward to 0.01, for a method with a known miss; a method with none has no spread."""
    from vramkit.core.plan import kt_hybrid as kt
    methods = {q["name"]: q["method"] for q in result()["points"] if not q["gpu_layers"]}    # the split's runs
    missed = {methods[p] for p in KNOWN_MISSES if p in methods}
    for name, m in kt.KT_METHODS.items():
        ratios = [1 / (1 + r["error"]) for r in result()["measurements"] if r["role"] == "held-out"
                  and methods.get(r["point"]) == name]
        if name not in missed:
            assert m.estimate_spread is None, name
            continue
        lo, hi = m.estimate_spread
        assert lo == pytest.approx(min(ratios), abs=0.01) and hi == pytest.approx(max(ratios), abs=0.01), (name, ratios)
        if "every run on dummy weights" in (m.spread_note or ""):     # the note's claims, run by run
            rows = [r for r in result()["measurements"] if methods.get(r["point"]) == name]
            assert {r["gpu_weights"] for r in rows} <= {"dummy", "dummy by name"}
            apart = [1 / (1 + r["error"]) for r in rows if r["gpu_weights"] == "dummy by name"]
            assert f"{min(apart):.2f}-{max(apart):.2f}x it" in m.spread_note and min(apart) > 1


FP8_WHOLE_SEEDED = "layers-int8-amx-16g-fp8-seed-d"


def test_the_methods_the_plan_calls_measured_with_whole_layers_ran_with_them():
    """kt_hybrid.WHOLE_LAYER_METHODS (a whole-layer plan with any other method says it is unmeasured) is exactly the
    CPU methods of the committed whole-layer servers."""
    from vramkit.core.plan import kt_hybrid as kt
    assert set(kt.WHOLE_LAYER_METHODS) == {q["method"] for q in result()["points"] if q["gpu_layers"]}


def test_the_plan_prints_the_whole_layer_spread_it_measured():
    """kt_hybrid.WHOLE_LAYER_SPREAD (printed beside a whole-layer estimate) is the held-out whole-layer runs'
    measured/estimate range rounded outward to 0.01, and the one fitted run is within 5 %."""
    from vramkit.core.plan import kt_hybrid as kt
    layers = {q["name"] for q in result()["points"] if q["gpu_layers"]}
    rows = [r for r in result()["measurements"] if r["point"] in layers]
    ratios = [1 / (1 + r["error"]) for r in rows if r["role"] == "held-out"]
    lo, hi = kt.WHOLE_LAYER_SPREAD
    assert lo == pytest.approx(min(ratios), abs=0.01) and hi == pytest.approx(max(ratios), abs=0.01), ratios
    assert lo <= min(ratios) and max(ratios) <= hi
    # the note's words: the FP8 checkpoint's seeded run apart (faster than estimated, as its split twin), the rest
    fp8 = [1 / (1 + r["error"]) for r in rows if r["role"] == "held-out" and r["point"] == FP8_WHOLE_SEEDED]
    rest = sorted(1 / (1 + r["error"]) for r in rows if r["role"] == "held-out" and r["point"] != FP8_WHOLE_SEEDED)
    said = (f"one decode after 30K at {rest[0]:.2f}x; the FP8 checkpoint's per-layer-seeded run {min(fp8):.2f}-"
            f"{max(fp8):.2f}x (faster, as its split twin); the other {len(rest) - 1} decodes {rest[1]:.2f}-{rest[-1]:.2f}x")
    assert kt.WHOLE_LAYER_SPREAD_NOTE == said
    readme = " ".join((fit_kt.ROOT / "README.md").read_text().split())
    step_ms = result()["constants"]["kt_whole_layer_step_us"] / 1000
    assert (f"fitted on that one 12-thread run ({step_ms:.2f} ms a token): the {len(layers) - 1} other whole-layer "
            "runs") in readme
    assert f"decoded {min(ratios):.2f}-{max(ratios):.2f}x the estimate: {said}" in readme
    assert all(abs(r["error"]) < 0.05 for r in rows if r["role"] == "fit")


# Readings of the server tree's RSS (moe_point.tree_memory: after start, once the probe ended) that fell in its lower
# state. The GPTQ split's tree read 37.2-37.6 GiB in every reading until 2026-11-27's seventh session and 31.3-31.8 GiB
# in some since (the seed runs: both states on one machine, one config; whole layers the same, 16.9 and 11.0 GiB); the
# sampler that sums the processes naming sglang once a second never passed 31.9 GiB in those split runs, so the
# ~5.9 GiB is in a process of the tree without sglang in its name: torch inductor's compile-worker pool (identified
# 2026-11-27, eleventh session, from moe_point's per-process readings: test_the_two_rss_states_are_the_compile_pool).
# The plan follows the higher state: 4-6.5 GiB over these readings.
RSS_LOWER_STATE = {"int8-amx-16g-gptq-seed-b85": ("after", "peak"), "int8-amx-16g-gptq-seed-b90": ("after",),
                   "int8-amx-16g-gptq-seed-b-t10": ("after", "peak"), "int8-amx-16g-gptq-seed-c-t12": ("after", "peak"),
                   "layers-int8-amx-16g-gptq-seed-t12": ("after", "peak"),
                   # the FP8 preset's third start on one H200 machine, read before its compile pool was up (its peak
                   # reading, and the same config's first start there, are within the bars)
                   "layers-int8-amx-16g-fp8-embhost-h200f2": ("after",)}
# A server that never starts that pool (whole layers on marlin) is planned without it and with what it grows by
# serving (kt_hybrid.starts_compile_pool, SERVING_GROWTH_BYTES): within the bars like every other run


# KV pools the plan misses by more than 2 %, each with why (the test fails the day one is met). None since 2026-11-28's
# twenty-eighth session, when the allocator model took ties to the newer segment and the replay made the rotary cache's
# build tensors, the marlin repack's per-expert work tensors and the GPU prompt path's per-layer repack, all as three
# recorded loads show them (tests/unit/test_replay_trace.py). Before it: the 0.90 GPTQ servers 2.07-2.27 % under, the
# 24 GiB FP8 split 2.02 % under; whole layers on marlin 3.6-4.0 % over until a fitted 68 MiB allowance (removed since),
# the GPU prompt path 2.8 % under until its staging set was replayed where the adapter allocates it.
KV_MISSES: dict[str, float] = {}
# The first server loaded from a checkpoint on disk (2026-11-29, moe-vs-llamacpp-q8/h200-realload/), before the GPU
# prompt path's reader closed the checkpoint's files: its RSS held the CPU layers' expert files mapped a second time
# (test_a_real_load_held_the_expert_files_twice_until_the_reader_closed_them); its twin since is within the bars
READER_LEFT_OPEN = "layers-fp8-amx-16g-real-h200l"


def test_memory_within_the_bars_on_every_run():
    for q in result()["points"]:
        if "weights_gib" not in q or q["name"] == READER_LEFT_OPEN:
            continue
        assert abs(q["plan_weights_gib"] / q["weights_gib"] - 1) < 0.03, q["name"]
        kv = abs(q["plan_kv_tokens"] / q["kv_tokens"] - 1)
        assert (0.02 <= kv < KV_MISSES[q["name"]]) if q["name"] in KV_MISSES else kv < 0.02, q["name"]
        low = RSS_LOWER_STATE.get(q["name"], ())
        for which, key, read in (("after", "rss_error", "rss_after_start_bytes"), ("peak", "rss_peak_error",
                                                                                  "rss_peak_bytes")):
            if q.get(key) is None:
                continue
            if which in low:        # the plan over, never under, by about the other state
                assert 4 * GiB <= q["plan_rss_bytes"] - q[read] <= 6.5 * GiB and q[key] >= 0.10, q["name"]
            else:
                assert abs(q[key]) < 0.10, q["name"]


def test_a_real_load_held_the_expert_files_twice_until_the_reader_closed_them():
    """One machine, one config (--kt-method FP8 on a written checkpoint): loaded from disk, the server's shared
    (file-backed) RSS stood over its dummy-weight twin's by the CPU layers' expert files (the plan's
    host_checkpoint_bytes: kt-kernel maps them once, the prompt path's reader, left open, a second time), within
    0.5 %; its KV pool as the twin's. With
    the reader closed after the last CPU layer (h200-realload-b/, another machine) the loaded server's RSS is its
    twin's, both within the 10 % bar."""
    pts = {q["name"]: q for q in result()["points"]}
    real, dummy = pts[READER_LEFT_OPEN], pts["layers-fp8-amx-16g-dummy-h200l"]
    shared = {n: fit_kt.load(next(p.point for p in fit_kt.POINTS if p.name == n))["host_rss_after_start_shared_bytes"]
              for n in (real["name"], dummy["name"])}     # file-backed pages: the mapped files
    extra = shared[real["name"]] - shared[dummy["name"]]
    assert extra == pytest.approx(real["host_checkpoint_bytes"], rel=0.005) and real["rss_error"] < -0.2
    assert real["plan_kv_tokens"] == dummy["plan_kv_tokens"] and real["kv_tokens"] == dummy["kv_tokens"]
    real_b, dummy_b = pts["layers-fp8-amx-16g-real-h200m"], pts["layers-fp8-amx-16g-dummy-h200m"]
    assert abs(real_b["rss_after_start_bytes"] / dummy_b["rss_after_start_bytes"] - 1) < 0.005
    assert abs(real_b["rss_error"]) < 0.10 and abs(dummy_b["rss_error"]) < 0.10


def test_the_rss_lower_state_is_one_of_two_on_the_same_config():
    """Each RSS_LOWER_STATE run's config (GPTQ split, AMXINT8, mem_fraction, threads) also read the higher state, on
    another run or in its other reading, within 10 % of the plan: the two states, not a drifting estimate."""
    pts = {q["name"]: q for q in result()["points"]}
    high = [q for q in pts.values() if q.get("rss_peak_error") is not None and abs(q["rss_peak_error"]) < 0.10]
    for name in RSS_LOWER_STATE:
        assert any(h["gpu_experts"] == pts[name]["gpu_experts"] and h["plan_rss_bytes"] == pts[name]["plan_rss_bytes"]
                   and h["gpu_layers"] == pts[name]["gpu_layers"] for h in high), name


def _pool(rel: str, reading: str) -> tuple[int, int]:
    """(processes, RSS bytes) of torch inductor's compile workers in one reading of a point's server tree."""
    d = json.loads((fit_kt.RES / f"moe-budget/{rel}.json").read_text())
    pool = [p for p in d[f"host_rss_{reading}_by_process"] if "torch/_inductor/compile_worker" in p["cmdline"]]
    return len(pool), sum(p["rss"] for p in pool)


def test_the_two_rss_states_are_the_compile_pool():
    """The tree's two RSS states: right after start a moe_wna16 server holds torch inductor's compile-worker pool (one
    worker and a subprocess per CPU of the 16-core host: inductor's, behind a torch.compile'd function; SGLang
    0.5.15.post1's MoE path has several, kt_ep_wrapper.py's mask_cpu_expert_ids and topk.py's, and which one each
    config runs was not traced); by the probe's end the subprocesses are gone, which is the ~5.9 GiB between the
    states. The marlin whole-layer server started none."""
    for rel in ("best16/k16-wna16-layers-t12", "marlin/k16-wna16-layers-t12"):
        (n0, b0), (n1, b1) = _pool(rel, "after_start"), _pool(rel, "end")
        assert (n0, n1) == (17, 1) and 5.5 * GiB <= b0 - b1 <= 6.2 * GiB, (rel, b0, b1)
    assert _pool("marlin/k16-marlin-layers-t12", "after_start") == _pool("marlin/k16-marlin-layers-t12", "end") == (0, 0)


def test_a_decode_slower_than_its_own_longer_context_one_is_noted_and_scored():
    """Each depth of a probe is another prompt, and the kit's rate depends on the prompt (moe-budget.md), so such a
    decode is noted in the table (flag), fitted and scored like every other; the flag itself is right."""
    rows = result()["measurements"]
    flagged = [m for m in rows if m["inconsistent"]]
    assert flagged and all("error" in m for m in flagged)
    for m in flagged:
        longer = [q["tok_s"] for q in rows if q["point"] == m["point"] and q["context"] > m["context"]]
        assert m["tok_s"] < 0.9 * max(longer)
    held = [abs(m["error"]) for m in rows if m["role"] == "held-out"]
    assert f"held-out: {len(held)} measurements, worst |error| {max(held):.1%}" in fit_kt.OUT_MD.read_text()


def test_each_run_s_gpu_weights_are_what_its_server_log_says():
    """fit_kt.gpu_weights reads `vramkit up`'s arguments; where the trimmed server log kept SGLang's own load_format,
    the two agree (a dummy run labelled "checkpoint" would hide the proxy's repeated routers, moe-budget.md)."""
    import re
    seen = {"checkpoint": 0, "dummy": 0, "dummy by name": 0}
    for p in fit_kt.POINTS:
        w = fit_kt.gpu_weights(p)
        seen[w] += 1
        evidence = fit_kt.RES / p.point.replace(".json", ".evidence.txt") if p.point else None
        text = evidence.read_text() if evidence is not None and evidence.exists() else ""
        if m := re.search(r"load_format='(\w+)'", text):
            assert (m.group(1) == "dummy") == w.startswith("dummy"), p.name
            # the adapter's own line when it seeded by name (vramkit_kt_compat.patch_dummy_loader)
            assert ("dummy weights seeded by parameter name" in text) == (w == "dummy by name"), p.name
    assert seen["checkpoint"] >= 5 and seen["dummy"] >= 20 and seen["dummy by name"] >= 6   # every kind committed


def test_the_rawint4_readme_quotes_its_held_out_rows():
    """kt-rawint4/README.md's estimate line is the held-out RAWINT4 run's rows of the fit's data."""
    rows = [m for m in result()["measurements"] if m["point"] == "layers-raw4-amx-16g-gptq-marlin-seed-t12"]
    assert [m["role"] for m in rows] == ["held-out", "held-out"]
    text = " ".join((fit_kt.RES / "kt-rawint4" / "README.md").read_text().split())
    (a, b) = rows
    assert (f"{a['plan_tok_s']:.1f} and {b['plan_tok_s']:.1f} tok/s after {a['context']} and {b['context']:,} tokens "
            f"against {a['tok_s']:.1f} and {b['tok_s']:.1f} measured ({a['error']:+.1%}, {b['error']:+.1%})"
            .replace("%", " %")) in text


def test_a_server_without_the_compile_pool_is_planned_without_it_and_grows_as_measured():
    """kt_hybrid.starts_compile_pool against the per-process readings: every server whose tree was read process by
    process held the pool's 17 processes right after start or when its probe ended (the pool comes and goes: a third
    start on one H200 machine held 1 right after start and 17 at the end, the two before it 17 and then 1) unless it
    ran whole layers on marlin, which held none at either reading; and SERVING_GROWTH_BYTES, measured on
    moe-budget/marlin's server, is what the two held-out marlin servers grew by."""
    from vramkit.core.plan import kt_hybrid as kt
    seen = 0
    for p in fit_kt.POINTS:
        run = fit_kt.load(p.point) if p.point else None
        readings = [(run or {}).get(k) for k in ("host_rss_after_start_by_process", "host_rss_end_by_process")]
        if not readings[0]:
            continue
        pools = {sum("compile_worker" in q["cmdline"] for q in procs) for procs in readings if procs}
        if fit_kt.plan_for(p)[0].hybrid.compile_pool:
            assert 17 in pools, (p.name, pools)
        else:
            assert pools == {0}, (p.name, pools)
        seen += 1
    assert seen >= 7
    growth = {rel: fit_kt.load(rel) for rel in ("moe-budget/marlin/k16-marlin-layers-t12.json",
                                                 "moe-vs-llamacpp-ggml/run1/k16-marlin-layers-t12.json",
                                                 "moe-vs-llamacpp-ggml/run2/k16-marlin-layers-t12.json")}
    grew = [r["host_rss_peak_bytes"] - r["host_rss_after_start_bytes"] for r in growth.values()]
    assert grew[0] == kt.SERVING_GROWTH_BYTES and all(abs(g / grew[0] - 1) < 0.01 for g in grew[1:])
    assert f"{grew[1]:,} and {grew[2]:,} bytes" in (fit_kt.ROOT / "vramkit/core/plan/kt_hybrid.py").read_text()
    readme = " ".join((fit_kt.ROOT / "README.md").read_text().split())
    pts = {q["name"]: q for q in result()["points"]}
    under = [-pts[f"layers-int8-amx-16g-gptq-marlin-{t}"]["rss_peak_error"] for t in ("g1", "g2")]
    assert f"{100 * under[0]:.1f} and {100 * under[1]:.1f} % under those servers' peaks" in readme
    spread = max(abs(g / grew[0] - 1) for g in grew[1:])
    assert f"two held out grew within {100 * spread:.1f} % of it" in readme


# --- several requests at once: the aggregate estimate, derived from the batch-1 one --------------------------------
def test_distinct_experts_grow_from_one_token_to_every_expert():
    from vramkit.core.plan import kt_hybrid as kt
    assert kt.distinct_expert_factor(128, 8, 1) == pytest.approx(1.0)
    assert kt.distinct_expert_factor(128, 8, 4) == pytest.approx(29.123046875 / 8)
    assert kt.distinct_expert_factor(128, 8, 10_000) == pytest.approx(128 / 8)        # all experts, read once
    assert kt.distinct_expert_factor(128, 8, 2) < kt.distinct_expert_factor(128, 8, 3)


def test_the_aggregate_pays_the_step_once_and_the_experts_by_the_tokens_names():
    from vramkit.core.plan import kt_hybrid as kt
    whole = kt.DecodeEstimate(gpu_s=0.004, context_s=0.0001, gpu_experts_s=0.002, cpu_experts_s=0.006, sync_s=0.003,
                              host_read_bytes_s=1e11, cpu_bytes_per_token=1, gpu_layers=37, step_s=0.002)
    f = kt.distinct_expert_factor(128, 8, 4)
    assert whole.aggregate_tok_s(1, 128, 8) == pytest.approx(whole.tok_s)
    assert whole.aggregate_tok_s(4, 128, 8) == pytest.approx(4 / (0.004 + 4 * 0.0001 + 0.008 * f + 0.003 + 0.002))
    split = kt.DecodeEstimate(gpu_s=0.004, context_s=0.0001, gpu_experts_s=0.002, cpu_experts_s=0.006, sync_s=0.01,
                              host_read_bytes_s=1e11, cpu_bytes_per_token=1)
    assert split.aggregate_tok_s(4, 128, 8) == pytest.approx(4 / (0.004 + 0.0004 + 0.006 * f + 0.01))   # they overlap


def test_the_printed_aggregate_spread_is_every_committed_four_stream_run():
    """kt_hybrid.AGGREGATE_SPREAD (printed beside the plan's aggregate) is each method and placement's measured /
    estimate range over the committed runs' 4-stream probes, rounded outward to 0.01, with the run count."""
    import math

    from vramkit.core.plan import kt_hybrid as kt
    fours = result()["four_streams"]
    assert len(fours) >= 40
    got: dict[tuple[str, bool], list[float]] = {}
    for r in fours:
        got.setdefault((r["method"], bool(r["gpu_layers"])), []).append(r["tok_s"] / r["plan_tok_s"])
    assert set(got) == set(kt.AGGREGATE_SPREAD)
    for key, ratios in got.items():
        lo, hi, n = kt.AGGREGATE_SPREAD[key]
        assert (lo, hi, n) == (math.floor(min(ratios) * 100) / 100, math.ceil(max(ratios) * 100) / 100, len(ratios)), key
    readme = " ".join((ROOT / "README.md").read_text().split())
    every = [x for v in got.values() for x in v]
    wl = kt.AGGREGATE_SPREAD[("AMXINT8", True)]
    assert (f"The {len(fours)} committed 4-stream runs measured {min(every):.2f}-{max(every):.2f}x it, AMXINT8 whole "
            f"layers {wl[0]:.2f}-{wl[1]:.2f}x") in readme
    # the preset's own configuration (AMXINT8 whole layers, GPTQ-Int4 on marlin) inside the spread its plan prints
    # (one machine's 4 streams ran 0.74x: the same machine's single stream was the slowest of the preset's too)
    preset = [r["tok_s"] / r["plan_tok_s"] for r in fours if "gptq-marlin" in r["point"] and r["method"] == "AMXINT8"]
    assert len(preset) >= 9 and all(wl[0] <= x <= wl[1] for x in preset)


def test_the_plan_gives_the_aggregate_at_max_running_and_none_for_one_request(capsys):
    from vramkit.cli import main
    args = ["plan", "--preset", "moe", "--gpu", "rtx-5060-ti-16gb", "--host-read-gbs", "60", "--host-ram-gib", "64",
            "--cpu-isa", "amx", "--host-cores", "16", "--json"]
    assert main(args) == 0
    d = json.loads(capsys.readouterr().out)
    h = d["hybrid"]
    assert h["aggregate_streams"] == d["knobs"]["max_running"] == 4
    assert h["decode_tok_s_by_context"][0][1] < h["aggregate_tok_s"] < 4 * h["decode_tok_s_by_context"][0][1]
    said = next(n for n in d["notes"] if n.startswith("4 requests decoding together"))
    lo, hi, n = fit_kt.kt.AGGREGATE_SPREAD[("AMXINT8", True)]
    assert f"~{h['aggregate_tok_s']:.0f} tok/s in all" in said and f"{n} committed AMXINT8 whole-layer runs" in said
    assert f"measured {lo:.2f}-{hi:.2f}x it" in said
    assert main(args + ["--max-running", "1"]) == 0
    one = json.loads(capsys.readouterr().out)
    assert one["hybrid"]["aggregate_tok_s"] is None and not any("decoding together" in x for x in one["notes"])


def test_whole_layers_on_marlin_are_planned_without_an_allowance():
    """The free space a marlin GPTQ MoE load leaves in its segments comes out of the replay itself (the repack's
    per-expert work tensors, arch.py), not a fitted constant: every whole-layer marlin run's logged weights within
    0.03 GiB and its KV pool within 2 %, none of it over SGLang's by more than 0.5 %; mf93, on which the 68 MiB allowance
    had been set, among them."""
    assert "marlin_moe_holes_mib" not in (ROOT / "config" / "engine.toml").read_text()
    runs = [q for q in result()["points"] if "gptq-marlin" in q["name"] and "kv_tokens" in q]
    assert len(runs) >= 12 and "layers-int8-amx-16g-gptq-marlin-mf93" in {q["name"] for q in runs}
    for q in runs:
        assert abs(q["plan_weights_gib"] - q["weights_gib"]) < 0.03, q["name"]
        assert -0.02 < q["plan_kv_tokens"] / q["kv_tokens"] - 1 < 0.005, q["name"]


def test_each_run_s_prompt_path_copies_are_planned_as_its_server_pinned_them():
    """The plan fit_kt replays for a run pins the GPU prompt path's host copies as that server did: the way its
    environment set (VRAMKIT_KT_PREFILL_PIN), else the plan `vramkit up` printed for it. The twenty-fifth session's
    GPTQ runs were replayed with PyTorch's power-of-two allocator while their servers registered each copy at its own
    size (the default since the eighteenth session): their planned RSS stood 10-12 % over, put down to the machines."""
    import re
    checked = 0
    for p, q in zip(fit_kt.POINTS, result()["points"], strict=True):
        if not p.point or not q["host_prefill_bytes"]:
            continue
        run = json.loads((fit_kt.RES / p.point).read_text())
        env = dict(e.split("=", 1) for e in run.get("env", []))
        if "VRAMKIT_KT_PREFILL_PIN" in env:
            assert p.knobs.get("kt_prefill_pin", "register") == env["VRAMKIT_KT_PREFILL_PIN"], p.name
            continue
        up = fit_kt.RES / p.point.replace(".json", ".up.txt")
        text = " ".join(re.sub(r"[│┃]", " ", up.read_text()).split()) if up.exists() else ""
        printed = re.search(r"prompt path's pinned copies \(([0-9.]+) GiB\)", text)
        if printed:
            assert abs(float(printed.group(1)) - q["host_prefill_bytes"] / GiB) < 0.006, p.name
            checked += 1
    assert checked >= 12


def test_the_estimate_reads_each_session_s_best_host_read_and_says_where_that_rule_was_checked():
    """fit_kt's host-read rule: a held-out run whose session left more than one sweep is planned with each thread
    count's best reading of the session (the main table's estimate), no reading's inferior at any count; the section
    lists every such run beside its one-round error, marks the runs the rule was chosen on apart from the later runs
    that checked it, and sums each group; the README quotes the check."""
    hr = result()["host_read_input"]
    listed = {r["point"] for r in hr["points"]}
    assert listed == {p.name for p in fit_kt.POINTS if p.role == "held-out" and fit_kt.session_sweeps(p)}
    assert fit_kt.READ_RULE_CHOSEN_ON < listed and len(fit_kt.READ_RULE_CHOSEN_ON) == 8
    for p in fit_kt.POINTS:
        if p.name in listed:
            sweeps = fit_kt.session_sweeps(p)
            best = {r["threads"]: r["bytes_per_s"] for r in fit_kt.best_reading(sweeps)}
            assert all(best[r["threads"]] >= r["bytes_per_s"] for runs in sweeps.values() for r in runs
                       if r["threads"] in best), p.name
            assert fit_kt.read_for(p) == fit_kt.best_reading(sweeps)
        elif p.role == "held-out":
            assert fit_kt.read_for(p) == fit_kt.load(p.membw), p.name
    for r in hr["points"]:
        assert r["read_gbs_session_best"] >= r["read_gbs_one_round"]
        assert r["rule"] == ("chosen on" if r["point"] in fit_kt.READ_RULE_CHOSEN_ON else "checked on")
        # the session's best column is the main table's estimate
        assert r["errors_session_best"][0] == pytest.approx(
            next(m["error"] for m in result()["measurements"] if m["point"] == r["point"]), abs=1e-4)
    for key in ("one_round", "session_best"):
        errs = [abs(e) for r in hr["points"] for e in r[f"errors_{key}"]]
        assert hr[key]["n"] == len(errs) and hr[key]["over_20pct"] == sum(e > 0.2 for e in errs)
        assert sum(g[key]["n"] for g in hr["by_rule"].values()) == len(errs)
    checked, chosen = hr["by_rule"]["checked on"], hr["by_rule"]["chosen on"]
    assert checked["one_round"]["n"] >= 6
    readme = " ".join((fit_kt.ROOT / "README.md").read_text().split())
    assert (f"their {chosen['session_best']['n']} decodes' mean error fell from "
            f"{chosen['one_round']['mean_abs'] * 100:.1f} % to {chosen['session_best']['mean_abs'] * 100:.1f} %, and "
            f"those outside 20 % from {chosen['one_round']['over_20pct']} to {chosen['session_best']['over_20pct']}") \
        in readme
    assert (f"their {checked['one_round']['n']} decodes' mean error falls from "
            f"{checked['one_round']['mean_abs'] * 100:.1f} % with the one-round sweep to "
            f"{checked['session_best']['mean_abs'] * 100:.1f} %") in readme
    h = next(r for r in hr["points"] if r["point"] == "layers-int8-amx-16g-gptq-embhost-h200h")
    assert (f"({h['read_gbs_session_best']:.0f} GB/s at {h['threads']} threads against its one-round sweep's "
            f"{h['read_gbs_one_round']:.0f}; the estimate's input since the next session)") in readme
    assert (" / ".join(f"{e * 100:+.1f}" for e in h["errors_session_best"]) + " % off the server") in readme


@pytest.mark.parametrize("run", ["h200-stagesnap-k/k20-preset.json", "h200-poolcheck-l/k20-kt-prompts.json"])
def test_a_card_size_no_run_had_is_planned_within_the_bars(run):
    """The moe preset on the GPTQ config at 20 GiB (2026-11-28, twenty-eighth session; no earlier run had that card and
    nothing was set on these): every expert fits on the GPU, the embeddings in host RAM, so no KT. The plan as the
    server ran it: weights within 0.2 % of the log, KV pool within 2 % and under, peak within 3 % of NVML's."""
    from vramkit.core.plan.planner import Knobs, Target, plan
    from vramkit.hf_config import parse_config
    d = json.loads((fit_kt.RES / "moe-vs-llamacpp-gptq" / run).read_text())
    lf = d["log_figures_gib"]
    knobs = Knobs(context=lf["context_len"], kv_dtype="fp8_e5m2", mem_fraction=0.93, chunked_prefill=4096,
                  cuda_graph_max_bs=4, max_running=lf["max_running_requests"], hicache_gb=0, cpu_offload_gib=0, tp=1,
                  kt_embed_host="on")
    model = parse_config(fit_kt.gptq_coder_config(), name="gptqcfg")
    p = plan(model, Target(gpu=None, gpu_free_bytes=int(lf["load_begin_avail"] * GiB)), knobs, catalog.engine(),
             with_alternatives=False)
    assert p.hybrid is None and lf["embed_moved"] == 0.58
    assert abs(p.weights_bytes / GiB / lf["weights"] - 1) < 0.002
    assert -0.02 < p.kv_pool_tokens / lf["kv_tokens"] - 1 < 0
    assert abs(p.peak_vram_bytes / d["peak_vram_bytes"] - 1) < 0.03


def test_the_readme_counts_the_held_out_misses_by_placement():
    """The README's held-out summary by placement: every held-out decode counted once in whole layers or the split,
    the int4 decode's among the whole layers, and the misses over 20 % as the data has them."""
    res = result()
    pts = {q["name"]: q for q in res["points"]}
    held = [m for m in res["measurements"] if m["role"] == "held-out"]
    whole = [m["error"] for m in held if pts[m["point"]]["gpu_layers"]]
    split = [m["error"] for m in held if not pts[m["point"]]["gpu_layers"]]
    int4 = [m["error"] for m in held if pts[m["point"]]["gpu_layers"] and pts[m["point"]].get("host_int4_bytes")]
    int4_kept = [m["error"] for m in held if pts[m["point"]]["gpu_layers"] and pts[m["point"]].get("host_int4_bytes")
                 and m["point"] not in KNOWN_MISSES]
    assert len(whole) + len(split) == len(held) and 0 < len(int4) < len(whole)
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert (f"whole layers (the moe preset's placement) {len(whole)}, {min(whole):+.1%} to {max(whole):+.1%}, "
            f"{sum(abs(e) > 0.2 for e in whole)} outside 20 %; of them the int4 decode {len(int4)}, ") in readme
    assert f"the split (the placement before) {len(split)}, " in readme
    # the CPU decode a GPTQ-Int4 checkpoint takes: within the 20 % but for a known miss (one machine's 30K)
    assert all(abs(e) <= 0.2 for e in int4_kept) and len(int4) - len(int4_kept) <= 3
