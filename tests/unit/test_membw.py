"""The host-read sweep (vramkit/adapters/membw.py) on this machine's CPU with real torch: one record per thread count,
rounds taken in turn with each count's best kept, and the pinned sweep in a child process with bound threads."""
from __future__ import annotations

import pytest

from vramkit.adapters import membw

SIZE = 32 << 20      # small: the records' shape and the rounds' order are under test, not this machine's bandwidth


def _sane(runs, counts):
    assert [r["threads"] for r in runs] == counts
    for r in runs:
        assert r["bytes"] == SIZE and r["seconds"] > 0 and r["bytes_per_s"] == int(r["bytes"] / r["seconds"])


def test_one_round_is_the_sweep_the_estimate_was_fitted_on():
    runs = membw.sweep([1, 2], SIZE)
    _sane(runs, [1, 2])
    assert all("rounds" not in r for r in runs)


def test_rounds_visit_every_count_in_turn_and_keep_each_best(monkeypatch):
    seen, times = [], iter([3.0, 2.0, 1.0, 4.0, 2.5, 0.5])
    monkeypatch.setattr(membw, "_best_pass", lambda buf, t, repeats: seen.append(t) or next(times))
    runs = membw.sweep([1, 2], SIZE, rounds=3)
    assert seen == [1, 2, 1, 2, 1, 2]
    assert [(r["threads"], r["seconds"], r["rounds"]) for r in runs] == [(1, 1.0, 3), (2, 0.5, 3)]
    assert [r["slowest_bytes_per_s"] for r in runs] == [int(SIZE / 3.0), int(SIZE / 4.0)]     # each count's slowest
    w = membw.widest_spread(runs)
    assert w["threads"] == 2 and w["spread"] == pytest.approx(7.0, rel=1e-6)      # 4.0 s against 0.5 s
    assert membw.widest_spread([{"threads": 1, "bytes_per_s": 10}]) is None    # one round: nothing to compare


def test_the_pinned_sweep_runs_in_a_child_with_bound_threads(monkeypatch):
    runs = membw.sweep_pinned([1, 2], SIZE, rounds=2)
    _sane(runs, [1, 2])
    assert all(r["pinned"] == {"OMP_PROC_BIND": "close", "OMP_PLACES": "cores"} and r["rounds"] == 2 for r in runs)
    monkeypatch.setattr(membw.sys, "executable", "false")      # a child that fails without a word: one line still
    with pytest.raises(RuntimeError, match=r"^pinned sweep failed: exit status 1$"):
        membw.sweep_pinned([1], SIZE)


def test_the_idle_machine_s_sweeps_are_what_the_readme_and_host_rounds_say():
    """membw-noise/h200.json (benchmarks/gpu/membw_noise.py on an idle H200 machine of the GPU host): the README's
    12-thread figures are the file's, its readings fall in two modes a third apart, and HOST_ROUNDS is the least
    count of rounds that misses the high mode at most one time in ten, if each sweep lands in it as often as there."""
    import json
    from pathlib import Path
    root = Path(__file__).resolve().parents[2]
    d = json.loads((root / "benchmarks/results/gpu/membw-noise/h200.json").read_text())
    xs = [r["bytes_per_s"] / 1e9 for s in d["sweeps"] for r in s["runs"] if r["threads"] == 12]
    b = d["by_threads"]["12"]
    assert b["n"] == len(xs) and b["min_gbs"] == round(min(xs), 1) and b["max_gbs"] == round(max(xs), 1)
    high = sum(x >= 0.85 * max(xs) for x in xs)
    assert max(xs) / min(xs) > 1.3 and 0 < high < len(xs)
    assert not any(0.8 * max(xs) < x < 0.85 * max(xs) for x in xs)            # a gap between the two modes
    readme = " ".join((root / "README.md").read_text().split())
    assert (f"{len(d['sweeps'])} one-round sweeps in 140 s read 12 threads in two modes" in readme
            and f"({b['min_gbs']}-{b['max_gbs']}, median {b['median_gbs']}; the high mode in {high};" in readme)
    miss = 1 - high / len(xs)
    assert miss ** membw.HOST_ROUNDS <= 0.10 < miss ** (membw.HOST_ROUNDS - 1)
