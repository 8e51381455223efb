"""The token embeddings in pinned host RAM (kt_embed_host, issue 18): the planner gives their GPU memory to the KV
pool and the GPU experts, the launch hands the adapter its setting, and the adapter (vramkit_host_embed.py) moves
the table after the load or says why not. torch's CUDA calls (pinning, the device view, empty_cache) are the hardware
boundary, replaced here; tests/gpu/test_uva_embed.py runs the real ones on a GPU."""
from __future__ import annotations

import json
import statistics
import types
from dataclasses import replace

import pytest
import torch

from tests.repo_modules import load_module
from tests.unit.test_gpu_prefill import ROOT, _desktop_target, _plan
from vramkit import catalog
from vramkit.core import sglang_log
from vramkit.core.memory.weight_load import pinned_size
from vramkit.core.plan import knobs as knob_decl
from vramkit.core.plan import kt_hybrid as kt
from vramkit.core.plan.knobs import Knobs
from vramkit.core.plan.planner import plan

GiB = 1 << 30
FP8 = "qwen3-coder-30b-a3b-instruct-fp8"
DENSE = "qwen2.5-coder-14b-instruct-gptq-int4"     # the first user's model, the optimized preset's
EMBED_BYTES = 151_936 * 2_048 * 2            # the coder's bf16 embed_tokens


def test_the_embeddings_gpu_memory_becomes_one_more_whole_gpu_layer_at_16_gb(capsys):
    """The moe preset's default (auto) moves them on a desktop 16 GB card; off keeps them on the GPU, on is auto's
    plan where nothing is in the way."""
    (rc_off, off), (rc_auto, auto) = _plan(capsys, FP8, "--kt-embed-host", "off"), _plan(capsys, FP8)
    rc_on, on = _plan(capsys, FP8, "--kt-embed-host", "on")
    assert rc_off == rc_auto == rc_on == 0
    assert off["fits"] and auto["fits"] and auto["knobs"]["kt_embed_host"] == "auto"
    h0, h1 = off["hybrid"], auto["hybrid"]
    assert h1["gpu_layers"] == h0["gpu_layers"] + 1          # 0.58 GiB freed against 0.56 GiB of FP8 experts a layer
    assert auto["kv_pool_tokens"] >= auto["knobs"]["context"]     # the pool still holds the context
    # the weights as SGLang logs them at "Load weight end" (the table still there): one more layer's experts
    one_layer = 128 * 3 * 2048 * 768
    assert abs(auto["weights_bytes"] - off["weights_bytes"] - one_layer) < 8 * (1 << 20)
    assert h1["host_embed_bytes"] == pinned_size(EMBED_BYTES) == GiB and h0["host_embed_bytes"] == 0
    assert auto["server_env"]["VRAMKIT_KT_EMBED_HOST"] == "on" and "VRAMKIT_KT_EMBED_HOST" not in off["server_env"]
    said = next(n for n in auto["notes"] if n.startswith("--kt-embed-host auto:"))
    assert "0.58 GiB" in said and "1.00 GiB pinned" in said and kt.EMBED_HOST_MEASURED in said
    assert h1["decode_tok_s"] > h0["decode_tok_s"]             # one CPU layer fewer (the estimate, derived)
    assert {k: v for k, v in on.items() if k not in ("knobs", "notes")} == \
        {k: v for k, v in auto.items() if k not in ("knobs", "notes")}


