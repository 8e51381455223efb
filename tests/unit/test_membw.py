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


def test_the_pinned_sweep_runs_in_a_child_with_bound_threads(monkeypatch):
    runs = membw.sweep_pinned([1, 2], SIZE, rounds=2)
    _sane(runs, [1, 2])
    assert all(r["pinned"] == {"OMP_PROC_BIND": "close", "OMP_PLACES": "cores"} and r["rounds"] == 2 for r in runs)
    monkeypatch.setattr(membw.sys, "executable", "false")      # a child that fails without a word: one line still
    with pytest.raises(RuntimeError, match=r"^pinned sweep failed: exit status 1$"):
        membw.sweep_pinned([1], SIZE)
