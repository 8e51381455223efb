"""Text generated from data (the knob table in config/presets.toml, the README's preset, roofline and
physics tables) matches a fresh render, as the compose files do (test_compose_fresh.py)."""
from __future__ import annotations

import pytest

from vramkit import generated
from vramkit.errors import Exit, VramkitError


@pytest.mark.parametrize("block", generated.BLOCKS, ids=lambda b: f"{b.path.name}: {b.name}")
def test_committed_block_is_fresh(block):
    text = block.path.read_text()
    assert generated.render_file(text, block) == text, f"{block.path.name}: {block.name} is stale: run `make compose`"


def test_a_block_is_replaced_between_its_markers_only():
    block = generated.Block(generated.REPO_ROOT / "x.md", "t", lambda: ["new 1", "new 2"], generated.HTML)
    begin, end = block.markers()
    text = f"before\n{begin}\nold\n{end}\nafter\n"
    assert generated.render_file(text, block) == f"before\n{begin}\nnew 1\nnew 2\n{end}\nafter\n"
    with pytest.raises(VramkitError) as e:
        generated.render_file("no markers\n", block)
    assert e.value.code == Exit.BAD_FILE


def test_the_readme_ceiling_is_the_planners():
    """The issue's drift: the README said 393 tok/s for the H100 while `vramkit plan` said otherwise."""
    ceiling, _ = generated._ceiling("h100-80gb", 1024)
    readme = (generated.REPO_ROOT / "README.md").read_text()
    assert f"{ceiling:.1f} tok/s" in readme


def test_the_16_gb_choice_is_worded_from_the_comparisons(tmp_path, monkeypatch):
    """The README's "which to run" paragraph reads its figures from the committed comparisons and the accuracy
    proxy, and calls the kit "about as fast" as llama.cpp on Q8_0 only inside the kit's own spread (a fifth)."""
    import json
    import shutil
    res = generated.REPO_ROOT / "benchmarks" / "results" / "gpu"
    dst = tmp_path / "benchmarks" / "results" / "gpu"
    for rel in ("moe-vs-llamacpp-16g.json", "moe-vs-llamacpp-q8-16g.json", "peer-accuracy/accuracy-cpu.json",
                "kt-llamafile/accuracy-cpu.json", "moe-budget.json"):
        (dst / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(res / rel, dst / rel)
    monkeypatch.setattr(generated, "REPO_ROOT", tmp_path)
    text = " ".join(generated._which_to_run(generated._comparisons(), generated._proxy_rows()))
    q8 = json.loads((dst / "moe-vs-llamacpp-q8-16g.json").read_text())
    k8 = q8["engines"]["vramkit"]
    r = k8["decode_tok_s"] / q8["engines"]["llamacpp"]["decode_tok_s"]
    assert ("about as fast as" if abs(1 - r) <= 0.2 else f"at {r:.2f}x the rate of") in text
    assert f"whole layers: {k8['decode_tok_s']:.1f} tok/s," in text
    # each pairing's figures beside its own machine: no ratio across the two sessions
    rounds = q8.get("rounds", 1)                                     # the probes' --repeat
    assert f"(one session, {q8['device'].split(',')[0]}" + (f", each figure the median of {rounds} rounds" if rounds > 1
                                                            else "") + ")" in text
    q4 = json.loads((dst / "moe-vs-llamacpp-16g.json").read_text())
    assert (f"In the first Q4_K_M pairing ({q4['date'][:10]}, the CPU layers on kt-kernel; one session, "
            f"{q4['device'].split(',')[0]})") in text
    assert f"{q4['engines']['llamacpp']['decode_tok_s'] / q4['engines']['vramkit']['decode_tok_s']:.2f}x the kit's" in text
    assert k8["settings"]["gpu_layers"] > 0 and "The preset now places whole layers" not in text
    # a split 8-bit row (as 2026-11-27's was): the paired whole-layer figure says what the preset places since
    k8["settings"]["gpu_layers"] = 0
    (dst / "moe-vs-llamacpp-q8-16g.json").write_text(json.dumps(q8))
    text = " ".join(generated._which_to_run(generated._comparisons(), generated._proxy_rows()))
    assert f"split: {k8['decode_tok_s']:.1f} tok/s," in text
    fp = json.loads((dst / "moe-budget.json").read_text())["seeded"]["best16"]["fp8"]["paired_whole_with_split"]
    assert f"The preset now places whole layers, which decoded {fp['single_median']:.2f}x that split" in text
    q8["engines"]["vramkit"]["decode_tok_s"] = q8["engines"]["llamacpp"]["decode_tok_s"]
    (dst / "moe-vs-llamacpp-q8-16g.json").write_text(json.dumps(q8))
    text = " ".join(generated._which_to_run(generated._comparisons(), generated._proxy_rows()))
    assert "about as fast as llama.cpp on a Q8_0 file" in text
    q8["engines"]["vramkit"]["decode_tok_s"] = 0.5 * q8["engines"]["llamacpp"]["decode_tok_s"]
    q8["engines"]["vramkit"]["ttft_30k_s"] = 2 * q8["engines"]["llamacpp"]["ttft_30k_s"]
    (dst / "moe-vs-llamacpp-q8-16g.json").write_text(json.dumps(q8))
    text = " ".join(generated._which_to_run(generated._comparisons(), generated._proxy_rows()))
    assert "about as fast" not in text and "at 0.50x the rate of llama.cpp on a Q8_0 file" in text
    assert "the preset is slower to a 30K-token prompt's first token" in text
    (dst / "moe-vs-llamacpp-q8-16g.json").unlink()
    assert generated._which_to_run(generated._comparisons(), generated._proxy_rows()) == []          # no 8-bit comparison: no paragraph, no guess


def test_the_moe_table_says_whether_its_sessions_share_a_cpu(tmp_path, monkeypatch):
    """The MoE table's pairings ran on different machines (H100, H200): it says their CPUs are the same only where
    every session's host.txt reads the same by lscpu, GPU line and clocks aside."""
    import json
    import shutil
    res = generated.REPO_ROOT / "benchmarks" / "results" / "gpu"
    comparisons = generated._comparisons()
    assert len({c["device"].split(",")[0] for c in comparisons.values()}) == 2          # an H100 and an H200
    assert generated._host_cpus(comparisons).startswith("every session's CPU the same by lscpu: ")
    dst = tmp_path / "benchmarks" / "results" / "gpu"
    for c in comparisons.values():
        (dst / c["evidence_dir"]).mkdir(parents=True, exist_ok=True)
        shutil.copy(res / c["evidence_dir"] / "host.txt", dst / c["evidence_dir"] / "host.txt")
    monkeypatch.setattr(generated, "REPO_ROOT", tmp_path)
    assert generated._host_cpus(comparisons).startswith("every session's CPU the same")
    q8 = dst / json.loads((res / "moe-vs-llamacpp-q8-16g.json").read_text())["evidence_dir"] / "host.txt"
    q8.write_text(q8.read_text().replace("L3 cache:", "L3 cache: 64 MiB #"))
    assert generated._host_cpus(comparisons) == "the sessions' CPUs differ (each host.txt)"