def test_auto_keeps_them_on_the_gpu_where_the_move_cannot_run_and_says_why():
    """Where `on` is refused (test below), the preset's auto plans the embeddings on the GPU: a tied head gets the
    plan it had before the lever, with one note; with or without the hybrid mode (auto moves an untied table on both,
    measured on the moe preset and on the optimized preset's 14B)."""
    model = replace(catalog.model(FP8), tie_word_embeddings=True)
    knobs = Knobs(**catalog.presets()["moe"].knobs)
    assert knobs.kt_embed_host == "auto"
    auto = plan(model, _desktop_target(), knobs, catalog.engine(), with_alternatives=False)
    off = plan(model, _desktop_target(), replace(knobs, kt_embed_host="off"), catalog.engine(), with_alternatives=False)
    assert auto.fits and auto.hybrid.host_embed_bytes == 0 and auto.hybrid.gpu_layers == off.hybrid.gpu_layers
    assert auto.kv_pool_tokens == off.kv_pool_tokens and not [r for r in auto.reasons if r.kind == "kt_embed_host"]
    said = [n for n in auto.notes if n.startswith("--kt-embed-host auto:")]
    assert len(said) == 1 and "stay on the GPU" in said[0] and "ties its lm_head" in said[0]
    # without the hybrid mode auto moves them too (measured on the optimized preset's 14B), and a tied head stays
    dense = plan(catalog.model(FP8), _desktop_target(), replace(knobs, kt_method=None, kt_gpu_prefill=0),
                 catalog.engine(), with_alternatives=False)
    said = [n for n in dense.notes if "kt-embed-host" in n]
    assert dense.hybrid is None and dense.host_embed_bytes == GiB
    assert len(said) == 1 and kt.EMBED_HOST_DENSE in said[0]
    tied = plan(model, _desktop_target(), replace(knobs, kt_method=None, kt_gpu_prefill=0), catalog.engine(),
                with_alternatives=False)
    said = [n for n in tied.notes if "kt-embed-host" in n]
    assert tied.host_embed_bytes == 0 and len(said) == 1 and "ties its lm_head" in said[0]


@pytest.mark.parametrize("ram, moved, why", [
    (27.0, False, "the plan does not fit with their 1.00 GiB pinned in host RAM (host RAM: "),
    (28.0, False, "the server would hold 27.39 GiB of the 28.00 GiB available, more than 90 %"),
    (31.0, True, ""),
])
def test_auto_leaves_a_tenth_of_the_host_ram_free_as_the_prompt_path_s_auto_does(capsys, ram, moved, why):
    """On a desktop with little RAM the moved table's pinned copy (1 GiB against the 0.56 GiB one CPU layer fewer
    saves) can tip the plan over: auto then keeps the embeddings on the GPU, with the plan that fits and the reason."""
    from vramkit.cli import main
    rc = main(["plan", "--preset", "moe", "--gpu", "rtx-5060-ti-16gb", "--cpu-isa", "amx", "--host-cores", "16",
               "--host-ram-gib", str(ram), "--json"])
    d = json.loads(capsys.readouterr().out)
    assert rc == 0 and d["fits"] and bool(d["hybrid"]["host_embed_bytes"]) == moved
    said = [n for n in d["notes"] if n.startswith("--kt-embed-host auto: the token embeddings stay on the GPU: ")]
    assert (len(said) == 1 and why in said[0]) if not moved else not said
    assert d["knobs"]["kt_embed_host"] == ("auto" if moved else "off")
    assert ("VRAMKIT_KT_EMBED_HOST" in d["server_env"]) == moved
    if moved:       # the README's net cost: the pinned copy less the one CPU layer's experts kt-kernel no longer holds
        rc = main(["plan", "--preset", "moe", "--gpu", "rtx-5060-ti-16gb", "--cpu-isa", "amx", "--host-cores", "16",
                   "--host-ram-gib", str(ram), "--kt-embed-host", "off", "--json"])
        off = json.loads(capsys.readouterr().out)["hybrid"]
        net = (d["hybrid"]["host_ram_bytes"] - off["host_ram_bytes"]) / GiB
        readme = " ".join((ROOT / "README.md").read_text().split())
        assert rc == 0 and f"is 1 GiB, {net:.2f} GiB more than the one CPU layer fewer saves" in readme


