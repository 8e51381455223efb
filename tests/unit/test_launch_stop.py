"""Stopping and pinning report their failures (issue 11: no silent fallbacks): a failed `docker compose
down` is one line with its own exit code and the run record stays, so `down` can be run again; a CPU pin
the kernel refuses says why. A native server's `down` returns once the GPU no longer lists its processes, or warns
(issue 18: a start right after `down` planned against the stopped server's memory)."""
from __future__ import annotations

import os
import subprocess
import time

import pytest

from vramkit.adapters import docker
from vramkit.adapters.process import tree_pids
from vramkit.adapters.state import read_running, write_running
from vramkit.cli import main
from vramkit.errors import Exit
from vramkit.launch.up import pin


@pytest.fixture
def recorded(tmp_path, monkeypatch):
    monkeypatch.setenv("VRAMKIT_STATE_DIR", str(tmp_path / "state"))
    compose_file = tmp_path / "vramkit-t.compose.yml"
    compose_file.write_text("services: {}\n")
    write_running("vramkit-t", {"name": "vramkit-t", "runtime": "docker", "port": 30000, "pid": None,
                                "compose_file": str(compose_file)})
    return compose_file


def _compose_answers(monkeypatch, answer):
    """The docker CLI's answer to `docker compose ... down`, scripted (the same seam test_launcher.py uses)."""
    monkeypatch.setattr(docker.shutil, "which", lambda name: "/usr/bin/docker")
    calls = []

    def run(cmd, timeout=60):
        calls.append(cmd)
        assert cmd[:2] == ["docker", "compose"] and "down" in cmd, cmd
        if isinstance(answer, Exception):
            raise answer
        return answer
    monkeypatch.setattr(docker, "_run", run)
    return calls


@pytest.mark.parametrize("answer", [
    subprocess.CompletedProcess([], 1, "", "Error response from daemon: cannot stop container: permission denied"),
    subprocess.TimeoutExpired(["docker", "compose"], 300),
])
def test_failed_compose_down_is_reported_and_the_record_kept(monkeypatch, capsys, recorded, answer):
    _compose_answers(monkeypatch, answer)
    assert main(["down", "--name", "vramkit-t"]) == Exit.STOP_FAILED
    out = capsys.readouterr()
    assert "stopped" not in out.out
    assert out.err.startswith("vramkit: ") and out.err.count("\n") == 1 and "compose down" in out.err
    assert [e["name"] for e in read_running("vramkit-t")] == ["vramkit-t"]


def test_successful_compose_down_drops_the_record(monkeypatch, capsys, recorded):
    calls = _compose_answers(monkeypatch, subprocess.CompletedProcess([], 0, "", ""))
    assert main(["down", "--name", "vramkit-t"]) == 0
    assert "stopped vramkit-t" in capsys.readouterr().out and calls
    assert read_running("vramkit-t") == []


def test_compose_down_without_docker_is_reported(monkeypatch, capsys, recorded):
    monkeypatch.setattr(docker.shutil, "which", lambda name: None)
    assert main(["down", "--name", "vramkit-t"]) == Exit.STOP_FAILED
    assert read_running("vramkit-t")


def test_a_refused_pin_says_why_and_a_possible_one_takes():
    proc = subprocess.Popen(["sleep", "30"])
    try:
        assert pin(proc.pid, (100_000,)) is not None          # no such CPU: the kernel refuses
        mine = tuple(sorted(os.sched_getaffinity(0)))[:1]
        assert pin(proc.pid, mine) is None
        assert os.sched_getaffinity(proc.pid) == set(mine)
    finally:
        proc.kill()
        proc.wait()


def test_an_unreadable_run_record_is_named_not_skipped_in_silence(recorded, capsys):
    """Issue 17 item 6: a half-written record is left out with one line saying which file and what to do."""
    (recorded.parent / "state" / "vramkit-broken.json").write_text('{"name": "vramkit-bro')
    names = [e["name"] for e in read_running()]
    err = capsys.readouterr().err
    assert names == ["vramkit-t"]
    assert err.count("\n") == 1 and "vramkit-broken.json is unreadable" in err and "remove it" in err


