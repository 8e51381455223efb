"""benchmarks/gpu/render_reports.py regenerates the committed GPU bench plots and A/B tables from their JSONs."""
from __future__ import annotations

import shutil
from pathlib import Path

from repo_modules import load_module

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "benchmarks" / "results" / "gpu"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _script():
    return load_module("benchmarks/gpu/render_reports.py")


def test_regenerates_the_committed_reports(tmp_path, capsys):
    for f in [*RESULTS.glob("*-16g.json"), *RESULTS.glob("moe-16g*.json")]:
        shutil.copy(f, tmp_path)
    assert _script().main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "128k-16g: no suite with a plot (ran: latency, roofline)" in out
    for name in ("compare-hicache.md", "compare-presets.md", "moe-16g-compare.md"):
        assert (tmp_path / name).read_text() == (RESULTS / name).read_text(), f"{name} is stale: rerun the script"
    pngs = sorted(p.name for p in tmp_path.glob("*.png"))
    # moe-16g-summary.png comes from benchmarks/gpu/moe_report.py (the test below), moe-vs-llamacpp-*.png from
    # moe_vs_llamacpp_report.py (tests/unit/test_moe_vs_llamacpp.py)
    assert pngs == sorted(p.name for p in RESULTS.glob("*.png")
                          if p.name != "moe-16g-summary.png" and not p.name.startswith("moe-vs-llamacpp"))
    assert pngs == ["baseline-16g-concurrency.png", "baseline-16g-context.png", "compare-hicache.png",
                    "compare-presets.png", "moe-16g-compare.png", "optimized-16g-concurrency.png",
                    "optimized-16g-context.png", "optimized-16g-multiturn.png"]
    assert all((tmp_path / p).read_bytes()[:8] == PNG_MAGIC for p in pngs)


def test_host_cache_ab_is_like_for_like():
    """Same seed, same 6 sessions: the committed A/B changes only the host cache."""
    md = (RESULTS / "compare-hicache.md").read_text()
    assert "Not like for like" not in md
    assert "| multi-turn prefix hit ratio | 0.0 % | 95.3 % |" in md


def test_moe_summary_is_what_its_data_says(tmp_path, monkeypatch):
    """benchmarks/gpu/moe_report.py: issue 12's table, from benchmarks/results/gpu/moe/ (regenerated = committed)."""
    mod = load_module("benchmarks/gpu/moe_report.py")
    monkeypatch.setattr(mod, "RES", tmp_path)
    assert mod.main() == 0
    assert (tmp_path / "moe-16g-summary.md").read_text() == (RESULTS / "moe-16g-summary.md").read_text()
    assert (tmp_path / "moe-16g-summary.png").read_bytes()[:8] == PNG_MAGIC
    assert "| AMXINT4 (AMX) | 43, 14 | 38.4 /" in (RESULTS / "moe-16g-summary.md").read_text()