def test_the_server_runs_are_what_the_readme_and_the_plan_quote():
    """moe-vs-llamacpp-q8/h200-embhost/ (one H200 machine, starts on, off, on): the README's table, and the ratios
    the plan's note and the preset quote (the two lever starts' mean against the middle start)."""
    run = ROOT / "benchmarks/results/gpu/moe-vs-llamacpp-q8/h200-embhost"
    on = [json.loads((run / d / "k16-int8-embhost.probe.json").read_text()) for d in (".", "second-start")]
    off = json.loads((run / "k16-int8-preset.probe.json").read_text())
    dec = lambda p, n: next(d["aggregate_tok_s"] for d in p["decode"] if d["streams"] == n)     # noqa: E731
    after = lambda p, t, k="decode_tok_s": next(r[k] for r in p["ttft"] if r["prompt_tokens"] == t)   # noqa: E731
    ratio = lambda f: statistics.mean(f(p) for p in on) / f(off)      # noqa: E731
    r0, r4 = ratio(lambda p: dec(p, 1)), ratio(lambda p: dec(p, 4))
    r512, r8k, r30k = (ratio(lambda p, t=t: after(p, t)) for t in (512, 8192, 30000))
    ttft = ratio(lambda p: after(p, 30000, "ttft_s"))
    readme = " ".join((ROOT / "README.md").read_text().split())
    three = f"{r512:.2f}x / {r8k:.2f}x / {r30k:.2f}x"
    assert (f"{r0:.2f}x at depth 0, {three} after the 512 / 8K / 30K prompts, 4 streams {r4:.2f}x, the first token "
            f"after 30K in {ttft:.2f}x the time") in readme
    r1 = lambda x: f"{round(x, 2):.1f}"       # noqa: E731  (to 0.01 first, as the levers file's figures are)
    assert (f"| decode, depth 0 | {r1(dec(on[0], 1))}, {r1(dec(on[1], 1))} tok/s | {r1(dec(off, 1))} |") in readme
    assert (f"| 4 streams, in all | {r1(dec(on[0], 4))}, {r1(dec(on[1], 4))} tok/s | {r1(dec(off, 4))} |") in readme
    row = " / ".join(f"{r1(after(on[0], t))}, {r1(after(on[1], t))}" for t in (512, 8192, 30000))
    assert f"| decode after a 512 / 8K / 30K prompt | {row} | " in readme
    assert (f"decode {r0:.2f}x at depth 0 and {r512:.2f}-{r30k:.2f}x after 512-30K-token prompts, 4 streams "
            f"{r4:.2f}x") in kt.EMBED_HOST_MEASURED and r512 <= r8k <= r30k
    preset = " ".join((ROOT / "config/presets.toml").read_text().replace("\n#", "\n").split())
    assert f"decode {r0:.2f}x at depth 0 and {three} after 512 / 8K / 30K-token prompts, 4 streams {r4:.2f}x" in preset


def test_without_the_hybrid_mode_auto_moves_them_and_the_pool_grows_by_their_size(capsys, monkeypatch):
    """The first user's 14B on a 16 GB card (the optimized preset, whose default is auto): its 1.45 GiB table moves,
    the pool grows by that many bytes of KV, the pinned copy counts in the plan's host RAM, and the server gets the
    adapter on its path: natively through PYTHONPATH, in compose through the mounted folder
    (tests/integration/test_render_compose.py). `on` gives the same plan, `off` the one without the move."""
    from vramkit.cli import main
    from vramkit.launch import hybrid
    args = ["plan", "--preset", "optimized", "--gpu", "rtx-5060-ti-16gb", "--host-ram-gib", "64", "--json"]
    assert main([*args, "--kt-embed-host", "off"]) == 0
    off = json.loads(capsys.readouterr().out)
    assert main(args) == 0
    auto = json.loads(capsys.readouterr().out)
    assert main([*args, "--kt-embed-host", "on"]) == 0
    on = json.loads(capsys.readouterr().out)
    assert auto["knobs"]["kt_embed_host"] == "auto"
    assert {k: v for k, v in auto.items() if k not in ("knobs", "notes")} == \
        {k: v for k, v in on.items() if k not in ("knobs", "notes")}
    assert off["fits"] and on["fits"] and on["hybrid"] is None and off["host_embed_bytes"] == 0
    table = catalog.model(DENSE).vocab_size * catalog.model(DENSE).hidden_size * 2
    freed, pinned = kt.embed_host_bytes(table)
    assert on["host_embed_bytes"] == pinned == 2 * GiB
    assert on["host_ram_bytes"] - off["host_ram_bytes"] == pinned
    grown = on["kv_pool_tokens"] - off["kv_pool_tokens"]
    assert abs(grown * on["kv_bytes_per_token"] - freed) < 2 * on["kv_bytes_per_token"] * 64     # pages of 64 tokens
    assert on["server_env"] == {"VRAMKIT_KT_EMBED_HOST": "on"} and "server_env" not in off
    said = next(n for n in auto["notes"] if n.startswith("--kt-embed-host auto:"))
    assert kt.EMBED_HOST_DENSE in said and "1.45 GiB" in said
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    env = hybrid.EmbedOnly().native_env()
    assert env == {"PYTHONPATH": f"{hybrid.KT_COMPAT_DIR}:/elsewhere", "VRAMKIT_KT_EMBED_HOST": "on"}
    assert (hybrid.KT_COMPAT_DIR / "sitecustomize.py").is_file()
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert (f"the optimized preset's KV pool grows from {off['kv_pool_tokens']:,} to {on['kv_pool_tokens']:,} tokens"
            in readme) and f"`embed_tokens` ({freed / GiB:.2f} GiB; {pinned / GiB:.2f} GiB pinned)" in readme