def test_an_unknown_in_use_before_the_start_is_not_zero(tmp_path):
    """Issue 17 item 6: without an NVML reading the budget rests on the plan's assumed reserve, and says so."""
    from vramkit.core.plan.request import PlanRequest
    from vramkit.launch import steps
    from vramkit.launch.resolve import resolve
    r = resolve(PlanRequest(preset="optimized", gpu="rtx-4090-24gb", host_ram_gib=64.0))
    measured, basis_m = steps.vram_budget(r, 3 << 30)
    assumed, basis_a = steps.vram_budget(r, None)
    held = r.gpu.memory_total_bytes - r.plan.free_at_start_bytes - r.plan.startup_overhead_bytes
    assert held == r.plan.held_besides_server_bytes
    assert measured == int((3 << 30) + r.plan.peak_vram_bytes * 1.05) and "NVML" in basis_m
    assert assumed == int(held + r.plan.peak_vram_bytes * 1.05) and held > 0 and "not read" in basis_a


def _listing(pid_held: int):
    """A 16 GB card where a stopped server's process `pid_held` still holds 12 GiB, beside Xorg."""
    from tests.unit import nvml_scenarios as sc
    gpu = sc.rtx4080(used=12 * sc.GiB, procs=[(pid_held, 12 * sc.GiB), (1337, 200 * sc.MiB)])
    return sc.FakeNvml([gpu], names={pid_held: "sglang::scheduler", 1337: "Xorg"})


def test_gpu_released_waits_until_the_gpu_no_longer_lists_the_stopped_pids(monkeypatch):
    from vramkit.launch.up import gpu_released
    fake = _listing(5001).install(monkeypatch)
    slept = []

    def sleep(s):                 # the driver frees the memory after the second wait
        slept.append(s)
        if len(slept) == 2:
            fake.gpus[0].procs = [(1337, 200 << 20)]
    assert gpu_released({5000, 5001}, timeout_s=30, poll_s=0.5, clock=lambda: 0.0, sleep=sleep)
    assert slept == [0.5, 0.5]


def test_gpu_released_gives_up_after_its_timeout(monkeypatch):
    from vramkit.launch.up import gpu_released
    _listing(5001).install(monkeypatch)
    now = [0.0]

    def sleep(s):
        now[0] += s
    assert not gpu_released({5001}, timeout_s=3.0, poll_s=0.5, clock=lambda: now[0], sleep=sleep)
    assert now[0] == 3.0
    # another user's process on the card is not waited for
    assert gpu_released({7777}, timeout_s=3.0, poll_s=0.5, clock=lambda: now[0], sleep=sleep)


def test_gpu_released_without_nvml_has_nothing_to_wait_for(monkeypatch):
    from tests.unit import nvml_scenarios as sc
    from vramkit.launch.up import gpu_released
    sc.driver_missing().install(monkeypatch)
    assert gpu_released({5001}, sleep=lambda s: pytest.fail("waited without NVML"))


def test_down_stops_a_native_servers_tree_and_warns_when_the_gpu_keeps_it(tmp_path, monkeypatch, capsys):
    from vramkit.launch import up
    monkeypatch.setenv("VRAMKIT_STATE_DIR", str(tmp_path / "state"))
    proc = subprocess.Popen(["sh", "-c", "sleep 30 & wait"], start_new_session=True)
    try:
        deadline = time.monotonic() + 5
        while len(tree_pids(proc.pid)) < 2 and time.monotonic() < deadline:     # the shell has started its child
            time.sleep(0.05)
        write_running("vramkit-n", {"name": "vramkit-n", "runtime": "native", "port": 30000, "pid": proc.pid})
        seen = []
        monkeypatch.setattr(up, "gpu_released", lambda pids, timeout_s: seen.append(pids) or False)
        assert main(["down", "--name", "vramkit-n"]) == 0
        out = capsys.readouterr()
        assert len(seen[0]) == 2 and proc.pid in seen[0]           # the shell and its child, read before the stop
        assert out.err.startswith("vramkit: warning: the GPU still lists vramkit-n's processes")
        assert out.err.count("\n") == 1 and "stopped vramkit-n" in out.out
        assert proc.wait(timeout=5) is not None and read_running("vramkit-n") == []
    finally:
        proc.kill()
        proc.wait()
