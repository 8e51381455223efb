"""Pure host tuning logic: CPU lists, cpuset proposals per CPU kind, memory checks, warm-up, .env."""
from __future__ import annotations

import pytest

from vramkit.core import host_plan as hp

GiB = 1 << 30


def topo(cpus, siblings=None, p=(), e=(), numa=None, source=""):
    return hp.CpuTopology(logical=len(cpus), physical=None, allowed=tuple(cpus), p_cores=tuple(p),
                          e_cores=tuple(e), hybrid_source=source, numa_nodes=numa or {0: tuple(cpus)},
                          siblings=siblings or {})


def ht_siblings(n_cores, offset):
    """cpu i and i+offset share a core (Linux numbering on most x86 servers)."""
    sib = {}
    for i in range(n_cores):
        sib[i] = sib[i + offset] = (i, i + offset)
    return sib


@pytest.mark.parametrize("text, cpus", [("0-3,8,10-11", (0, 1, 2, 3, 8, 10, 11)), ("5", (5,)), ("", ()),
                                        ("0-1, 4", (0, 1, 4))])
def test_cpulist_round_trip(text, cpus):
    assert hp.parse_cpulist(text) == cpus
    assert hp.parse_cpulist(hp.format_cpulist(cpus)) == cpus


@pytest.mark.parametrize("bad", ["a-b", "3-1", "1;2"])
def test_cpulist_rejects(bad):
    with pytest.raises(ValueError):
        hp.parse_cpulist(bad)


def test_intel_hybrid_server_on_p_cores_side_on_e_cores():
    t = topo(range(24), p=range(16), e=range(16, 24), source="cpu_core/cpu_atom")
    plan = hp.propose_cpusets(t)
    assert plan.env() == {"VRAMKIT_SGLANG_CPUSET": "0-15", "VRAMKIT_SIDE_CPUSET": "16-23"}
    assert plan.status == hp.PASS


def test_two_sockets_server_near_the_gpu_side_on_the_other_node():
    node0 = tuple(range(0, 8)) + tuple(range(16, 24))
    node1 = tuple(range(8, 16)) + tuple(range(24, 32))
    t = topo(range(32), siblings=ht_siblings(16, 16), numa={0: node0, 1: node1})
    plan = hp.propose_cpusets(t, gpu_cpus=node0)
    assert plan.server == tuple(sorted(node0))
    assert set(plan.side) <= set(node1) and len(plan.side) == 4   # 2 of 16 cores, both threads
    assert set(plan.side) == {14, 15, 30, 31}
    assert any("nearest" in n for n in plan.notes)


def test_one_node_side_gets_last_core_with_its_sibling():
    t = topo(range(16), siblings=ht_siblings(8, 8))
    plan = hp.propose_cpusets(t)
    assert plan.side == (7, 15)
    assert set(plan.server) == set(range(16)) - {7, 15}


def test_too_few_cpus_no_split():
    plan = hp.propose_cpusets(topo(range(2)))
    assert plan.server == plan.side == (0, 1) and plan.status == hp.WARN


def test_gpu_cpus_outside_allowed_are_ignored():
    plan = hp.propose_cpusets(topo(range(8)), gpu_cpus=(32, 33))
    assert set(plan.server) | set(plan.side) == set(range(8))
    assert any("none of the GPU" in n for n in plan.notes)


def test_memlock_check():
    assert hp.memlock_check(None, 24 * GiB, False).status == hp.PASS
    assert hp.memlock_check(64 << 10, None, True).status == hp.PASS
    c = hp.memlock_check(64 << 10, 24 * GiB, True)
    assert c.status == hp.WARN and "64 KiB" in c.reason and "memlock: -1" in c.reason
    assert "ulimit -l" in hp.memlock_check(8 << 20, 24 * GiB, False).reason


def test_pinned_ram_check():
    assert hp.pinned_ram_check(24 * GiB, 64 * GiB, 50 * GiB, None).status == hp.PASS
    assert hp.pinned_ram_check(24 * GiB, 64 * GiB, 20 * GiB, None).status == hp.WARN
    c = hp.pinned_ram_check(24 * GiB, 64 * GiB, 60 * GiB, 16 * GiB)
    assert c.status == hp.FAIL and "container memory limit" in c.reason
    assert hp.pinned_ram_check(30 * GiB, 32 * GiB, 31 * GiB, None).status == hp.FAIL   # no headroom
    assert hp.pinned_ram_check(None, 32 * GiB, 31 * GiB, None).status == hp.PASS


@pytest.mark.parametrize("lat, settled", [
    ([2.0, 0.5, 0.5, 0.5], True),
    ([0.5, 0.5, 0.5], False),              # the first never counts: needs window + 1
    ([2.0, 0.9, 0.5, 0.5], False),
    ([2.0, 0.9, 0.52, 0.5, 0.48], True),
    ([2.0, 0.5, 0.5, 0.6], False),
])
def test_latency_settled(lat, settled):
    assert hp.latency_settled(lat) is settled


def test_update_env_text_keeps_other_lines():
    old = "# mine\nHF_TOKEN=abc\nexport VRAMKIT_SGLANG_CPUSET=0-3\n"
    new = hp.update_env_text(old, {"VRAMKIT_SGLANG_CPUSET": "0-7", "VRAMKIT_SIDE_CPUSET": "8-9"})
    assert new == "# mine\nHF_TOKEN=abc\nVRAMKIT_SGLANG_CPUSET=0-7\nVRAMKIT_SIDE_CPUSET=8-9\n"
    assert hp.update_env_text(new, {"VRAMKIT_SIDE_CPUSET": "8-9"}) == new