def test_the_dense_server_runs_are_what_the_plan_and_the_preset_quote():
    """benchmarks/calibration/opt-embed-16g-h200*.json beside opt-f085-16g-h200*.json (two H200 machines at 16 GiB, the
    second with the control first): the figures the plan's note, the preset and the README quote; the move cost
    nothing measurable in decode or TTFT, and the pool came out the same on both machines."""
    cal = ROOT / "benchmarks/calibration"
    pairs = [[json.loads((cal / f"{n}{tag}.json").read_text()) for n in ("opt-embed-16g-h200", "opt-f085-16g-h200")]
             for tag in ("", "b")]
    preset = " ".join((ROOT / "config/presets.toml").read_text().replace("\n#", "\n").split())
    readme = " ".join((ROOT / "README.md").read_text().split())
    figure = lambda d, k: d["probe"]["decode_256"]["decode_tok_s"] if k == "dec" else d["probe"]["long"]["ttft_s"]  # noqa: E731
    dec = " and ".join(f"{figure(on, 'dec'):.1f} against {figure(off, 'dec'):.1f}" for on, off in pairs)
    ttft = " and ".join(f"{figure(on, 't'):.2f} against {figure(off, 't'):.2f}" for on, off in pairs)
    for on, off in pairs:
        assert on["kt_embed_host"] == "on" and off["kt_embed_host"] == "off" and on["device"] == off["device"]
        assert (on["measured"]["kv_pool_tokens"], off["measured"]["kv_pool_tokens"]) == (55211, 39403)
        assert abs(figure(on, "dec") / figure(off, "dec") - 1) < 0.02 and abs(figure(on, "t") / figure(off, "t") - 1) < 0.02
    pool = "55,211 tokens against 39,403 on both"
    for text in (kt.EMBED_HOST_DENSE, preset, readme):
        assert pool in text and dec.replace(" against", " tok/s against", 1) in text, text[:80]
        assert ttft.replace(" against", " s against", 1) in text


def test_a_plan_that_does_not_fit_offers_the_move_where_it_would():
    """The 14B at a 48K context on a 16 GB card: the pool falls short by less than the embeddings' size, so the
    alternatives of the plan with them on the GPU offer --kt-embed-host on, re-planned (it fits), with what the
    dense server measured; a tied table is never offered it."""
    target = _desktop_target()
    knobs = Knobs(**(catalog.presets()["optimized"].knobs | {"context": 49152, "kt_embed_host": "off"}))
    base = plan(catalog.model(DENSE), target, knobs, catalog.engine())
    offered = [a for a in base.alternatives if a.knobs == {"kt_embed_host": "on"}]
    assert not base.fits and len(offered) == 1 and offered[0].fits
    moved = plan(catalog.model(DENSE), target, replace(knobs, kt_embed_host="on"), catalog.engine(),
                 with_alternatives=False)
    assert f"pool {moved.kv_pool_tokens:,} tokens" in offered[0].cost and kt.EMBED_HOST_DENSE in offered[0].cost
    # the preset's own auto moves them by itself there, and fits
    auto = plan(catalog.model(DENSE), target, replace(knobs, kt_embed_host="auto"), catalog.engine())
    assert auto.fits and auto.kv_pool_tokens == moved.kv_pool_tokens
    assert offered[0].change == "the token embeddings in host RAM (--kt-embed-host on)"
    # a tied table (the head shares it: the 14B's plan drops one 1.45 GiB copy) at a context it does not fit either
    tied = plan(replace(catalog.model(DENSE), tie_word_embeddings=True), target, replace(knobs, context=65536),
                catalog.engine())
    assert not tied.fits and not [a for a in tied.alternatives if "kt_embed_host" in a.knobs]


