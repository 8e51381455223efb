"""`vramkit host` through vramkit.cli.main: checks as JSON, .env writing, --pin, warm-up."""
from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import nvml_scenarios as sc
import pytest
from nvml_scenarios import run_cli

from vramkit.adapters import nvml, state
from vramkit.core.host_plan import latency_settled


@pytest.fixture(autouse=True)
def _isolated(monkeypatch, tmp_path):
    monkeypatch.setenv("VRAMKIT_STATE_DIR", str(tmp_path / "state"))
    nvml.reset()
    yield
    nvml.reset()


def host_json(argv, capsys):
    code = run_cli(["host", "--json", "--copy-test-gib", "0", *argv])
    return code, json.loads(capsys.readouterr().out)


def checks_of(data):
    return {c["name"]: c for c in data["checks"]}


def test_every_check_has_status_and_reason(capsys):
    code, data = host_json([], capsys)
    assert code == 0
    for c in data["checks"]:
        assert c["status"] in ("pass", "warn", "fail") and c["reason"]
    assert {"cpu_topology", "gpu_affinity", "cpusets", "memlock", "pinned_ram"} <= set(checks_of(data))
    assert set(data["facts"]["cpusets"]) == {"VRAMKIT_SGLANG_CPUSET", "VRAMKIT_SIDE_CPUSET"}


@pytest.mark.parametrize("flags, isa, release_key", [
    ({"avx2", "fma"}, "avx2", "kt_kernel_avx2_pip"),
    ({"avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx512vbmi", "avx512_bf16"}, "avx512", "kt_kernel_pip"),
    ({"sse4_2"}, None, None)])
def test_host_names_the_kt_kernel_release_this_cpu_gets(flags, isa, release_key, monkeypatch, capsys):
    """`vramkit host` says which kt-kernel build the moe preset's CPU experts run here and which release
    `make setup-kt-native` installs (an AVX2-only CPU: the first release whose avx2 build runs there)."""
    from vramkit import catalog
    from vramkit.adapters import host as hostio
    monkeypatch.setattr(hostio, "cpu_flags", lambda: flags)
    _, data = host_json([], capsys)
    c = checks_of(data)["kt_kernel"]
    if isa is None:
        assert c["status"] == "warn" and "not even AVX2" in c["reason"] and data["facts"]["kt_kernel"] is None
    else:
        release = getattr(catalog.versions(), release_key)
        assert c["status"] == "pass" and f"kt-kernel {release}'s" in c["reason"]
        assert data["facts"]["kt_kernel"]["isa"] == isa and data["facts"]["kt_kernel"]["release"] == release


def test_gpu_nearest_cpus_from_nvml(monkeypatch, capsys):
    sc.two_gpus().install(monkeypatch)
    _, data = host_json(["--gpu", "1"], capsys)
    assert checks_of(data)["gpu_affinity"]["status"] == "pass"
    assert data["facts"]["gpu_cpus"] == "8-11"


def test_no_driver_affinity_is_a_warning(monkeypatch, capsys):
    sc.driver_missing().install(monkeypatch)
    code, data = host_json([], capsys)
    c = checks_of(data)["gpu_affinity"]
    assert code == 0 and c["status"] == "warn" and "Library Not Found" in c["reason"]


def test_write_env_file_keeps_other_lines(capsys, tmp_path):
    env = tmp_path / ".env"
    env.write_text("HF_TOKEN=x\nVRAMKIT_SIDE_CPUSET=99\n")
    code, data = host_json(["--write", "--env-file", str(env), "--cpuset", "0"], capsys)
    assert code == 0 and checks_of(data)["env_file"]["status"] == "pass"
    lines = env.read_text().splitlines()
    assert lines[0] == "HF_TOKEN=x" and "VRAMKIT_SGLANG_CPUSET=0" in lines
    side = data["facts"]["cpusets"]["VRAMKIT_SIDE_CPUSET"]
    assert f"VRAMKIT_SIDE_CPUSET={side}" in lines and "VRAMKIT_SIDE_CPUSET=99" not in lines


def test_pinned_pool_too_big_fails_with_host_memory_code(capsys):
    code, data = host_json(["--pinned-gib", "100000"], capsys)
    assert code == 14 and checks_of(data)["pinned_ram"]["status"] == "fail"


def test_pinned_pool_default_from_running_state(capsys):
    state.write_running("sglang", {"name": "sglang", "hicache_bytes": 2 << 30})
    _, data = host_json([], capsys)
    assert data["facts"]["pinned_bytes"] == 2 << 30
    assert data["facts"]["pinned_source"] == "running preset's hicache_bytes"


def test_pin_a_real_process(capsys):
    p = subprocess.Popen(["sleep", "30"])
    try:
        code, data = host_json(["--pin", str(p.pid), "--cpuset", "0"], capsys)
        c = checks_of(data)["pin"]
        assert code == 0 and c["status"] == "pass" and c["data"]["affinity_now"] == [0]
    finally:
        p.kill()
        p.wait()


def test_pin_missing_pid_is_not_running(capsys):
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    code, data = host_json(["--pin", str(p.pid)], capsys)
    assert code == 18 and checks_of(data)["pin"]["status"] == "fail"


