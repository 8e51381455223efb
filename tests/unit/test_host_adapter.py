"""The host adapter on recorded /sys trees (one per CPU kind), container detection, real affinity."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from vramkit.adapters import host
from vramkit.core import host_plan as hp


def write(root: Path, rel: str, text: str) -> None:
    p = root / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text + "\n")


def sysfs(root: Path, online: str, siblings: dict[int, str], numa: dict[int, str],
          extra: dict[str, str] = ()) -> Path:
    write(root, "devices/system/cpu/online", online)
    for cpu, sib in siblings.items():
        write(root, f"devices/system/cpu/cpu{cpu}/topology/thread_siblings_list", sib)
    for node, cpus in numa.items():
        write(root, f"devices/system/node/node{node}/cpulist", cpus)
    for rel, text in dict(extra).items():
        write(root, rel, text)
    return root


def intel_hybrid_i7_13700(root: Path) -> Path:
    """8 P-cores with two threads each (0-15), 8 E-cores (16-23); the kernel's hybrid PMU dirs."""
    sib = {c: f"{c - c % 2}-{c - c % 2 + 1}" for c in range(16)} | {c: str(c) for c in range(16, 24)}
    return sysfs(root, "0-23", sib, {0: "0-23"},
                 {"devices/cpu_core/cpus": "0-15", "devices/cpu_atom/cpus": "16-23"})


def arm_big_little(root: Path) -> Path:
    """4 little (capacity 446) + 4 big (1024) cores, no SMT."""
    caps = {f"devices/system/cpu/cpu{c}/cpu_capacity": ("446" if c < 4 else "1024") for c in range(8)}
    return sysfs(root, "0-7", {c: str(c) for c in range(8)}, {0: "0-7"}, caps)


def two_socket_xeon(root: Path) -> Path:
    sib = {c: f"{c % 16},{c % 16 + 16}" for c in range(32)}
    return sysfs(root, "0-31", sib, {0: "0-7,16-23", 1: "8-15,24-31"})


def test_intel_hybrid_topology(tmp_path):
    t = host.read_topology(intel_hybrid_i7_13700(tmp_path), allowed=set(range(24)))
    assert (t.logical, t.physical) == (24, 16)
    assert t.hybrid and t.hybrid_source == "cpu_core/cpu_atom"
    assert t.p_cores == tuple(range(16)) and t.e_cores == tuple(range(16, 24))
    assert hp.propose_cpusets(t).env()["VRAMKIT_SIDE_CPUSET"] == "16-23"


def test_arm_big_little_from_cpu_capacity(tmp_path):
    t = host.read_topology(arm_big_little(tmp_path), allowed=set(range(8)))
    assert t.hybrid_source == "cpu_capacity"
    assert t.p_cores == (4, 5, 6, 7) and t.e_cores == (0, 1, 2, 3)


def test_two_socket_numa(tmp_path):
    t = host.read_topology(two_socket_xeon(tmp_path), allowed=set(range(32)))
    assert t.numa_nodes == {0: tuple(range(8)) + tuple(range(16, 24)),
                            1: tuple(range(8, 16)) + tuple(range(24, 32))}
    assert t.physical == 16 and not t.hybrid
    assert t.cores(range(32))[0] == (0, 16)


def test_equal_capacities_are_not_hybrid(tmp_path):
    caps = {f"devices/system/cpu/cpu{c}/cpu_capacity": "1024" for c in range(4)}
    t = host.read_topology(sysfs(tmp_path, "0-3", {}, {0: "0-3"}, caps), allowed={0, 1, 2, 3})
    assert not t.hybrid and t.p_cores == ()


def test_this_machine_topology_reads():
    t = host.read_topology()
    assert t.logical >= 1 and t.allowed and set(t.allowed) <= set(range(t.logical + 64))


def test_in_docker_markers(tmp_path):
    assert host.in_docker(tmp_path) == (False, "no /.dockerenv, no container in /proc/self/cgroup")
    write(tmp_path, "proc/self/cgroup", "0::/system.slice/docker-abc123.scope")
    assert host.in_docker(tmp_path) == (True, "/proc/self/cgroup mentions docker")
    (tmp_path / ".dockerenv").write_text("")
    assert host.in_docker(tmp_path)[1] == "/.dockerenv exists"


def test_cgroup_memory_limit(tmp_path):
    assert host.cgroup_memory_limit(tmp_path) is None
    write(tmp_path, "sys/fs/cgroup/memory/memory.limit_in_bytes", str(2**63 - 4096))   # v1 unlimited
    assert host.cgroup_memory_limit(tmp_path) is None
    write(tmp_path, "sys/fs/cgroup/memory/memory.limit_in_bytes", str(16 << 30))
    assert host.cgroup_memory_limit(tmp_path) == 16 << 30
    write(tmp_path, "sys/fs/cgroup/memory.max", "max")                                  # v2 wins
    assert host.cgroup_memory_limit(tmp_path) is None
    write(tmp_path, "sys/fs/cgroup/memory.max", str(8 << 30))
    assert host.cgroup_memory_limit(tmp_path) == 8 << 30


def test_memlock_limit_matches_resource():
    import resource
    soft, hard = host.memlock_limit()
    real = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    assert soft == (None if real[0] == resource.RLIM_INFINITY else real[0])


def test_pin_process_sets_every_thread_and_child_for_real():
    # a real process tree: python parent with a second thread, and a sleeping child
    code = ("import subprocess, threading, time, sys; "
            "threading.Thread(target=time.sleep, args=(30,), daemon=True).start(); "
            "c = subprocess.Popen(['sleep', '30']); print(c.pid, flush=True); time.sleep(30)")
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        child_pid = int(parent.stdout.readline())
        target = (min(os.sched_getaffinity(0)),)
        done = host.pin_process(parent.pid, target)
        assert done["affinity_now"] == list(target)
        assert set(done["processes"]) == {parent.pid, child_pid}
        assert done["threads_set"] >= 3 and done["failed"] == []
        for t in psutil.Process(parent.pid).threads():
            assert os.sched_getaffinity(t.id) == set(target)
        assert os.sched_getaffinity(child_pid) == set(target)
    finally:
        for p in psutil.Process(parent.pid).children(recursive=True):
            p.kill()
        parent.kill()
        parent.wait()


def test_pin_process_gone_pid():
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    time.sleep(0.01)
    with pytest.raises(psutil.NoSuchProcess):
        host.pin_process(p.pid, (0,))


def test_rss_of_sums_the_processes_whose_command_line_names_the_marker():
    marker = "vramkit-rss-probe-7f3a"
    # 64 MiB of written bytes (a zeroed bytearray would stay unmapped, not resident)
    child = subprocess.Popen([sys.executable, "-c", f"import time; b = b'x' * (64 << 20); time.sleep(30)  # {marker}"])
    try:
        deadline = time.time() + 10
        while host.rss_of(marker) < 64 << 20 and time.time() < deadline:
            time.sleep(0.1)
        assert host.rss_of(marker) >= 64 << 20       # the child's buffer is resident
        assert host.rss_of("no-process-has-this-marker-91c2") == 0
    finally:
        child.kill()
        child.wait()