def test_the_freed_bytes_are_the_tables_allocator_segment():
    freed, pinned = kt.embed_host_bytes(EMBED_BYTES)
    assert freed % (2 << 20) == 0 and 0 <= freed - EMBED_BYTES < 2 << 20 and pinned == GiB


@pytest.mark.parametrize("case, why", [
    ("offload", "beside --cpu-offload-gb"),
    ("tp2", "at tp 2 SGLang splits the embeddings"),
    ("tied", "ties its lm_head to the embeddings"),
])
def test_where_the_move_cannot_run_the_plan_refuses_it_in_one_line(case, why):
    model = catalog.model(FP8)
    knobs = Knobs(**(catalog.presets()["moe"].knobs | {"kt_embed_host": "on"}))
    if case == "offload":
        model = catalog.model(DENSE)
        knobs = Knobs(**(catalog.presets()["optimized"].knobs | {"kt_embed_host": "on", "cpu_offload_gib": 2}))
    elif case == "tp2":
        knobs = replace(knobs, tp=2)
    else:
        model = replace(model, tie_word_embeddings=True)
    p = plan(model, _desktop_target(), knobs, catalog.engine(), with_alternatives=False)
    lines = [str(r) for r in p.reasons if r.kind == "kt_embed_host"]
    assert not p.fits and len(lines) == 1 and why in lines[0] and "off keeps the embeddings on the GPU" in lines[0]


def test_a_gguf_models_quantized_table_is_not_moved():
    model = catalog.model(FP8)
    gguf = replace(model, quantization=replace(model.quantization, method="gguf"))
    assert kt.embed_host_problem(model, 1) is None
    assert "quantized ggml type" in kt.embed_host_problem(gguf, 1)


# --- the adapter -------------------------------------------------------------------------------------------------
def _adapter(name="vramkit_host_embed"):
    return load_module("services/sglang-kt/kt_compat/vramkit_host_embed.py", name)


def _model(tied=False, tp=1, dtype=torch.bfloat16):
    emb = torch.nn.Embedding(64, 8).to(dtype)
    emb.tp_size = tp
    head = torch.nn.Linear(8, 64, bias=False).to(dtype)
    if tied:
        head.weight = emb.weight
    return types.SimpleNamespace(model=types.SimpleNamespace(embed_tokens=emb), lm_head=head)


def test_the_adapter_moves_the_table_and_frees_its_memory():
    a, m = _adapter(), _model()
    table = m.model.embed_tokens.weight.detach().clone()
    emptied = []
    said = a.move_embed(m, to_host=lambda w: w.detach().clone(), view=lambda h: h, empty_cache=lambda: emptied.append(1))
    emb = m.model.embed_tokens
    assert emb.weight.data_ptr() == emb._vramkit_host_embed.data_ptr()   # the parameter reads the host copy
    assert torch.equal(emb.weight, table) and emptied == [1]
    assert said.startswith(f"{a.ENV}=on: embed_tokens (0.00 GiB) moved to pinned host RAM")
    ids = torch.tensor([3, 63, 0])
    assert torch.equal(torch.nn.functional.embedding(ids, emb.weight), table[ids])


