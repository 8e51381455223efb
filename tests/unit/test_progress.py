"""Progress for the slow steps (issue 19 item 8): SGLang's start (its log's phases, the shards loaded, time
elapsed, an ETA from the last start of the same server here) and the moe preset's expert conversion."""
from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.test_launcher import ScriptedStart, _log_upto
from vramkit.adapters import state
from vramkit.core import progress, sglang_log
from vramkit.launch import steps

REAL_LOG = (Path(__file__).resolve().parents[1] / "data" / "sglang-gptq-start.log").read_text()


def test_duration_and_eta():
    assert [progress.duration(s) for s in (0, 42.4, 185, 3720)] == ["0 s", "42 s", "3 min 05 s", "1 h 02 min"]
    assert progress.eta(0, 48, 10.0) is None                     # no rate before the first step
    assert progress.eta(12, 48, 60.0) == pytest.approx(180.0)    # 5 s each, 36 left


def test_steps_line_has_size_rate_and_eta():
    line = progress.steps_line("layer", 12, 48, 60.0, done_bytes=3 * 2**30)
    assert line == ("layer 12 of 48 (25 %), 3.00 GiB written at 0.05 GiB/s, 1 min 00 s elapsed, "
                    "ETA 3 min 00 s")
    assert progress.steps_line("layer", 0, 48, 1.0).endswith("ETA after the first one")


def test_start_line_says_where_its_eta_comes_from():
    assert progress.start_line("loading weights", 3, 8, 42, 72.0, (2, 5)) == (
        "loading weights (3/8; shard 2 of 5), 42 s elapsed, ETA ~30 s (the last start of this server here took 1 min 12 s)")
    assert "no ETA (no earlier start" in progress.start_line("loading weights", 3, 8, 42, None)
    assert "past the 1 min 12 s" in progress.start_line("warming up", 6, 8, 100, 72.0)


def test_the_loaders_shard_bar_is_read():
    text = "Load weight begin. avail mem=15.33 GB\rLoading safetensors checkpoint shards:  40% Completed | 2/5 [00:03<00:04]"
    assert sglang_log.shards(text) == (2, 5)
    assert sglang_log.shards(REAL_LOG[:200]) is None


@pytest.fixture
def spec(tmp_path, monkeypatch):
    monkeypatch.setenv("VRAMKIT_STATE_DIR", str(tmp_path / "state"))
    return steps.LaunchSpec(name="vramkit-test", runtime="native", timeout_s=600)


def test_every_poll_reports_the_phase_elapsed_and_eta(spec):
    markers = [None, "Load weight begin", "Capture target decode CUDA graph begin"]
    start = ScriptedStart([(_log_upto(m), 503, True) for m in markers] + [(REAL_LOG, 200, True)])
    lines: list[str] = []
    steps.wait_healthy(start, spec, is_alive=start.is_alive, read_log=start.read_log, sleep=start.sleep,
                       clock=start.clock, on_progress=lines.append, last_start_s=10.0)
    n = len(sglang_log.PHASES)
    assert lines[0].startswith(f"starting the server process (0/{n}), 0 s elapsed, ETA ~10 s")
    assert lines[1].startswith(f"loading weights (3/{n}), 2 s elapsed, ETA ~8 s")
    assert lines[2].startswith("capturing decode CUDA graphs") and "4 s elapsed, ETA ~6 s" in lines[2]


def test_the_start_time_is_kept_for_the_next_eta(spec):
    assert state.last_start_seconds("native:abc") is None
    state.save_start_seconds("native:abc", 71.96)
    assert state.last_start_seconds("native:abc") == 72.0
    (state.state_dir() / state.START_TIMES).write_text("not json")
    assert state.last_start_seconds("native:abc") is None        # unreadable: no ETA, not a crash


def test_compose_progress_lines_are_passed_on_as_they_come():
    """`docker compose up` writes its pull and build progress to stderr: each line reaches the caller, and the
    last one is kept for the error (a real process stands in for compose; no Docker on the test machine)."""
    from vramkit.adapters import docker
    seen: list[str] = []
    script = "echo 'Pulling sglang 1.2GB/9.8GB' >&2; echo 'Pulled' >&2; echo 'Error: no space left' >&2; exit 3"
    tail, code = docker._stream(["bash", "-c", script], seen.append, timeout=30)
    assert seen == ["Pulling sglang 1.2GB/9.8GB", "Pulled", "Error: no space left"] and code == 3
    assert tail[-1] == "Error: no space left"