class SlowThenSteadySglang(BaseHTTPRequestHandler):
    """SGLang's /health and non-streaming /generate: the first requests slow (cold), then steady."""

    # steady at 0.1 s: the 10 % settle window (10 ms) stays wider than a busy machine's scheduling jitter
    delays = [0.40, 0.20, 0.10, 0.10, 0.10, 0.10]
    seen: list[dict] = []

    def log_message(self, *a):
        pass

    def _send(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self._send(200 if self.path == "/health" else 404, {})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).seen.append(body)
        n = len(type(self).seen) - 1
        time.sleep(self.delays[min(n, len(self.delays) - 1)])
        self._send(200, {"text": "", "meta_info": {"prompt_tokens": len(body["input_ids"]),
                                                   "completion_tokens": 32, "cached_tokens": 0}})


@pytest.fixture
def sglang_stub():
    SlowThenSteadySglang.seen = []
    srv = ThreadingHTTPServer(("127.0.0.1", 0), SlowThenSteadySglang)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()


def test_warmup_until_latency_settles(capsys, sglang_stub):
    code, data = host_json(["--warmup", "--url", sglang_stub, "--warmup-tokens", "16"], capsys)
    c = checks_of(data)["warmup"]
    assert code == 0 and c["status"] == "pass", c
    lat = c["data"]["latencies_s"]
    # cold first, then it stops at the first request where the last three agree (5 on a quiet machine; a
    # busy one's jitter can take a request or two more, which is the command doing its job)
    assert lat[0] > 0.35 and lat[1] > 0.15
    assert len(lat) >= 5 and latency_settled(lat) and not latency_settled(lat[:-1])
    assert all(0.1 <= x < 0.2 for x in lat[-3:])
    prompts = [tuple(b["input_ids"]) for b in SlowThenSteadySglang.seen]
    assert len(set(prompts)) == len(prompts)            # distinct: no radix-cache hits


def test_warmup_without_server_is_service_down(capsys):
    code, data = host_json(["--warmup", "--url", "http://127.0.0.1:9"], capsys)
    assert code == 19 and checks_of(data)["warmup"]["status"] == "fail"


def test_text_output_lists_checks_and_env_lines(capsys):
    assert run_cli(["host", "--copy-test-gib", "0"]) == 0
    out = capsys.readouterr().out
    assert "cpu_topology" in out and "VRAMKIT_SGLANG_CPUSET=" in out and "VRAMKIT_SIDE_CPUSET=" in out


@pytest.mark.parametrize("argv", [["--pinned-gib", "-3"], ["--pinned-gib", "nan"], ["--copy-test-gib", "-1"]])
def test_a_negative_or_nan_size_is_refused(argv, capsys):
    """Issue 20 item 7: `--pinned-gib -3` passed the pinned-RAM check."""
    assert run_cli(["host", "--json", *argv]) == 64
    assert "is not a size" in capsys.readouterr().err


def _fake_rounds(monkeypatch, seconds) -> dict[int, int]:
    """membw's passes faked at the timing boundary: a thread count's n-th pass takes seconds(n); returns the passes
    made per thread count."""
    import torch

    from vramkit.adapters import membw
    calls: dict[int, int] = {}

    def one_pass(buf, threads, repeats):
        calls[threads] = calls.get(threads, 0) + 1
        return seconds(calls[threads])
    monkeypatch.setattr(membw, "_touched", lambda size: torch.empty(size // 4))
    monkeypatch.setattr(membw, "_best_pass", one_pass)
    return calls


def test_bandwidth_keeps_each_count_s_best_of_host_rounds_and_writes_it(capsys, tmp_path, monkeypatch):
    """`vramkit host --bandwidth --write`: the sweep runs HOST_ROUNDS rounds (an idle GPU-host machine's one-round
    readings fell in two modes a third apart: membw-noise/h200.json), each count's best goes to .env for the planner's
    thread term."""
    from vramkit.adapters import membw
    # seconds per pass: each count's second round its fastest
    calls = _fake_rounds(monkeypatch, lambda n: 1.0 if n == 2 else 2.0 + n)
    env = tmp_path / ".env"
    code, data = host_json(["--bandwidth", "--write", "--env-file", str(env)], capsys)
    check = checks_of(data)["host_read_bw"]
    runs = check["data"]["runs"]
    assert code == 0 and membw.HOST_ROUNDS == 5 and set(calls.values()) == {5}
    assert runs and all(r["rounds"] == 5 and r["seconds"] == 1.0 for r in runs)
    # the slowest round (7 s a pass) read a seventh of the best: the rounds disagree, and the check says so
    assert all(r["slowest_bytes_per_s"] == int(r["bytes"] / 7.0) for r in runs)
    assert check["status"] == "warn" and "the rounds disagreed" in check["reason"]
    written = next(x for x in env.read_text().splitlines() if x.startswith("VRAMKIT_HOST_READ_GBS="))
    assert written.endswith(f"{runs[-1]['threads']}:{runs[-1]['bytes_per_s'] / 1e9:.1f}")


def test_bandwidth_rounds_that_agree_pass_without_a_word_about_noise(capsys, tmp_path, monkeypatch):
    """Rounds within membw.NOISY_SPREAD of each other (a quiet host): the check passes and says nothing of noise."""
    from vramkit.adapters import membw
    _fake_rounds(monkeypatch, lambda n: 1.0 + 0.01 * n)      # 5 % apart at most
    code, data = host_json(["--bandwidth"], capsys)
    check = checks_of(data)["host_read_bw"]
    assert code == 0 and check["status"] == "pass" and "disagreed" not in check["reason"]
    w = membw.widest_spread(check["data"]["runs"])
    assert w is not None and 0 < w["spread"] <= membw.NOISY_SPREAD