@pytest.mark.parametrize("model, why", [
    (types.SimpleNamespace(model=types.SimpleNamespace()), "has no model.embed_tokens.weight"),
    (_model(tp=2), "split across 2 GPUs"),
    (_model(tied=True), "the lm_head is tied to the embeddings"),
    (_model(dtype=torch.float32), "not 2-byte elements"),
])
def test_the_adapter_leaves_a_table_it_cannot_move_and_says_why(model, why):
    a = _adapter()
    before = getattr(getattr(model.model, "embed_tokens", None), "weight", None)
    said = a.move_embed(model, to_host=lambda w: pytest.fail("moved"), view=lambda h: pytest.fail("viewed"),
                        empty_cache=lambda: pytest.fail("emptied"))
    assert why in said and "stay on the GPU" in said
    assert getattr(getattr(model.model, "embed_tokens", None), "weight", None) is before


def test_a_view_that_reads_other_values_leaves_the_table_on_the_gpu():
    a, m = _adapter(), _model()
    before = m.model.embed_tokens.weight.data_ptr()
    said = a.move_embed(m, to_host=lambda w: w.detach().clone(), view=lambda h: h * 0,
                        empty_cache=lambda: pytest.fail("emptied"))
    assert "differs from the GPU table" in said and m.model.embed_tokens.weight.data_ptr() == before


@pytest.mark.parametrize("where", ["pin", "view"])
def test_a_copy_the_driver_refuses_leaves_the_table_on_the_gpu_and_the_server_up(where):
    """The lever is the moe preset's default: a host that cannot pin or map the copy (a page-locked limit, a driver
    without unified addressing) starts with the table on the GPU and one line that says why, not a crash."""
    a, m = _adapter(), _model()
    before = m.model.embed_tokens.weight.data_ptr()

    def refuse(_):
        raise RuntimeError("CUDA error: invalid argument\nCUDA kernel errors might be asynchronously reported")
    said = a.move_embed(m, to_host=refuse if where == "pin" else (lambda w: w.detach().clone()),
                        view=refuse if where == "view" else (lambda h: h), empty_cache=lambda: pytest.fail("emptied"))
    assert "(RuntimeError: CUDA error: invalid argument); the embeddings stay on the GPU" in said
    assert "asynchronously" not in said and m.model.embed_tokens.weight.data_ptr() == before
    assert not hasattr(m.model.embed_tokens, "_vramkit_host_embed")


def test_up_warns_when_the_started_server_kept_the_embeddings_on_the_gpu():
    """`vramkit up` reads the started server's log: the adapter's own lines (made here by the adapter itself) say
    whether the table moved; where it stayed, the warning gives the reason and the pool against the plan, and where
    no line came at all the adapter was not on SGLang's path."""
    from vramkit.launch import steps
    a = _adapter()
    moved = "vramkit_kt_compat: " + a.move_embed(_model(), to_host=lambda w: w.detach().clone(), view=lambda h: h,
                                                 empty_cache=lambda: None)
    stayed = "vramkit_kt_compat: " + a.move_embed(_model(tied=True))
    pool = "max_total_num_tokens=34349, chunked_prefill_size=2048, max_running_requests=8, context_len=32768"
    p = plan(catalog.model(DENSE), _desktop_target(), Knobs(**(catalog.presets()["optimized"].knobs
                                                                 | {"kt_embed_host": "on"})), catalog.engine(),
             with_alternatives=False)
    assert p.host_embed_bytes and steps.embed_warning(p, f"{moved}\n{pool}") is None
    # the dashboard re-plans a running server from the same line (sglang_log: kt_embed_host is not an SGLang flag)
    assert sglang_log.parse(f"{moved}\n{pool}").values.get("embed_moved") is not None
    assert "embed_moved" not in sglang_log.parse(f"{stayed}\n{pool}").values
    said = steps.embed_warning(p, f"{stayed}\n{pool}")
    assert said is not None and "the lm_head is tied to the embeddings" in said
    assert f"KV pool 34,349 tokens against the plan's {p.kv_pool_tokens:,}" in said and "--kt-embed-host off" in said
    assert "not on SGLang's path" in (steps.embed_warning(p, pool) or "")
    off = plan(catalog.model(DENSE), _desktop_target(), Knobs(**(catalog.presets()["optimized"].knobs
                                                                 | {"kt_embed_host": "off"})), catalog.engine(),
               with_alternatives=False)
    assert steps.embed_warning(off, pool) is None        # nothing was moved: nothing to check


