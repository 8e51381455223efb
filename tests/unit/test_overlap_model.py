"""benchmarks/gpu/overlap_model.py: a decode step scheduled on the GPU stream and the CPU pool, what overlap could give
at 4 streams (derived from r7/ and r7-prof/, not measured), and the committed figures the README quotes."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from repo_modules import load_module

REPO = Path(__file__).resolve().parents[2]
RUN = REPO / "benchmarks" / "results" / "gpu" / "moe-vs-llamacpp-int4"


@pytest.fixture(scope="module")
def om():
    return load_module("benchmarks/gpu/overlap_model.py")


def test_one_micro_batch_runs_its_layers_back_to_back(om):
    assert om.schedule(1, 0.1, 0.02, 0.5, set()) == pytest.approx(48 * 0.1)
    cpu = {0, 1, 2}
    assert om.schedule(1, 0.1, 0.02, 0.5, cpu) == pytest.approx(45 * 0.1 + 3 * (0.02 + 0.5))


def test_two_micro_batches_share_the_gpu_and_overlap_only_where_the_cpu_layers_leave_room(om):
    # no CPU layers: the GPU serves both in turn
    assert om.schedule(2, 0.1, 0.02, 0.5, set()) == pytest.approx(2 * 48 * 0.1)
    gpu_total = 2 * (38 * 0.1 + 10 * 0.02)
    cpu_total = 2 * 10 * 0.4
    serial = gpu_total + cpu_total
    first = om.schedule(2, 0.1, 0.02, 0.4, set(range(10)))
    spread = om.schedule(2, 0.1, 0.02, 0.4, om.spread(10))
    # spread, one micro-batch's CPU layer runs while the other does the GPU layers before its own
    assert max(gpu_total, cpu_total) <= spread < first <= serial
    assert spread < 0.8 * serial
    assert om.spread(10) == {0, 5, 10, 14, 19, 24, 29, 34, 38, 43} and len(om.spread(12)) == 12


def test_the_distinct_experts_and_the_server_windows(om):
    assert om.distinct(1) == pytest.approx(8) and om.distinct(4) == pytest.approx(29.1, abs=0.05)
    text = ("vramkit_int4_experts: calls 1-1024: 0.510 ms a call computing\n"        # warm-up: out
            "vramkit_int4_experts: calls 1025-2048: 0.300 ms a call computing\n"
            "vramkit_int4_experts: calls 2049-3072: 0.650 ms a call computing\n"      # mixed: out
            "vramkit_int4_experts: calls 3073-4096: 1.000 ms a call computing\n")
    assert om.server_calls(text, 0.25, 0.82) == {"batch1_ms": [0.3], "batch4_ms": [1.0]}


def test_the_committed_derivation_is_the_script_s_and_the_readme_quotes_it(om):
    """overlap-derived.json regenerates from r7/ and r7-prof/; the one-batch case lands within 10 % of the server it
    stands for; the README quotes its cases and says they are derived."""
    got = om.derive()
    assert json.loads((RUN / "overlap-derived.json").read_text()) == json.loads(json.dumps(got)), \
        "overlap-derived.json is stale: rerun benchmarks/gpu/overlap_model.py"
    assert got["derived_not_measured"] and abs(got["one_batch_model_error"]) < 0.10
    one, first, spread = (c["step_ms"] for c in got["cases"])
    assert spread < one < first
    readme = " ".join((REPO / "README.md").read_text().split())
    m = got["measured"]
    assert (f"the server as it runs {one:.1f} ms a step where `r7/` measured {m['four_stream_step_ms']:.1f} "
            f"({got['one_batch_model_error']:+.0%})") in readme
    assert f"with the CPU layers first {first:.1f} ms" in readme
    assert f"spread evenly {spread:.1f} ms, {got['cases'][2]['tok_s']:.0f} tok/s" in readme