def test_pageable_memory_has_no_device_view():
    with pytest.raises(AssertionError, match="page-locked"):
        _adapter()._HostView(torch.zeros(4, 4, dtype=torch.int16))


def test_the_import_hook_wraps_the_load_only_when_asked_and_beside_the_snapshot(monkeypatch, capsys):
    """VRAMKIT_KT_EMBED_HOST=on: ModelRunner.load_model loads, then moves the table (its line on stderr); with the
    snapshot recorder asked too, the move runs inside the recording."""
    import sys
    compat = load_module("services/sglang-kt/kt_compat/vramkit_kt_compat.py", "vramkit_kt_compat_embed")
    embed = _adapter()
    # one variable, spelled in the knob (the launch sets it) and in both server-side modules (they cannot import vramkit)
    assert compat.EMBED_ENV == embed.ENV == knob_decl.by_name()["kt_embed_host"].env
    monkeypatch.setitem(sys.modules, "vramkit_host_embed", embed)
    calls = []
    monkeypatch.setattr(embed, "move_embed", lambda model: calls.append(("move", model)) or "moved it")
    monkeypatch.setattr(torch.cuda.memory, "_record_memory_history", lambda *a, **k: calls.append(("record",)))
    monkeypatch.setattr(torch.cuda.memory, "_dump_snapshot", lambda path: calls.append(("dump",)))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)

    class ModelRunner:
        model = "the model"

        def load_model(self):
            calls.append(("load",))
    module = types.SimpleNamespace(ModelRunner=ModelRunner)
    monkeypatch.delenv(compat.SNAPSHOT_ENV, raising=False)
    monkeypatch.delenv(compat.EMBED_ENV, raising=False)
    assert compat._patch_for(compat.SGLANG_RUNNER) is None
    monkeypatch.setenv(compat.EMBED_ENV, "off")
    assert compat._patch_for(compat.SGLANG_RUNNER) is None
    monkeypatch.setenv(compat.EMBED_ENV, "on")
    monkeypatch.setenv(compat.SNAPSHOT_ENV, "/tmp/snap")
    patcher = compat._patch_for(compat.SGLANG_RUNNER)
    patcher(module)
    patcher(module)                                     # idempotent: each wrapper once
    ModelRunner().load_model()
    assert [c[0] for c in calls] == ["record", "load", "move", "dump", "record"]
    assert calls[2][1] == "the model" and "vramkit_kt_compat: moved it" in capsys.readouterr().err


def test_the_gptq_config_run_is_what_the_readme_quotes():
    """moe-vs-llamacpp-gptq/h200-embhost/ (one H200 machine, the moe preset on the GPTQ-Int4 config, starts on, off):
    the GPU layers the servers logged, and the README's figures, from the probes."""
    run = ROOT / "benchmarks/results/gpu/moe-vs-llamacpp-gptq/h200-embhost"
    on, off = (json.loads((run / f"{n}.probe.json").read_text()) for n in ("k16-preset", "k16-preset-embgpu"))
    logs = [(run / f"{n}.evidence.txt").read_text() for n in ("k16-preset", "k16-preset-embgpu")]
    assert "(38 layers, no CPU round trip)" in logs[0] and "(36 layers, no CPU round trip)" in logs[1]
    assert sglang_log.EMBED_MOVED in logs[0] and sglang_log.EMBED_MOVED not in logs[1]
    dec = lambda p, n: next(d["aggregate_tok_s"] for d in p["decode"] if d["streams"] == n)     # noqa: E731
    after = lambda p, t, k="decode_tok_s": next(r[k] for r in p["ttft"] if r["prompt_tokens"] == t)   # noqa: E731
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert f"Decode {dec(on, 1):.1f} against {dec(off, 1):.1f} tok/s at depth 0 ({dec(on, 1) / dec(off, 1):.2f}x)" in readme
    three = lambda p: " / ".join(f"{after(p, t):.1f}" for t in (512, 8192, 30000))     # noqa: E731
    ratios = " / ".join(f"{after(on, t) / after(off, t):.2f}x" for t in (512, 8192, 30000))
    assert f"after a 512 / 8K / 30K prompt {three(on)} against {three(off)} ({ratios})" in readme
    assert f"4 streams {dec(on, 4):.1f} against {dec(off, 4):.1f} tok/s ({dec(on, 4) / dec(off, 4):.2f}x)" in readme
    t_on, t_off = after(on, 30000, "ttft_s"), after(off, 30000, "ttft_s")
    assert f"after 30K in {t_on:.2f} against {t_off:.2f} s ({t_on / t_off:.2f}x)" in readme


def test_the_gptq_default_beside_llama_cpp_is_what_the_readme_quotes():
    """moe-vs-llamacpp-gptq/h200-embhost-llama/ (a third H200 machine: the moe preset as it comes on the GPTQ-Int4
    config, llama.cpp's Q4_K_M pair, medians of 3 rounds): the kit placed 38 GPU layers with the embeddings moved, and
    the README's table and ratios are the probes' medians, each the middle of its rounds."""
    moe_session = load_module("benchmarks/gpu/moe_session.py", "moe_session_embhost", register=True)
    run = ROOT / "benchmarks/results/gpu/moe-vs-llamacpp-gptq/h200-embhost-llama"
    names = ("k16-preset", "llama-16-fit", "llama-16-best")
    probes = {n: json.loads((run / f"{n}.probe.json").read_text()) for n in names}
    evidence = (run / "k16-preset.evidence.txt").read_text()
    assert "(38 layers, no CPU round trip)" in evidence and sglang_log.EMBED_MOVED in evidence
    assert (run / "llama-16-best-ncmoe.txt").read_text().strip() == "11"
    fig = {n: moe_session.probe_figures(p) for n, p in probes.items()}
    for n, p in probes.items():
        assert p["repeat"] == 3 and sorted(r["per_stream_tok_s"] for r in p["decode"][0]["rounds"])[1] \
            == pytest.approx(fig[n]["decode_tok_s"], abs=0.005)
    readme = " ".join((ROOT / "README.md").read_text().split())
    rounds = lambda n: ", ".join(f"{r['per_stream_tok_s']:.1f}" for r in probes[n]["decode"][0]["rounds"])  # noqa: E731
    k, f, b = (fig[n] for n in names)
    assert (f"| decode, depth 0 (the three rounds) | {k['decode_tok_s']:.1f} tok/s ({rounds(names[0])}) | "
            f"{f['decode_tok_s']:.1f} ({rounds(names[1])}) | **{b['decode_tok_s']:.1f}** ({rounds(names[2])}) |") in readme
    ttft = {n: {r["prompt_tokens"]: r["ttft_s"] for r in p["ttft"]} for n, p in probes.items()}     # unrounded
    cells = [f"{ttft[n][8192]:.2f} / {ttft[n][30000]:.2f} s" for n in names]
    assert f"| TTFT 8K / 30K | **{cells[0]}** | {cells[1]} | {cells[2]} |" in readme
    assert (f"| 4 streams, aggregate | {k['aggregate_4_streams_tok_s']:.1f} tok/s | {f['aggregate_4_streams_tok_s']:.1f}"
            f" | **{b['aggregate_4_streams_tok_s']:.1f}** |") in readme
    best = lambda key, low=False: (min if low else max)(f[key], b[key])     # noqa: E731
    said = (f"decode **{k['decode_tok_s'] / best('decode_tok_s'):.2f}x** at depth 0, "
            f"{k['decode_tok_s_8k'] / best('decode_tok_s_8k'):.2f}x after 8K, "
            f"{k['decode_tok_s_30k'] / best('decode_tok_s_30k'):.2f}x after 30K; the first token after 30K in "
            f"{k['ttft_30k_s'] / best('ttft_30k_s', True):.2f}x the time; 4 streams "
            f"{k['aggregate_4_streams_tok_s'] / best('aggregate_4_streams_tok_s'):.2f}x")
    assert said in readme
    assert (f"the kit {1000 / k['decode_tok_s']:.2f} ms with 10 CPU layers, llama.cpp {1000 / b['decode_tok_s']:.2f} ms"
            in readme)
