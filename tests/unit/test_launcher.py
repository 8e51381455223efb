"""The launcher without a GPU, Docker or a server: preflight checks per situation, waiting for /health,
and reading SGLang's start-up log.

Hardware and outside programs are faked only at their boundary (the docker CLI's answers, NVML's
"is there a GPU", free RAM, RLIMIT_MEMLOCK, a port, the /health status, the process being alive),
each named after the situation it reproduces. The log is a real one: tests/data/sglang-gptq-start.log
is 38 lines of SGLang 0.5.15.post1 starting Qwen2.5-Coder-14B GPTQ (dummy weights, H100 with 16 GiB
left free, mem_fraction 0.80, decode graphs to bs 8), trimmed from the GPU host's diag run
(gptq_graph_bs8_f080.log: the 13 kB server_args dump is cut after model_path, and 33 of SGLang's
"Ignore import error" lines are left out). The numbers asserted below were read off the log by eye.
"""
from __future__ import annotations

import argparse
import json
import subprocess
from pathlib import Path

import pytest

from vramkit.adapters import docker
from vramkit.commands.plan import add_plan_arguments, request_from_args
from vramkit.core import sglang_log
from vramkit.errors import Exit, VramkitError
from vramkit.launch import checks as launch_checks
from vramkit.launch import steps
from vramkit.launch.resolve import resolve
from vramkit.units import GiB

ROOT = Path(__file__).resolve().parents[2]

REAL_LOG = (Path(__file__).parents[1] / "data" / "sglang-gptq-start.log").read_text()


# ----------------------------------------------------------------------------------------------
# situations at the hardware boundary
# ----------------------------------------------------------------------------------------------
def _resolved(*argv: str, host_ram_gib: float = 64):
    p = argparse.ArgumentParser()
    add_plan_arguments(p)
    args = p.parse_args([*argv, "--host-ram-gib", str(host_ram_gib)])
    return resolve(request_from_args(args))


def docker_fine() -> None:
    """Engine up, NVIDIA runtime registered."""


def _docker_cli(monkeypatch, *, installed=True, info: subprocess.CompletedProcess | Exception | None = None):
    """The real `docker.check_engine`, with the docker CLI's answers scripted."""
    monkeypatch.setattr(docker.shutil, "which", lambda name: "/usr/bin/docker" if installed else None)

    def run(cmd, timeout=60):
        assert cmd[:2] == ["docker", "info"], cmd
        if isinstance(info, Exception):
            raise info
        return info
    monkeypatch.setattr(docker, "_run", run)
    return docker.check_engine


def _info(rc: int, stdout: str = "", stderr: str = "") -> subprocess.CompletedProcess:
    return subprocess.CompletedProcess(["docker", "info"], rc, stdout, stderr)


ENGINE_DOWN = _info(1, stderr="Cannot connect to the Docker daemon at unix:///var/run/docker.sock. "
                              "Is the docker daemon running?")
ENGINE_WITHOUT_NVIDIA = _info(0, stdout=json.dumps({"io.containerd.runc.v2": {"path": "runc"},
                                                    "runc": {"path": "runc"}}))
ENGINE_WITH_NVIDIA = _info(0, stdout=json.dumps({"nvidia": {"path": "nvidia-container-runtime"},
                                                 "runc": {"path": "runc"}}))
NO_CDI_SPEC = not Path("/etc/cdi/nvidia.yaml").exists() and not Path("/var/run/cdi/nvidia.yaml").exists()


def _preflight(resolved, runtime="docker", *, gpu_present=True, docker_check=docker_fine, host_ram=64 * GiB,
               memlock=(None, None), port_free=True):
    spec = steps.LaunchSpec(name="vramkit-test", runtime=runtime)
    return {c.name: c for c in launch_checks.preflight(
        resolved, spec, gpu_present=gpu_present, docker_check=docker_check, host_ram=lambda: host_ram,
        memlock=lambda: memlock, port_free=lambda host, port: port_free)}


def exit_code(checks: dict) -> Exit:
    """What `vramkit up` exits with: `launch.cmd_up` raises the first fatal failed check."""
    failed = [c for c in checks.values() if not c.ok and c.fatal]
    return failed[0].code if failed else Exit.OK


@pytest.fixture(scope="module")
def optimized():
    return _resolved("--preset", "optimized")


def test_a_model_folder_without_a_tokenizer_is_refused_before_start(optimized, tmp_path):
    """Real weights from a folder with no tokenizer files: SGLang would have none of the model's for text (the GPU
    host's 4-layer check servers without one died at their first request). Dummy weights skip the tokenizer instead;
    a --tokenizer-path or --skip-tokenizer-init among the extra args is the user's answer."""
    def checks(**kw):
        spec = steps.LaunchSpec(name="vramkit-test", runtime="docker", model_path=str(tmp_path), **kw)
        return {c.name: c for c in launch_checks.preflight(
            optimized, spec, gpu_present=True, docker_check=docker_fine, host_ram=lambda: 64 * GiB,
            memlock=lambda: (None, None), port_free=lambda host, port: True)}
    got = checks()
    assert not got["tokenizer"].ok and exit_code(got) == Exit.BAD_INPUT
    assert str(tmp_path) in got["tokenizer"].detail and "--tokenizer-path DIR" in got["tokenizer"].detail
    assert "tokenizer" not in checks(load_format="dummy")
    assert "tokenizer" not in checks(extra_args=["--tokenizer-path", "Qwen/Qwen2.5-Coder-14B-Instruct"])
    assert "tokenizer" not in checks(extra_args=["--skip-tokenizer-init"])
    (tmp_path / "tokenizer_config.json").write_text("{}")
    assert "tokenizer" not in checks()
    assert "tokenizer" not in _preflight(optimized)          # a Hugging Face id: SGLang fetches its tokenizer


def test_all_present_optimized_docker(optimized):
    checks = _preflight(optimized)
    assert list(checks) == ["docker", "gpu", "host-ram", "fit", "port"]   # host RAM first: its own exit code
    assert all(c.ok for c in checks.values())
    assert exit_code(checks) == Exit.OK


def test_no_docker_installed(monkeypatch, optimized):
    checks = _preflight(optimized, docker_check=_docker_cli(monkeypatch, installed=False))
    c = checks["docker"]
    assert (c.ok, c.fatal, c.code) == (False, True, Exit.NO_DOCKER)
    assert "docker is not installed" in c.detail and "RUNTIME=native" in c.detail
    assert exit_code(checks) == Exit.NO_DOCKER == 12


def test_docker_engine_not_running(monkeypatch, optimized):
    checks = _preflight(optimized, docker_check=_docker_cli(monkeypatch, info=ENGINE_DOWN))
    c = checks["docker"]
    assert (c.ok, c.fatal, c.code) == (False, True, Exit.NO_DOCKER)
    assert "not reachable" in c.detail and "Is the docker daemon running?" in c.detail
    assert exit_code(checks) == Exit.NO_DOCKER


def test_docker_engine_hangs(monkeypatch, optimized):
    checks = _preflight(optimized, docker_check=_docker_cli(
        monkeypatch, info=subprocess.TimeoutExpired(["docker", "info"], 20)))
    assert (checks["docker"].ok, checks["docker"].code) == (False, Exit.NO_DOCKER)
    assert "does not answer" in checks["docker"].detail


@pytest.mark.skipif(not NO_CDI_SPEC, reason="this machine has an NVIDIA CDI spec, which counts as a GPU runtime")
def test_docker_without_nvidia_runtime(monkeypatch, optimized):
    checks = _preflight(optimized, docker_check=_docker_cli(monkeypatch, info=ENGINE_WITHOUT_NVIDIA))
    c = checks["docker"]
    assert (c.ok, c.fatal, c.code) == (False, True, Exit.NO_DOCKER)
    assert "no NVIDIA runtime" in c.detail and "nvidia-ctk runtime configure" in c.detail


def test_docker_with_nvidia_runtime_passes_the_real_check(monkeypatch, optimized):
    checks = _preflight(optimized, docker_check=_docker_cli(monkeypatch, info=ENGINE_WITH_NVIDIA))
    assert checks["docker"].ok


def test_native_runtime_does_not_ask_docker(optimized):
    def docker_must_not_be_asked():
        raise AssertionError("native runtime asked Docker")
    checks = _preflight(optimized, runtime="native", docker_check=docker_must_not_be_asked)
    assert "docker" not in checks and all(c.ok for c in checks.values())


def test_no_gpu(optimized):
    checks = _preflight(optimized, runtime="native", gpu_present=False)
    c = checks["gpu"]
    assert (c.ok, c.fatal, c.code) == (False, True, Exit.NO_GPU)
    assert "vramkit plan" in c.detail
    assert exit_code(checks) == Exit.NO_GPU == 11


def test_no_docker_is_reported_before_no_gpu(monkeypatch, optimized):
    """A laptop with neither: the first thing to fix is named first (exit 12), the GPU check still shows."""
    checks = _preflight(optimized, gpu_present=False, docker_check=_docker_cli(monkeypatch, installed=False))
    assert not checks["gpu"].ok
    assert exit_code(checks) == Exit.NO_DOCKER


def test_plan_does_not_fit():
    too_long = _resolved("--preset", "optimized", "--context", "131072")
    checks = _preflight(too_long)
    c = checks["fit"]
    assert (c.ok, c.fatal, c.code) == (False, True, Exit.NO_FIT)
    assert "131,072-token request" in c.detail and c.detail.endswith("`vramkit plan` lists what would fit")
    assert exit_code(checks) == Exit.NO_FIT == 10


def test_host_ram_too_small_for_hicache():
    """8 GB of host cache + the 10 GiB SGLang keeps free does not fit in 12 GiB of available RAM (the preset's auto
    then keeps the token embeddings on the GPU: no room for their pinned copy either); with them moved (on) the
    check counts their 2 GiB too."""
    small = _resolved("--preset", "optimized", host_ram_gib=12)
    assert not small.plan.host_embed_bytes
    checks = _preflight(small, host_ram=12 * GiB)
    c = checks["host-ram"]
    assert (c.ok, c.fatal, c.code) == (False, True, Exit.HOST_MEMORY)
    assert "7.45 GiB pinned needed + 10 GiB SGLang keeps free, 12.00 GiB available" == c.detail
    enough = _preflight(small, host_ram=(8e9 / GiB + 10.01) * GiB)["host-ram"]
    assert enough.ok
    moved = _resolved("--preset", "optimized", "--kt-embed-host", "on", host_ram_gib=12)
    c = _preflight(moved, host_ram=12 * GiB)["host-ram"]
    assert not c.ok and "9.45 GiB pinned needed + 10 GiB SGLang keeps free, 12.00 GiB available" == c.detail


def test_host_ram_too_small_exits_host_memory():
    small = _resolved("--preset", "optimized", host_ram_gib=12)
    assert exit_code(_preflight(small, host_ram=12 * GiB)) == Exit.HOST_MEMORY


def test_no_host_ram_check_without_a_host_pool():
    baseline = _resolved("--preset", "baseline")
    assert "host-ram" not in _preflight(baseline, runtime="native", host_ram=1 * GiB, memlock=(64 * 1024, None))


def test_memlock_low_is_a_warning_not_fatal(optimized):
    checks = _preflight(optimized, runtime="native", memlock=(8 * 1024 * 1024, 8 * 1024 * 1024))
    c = checks["memlock"]
    assert (c.ok, c.fatal, c.code) == (False, False, Exit.HOST_MEMORY)
    assert "ulimit -l unlimited" in c.detail
    assert exit_code(checks) == Exit.OK


@pytest.mark.parametrize("limit", [None, 16 * GiB])
def test_memlock_unlimited_or_large_says_nothing(optimized, limit):
    assert "memlock" not in _preflight(optimized, runtime="native", memlock=(limit, limit))


def test_port_busy(optimized):
    checks = _preflight(optimized, port_free=False)
    c = checks["port"]
    assert (c.ok, c.fatal, c.code) == (False, True, Exit.PORT_BUSY)
    assert c.detail == ("127.0.0.1:30000 is in use -> stop what holds it or set --port N (make PORT=N, env "
                        "VRAMKIT_PORT)")
    assert exit_code(checks) == Exit.PORT_BUSY == 13


# ----------------------------------------------------------------------------------------------
# wait_healthy: a scripted start-up
# ----------------------------------------------------------------------------------------------
class ScriptedStart:
    """A server start replayed from a log: each poll shows the log up to the next step.

    `steps` are (log text so far, /health status, process alive) in poll order; the clock advances
    by `poll_s` per sleep.
    """

    def __init__(self, steps, poll_s: float = 2.0):
        self.steps, self.i, self.now, self.poll_s, self.phases = steps, 0, 0.0, poll_s, []

    def health(self):
        return self.steps[min(self.i, len(self.steps) - 1)][1]

    def read_log(self):
        return self.steps[min(self.i, len(self.steps) - 1)][0]

    def is_alive(self):
        return self.steps[min(self.i, len(self.steps) - 1)][2]

    def sleep(self, s):
        self.now += s
        self.i += 1

    def clock(self):
        return self.now

    def wait(self, spec):
        return steps.wait_healthy(self, spec, is_alive=self.is_alive, read_log=self.read_log,
                                     on_phase=self.phases.append, sleep=self.sleep, clock=self.clock)


def _log_upto(marker: str | None) -> str:
    """The real log cut just after the first line containing `marker` (None: nothing yet)."""
    if marker is None:
        return ""
    lines = REAL_LOG.splitlines(keepends=True)
    n = next(i for i, ln in enumerate(lines) if marker in ln)
    return "".join(lines[: n + 1])


@pytest.fixture
def spec(tmp_path, monkeypatch):
    monkeypatch.setenv("VRAMKIT_STATE_DIR", str(tmp_path / "state"))
    return steps.LaunchSpec(name="vramkit-test", runtime="native", timeout_s=600)


def test_phases_reported_in_order_from_a_real_log(spec):
    markers = [None] + [m for m, _label in sglang_log.PHASES]
    steps = [(_log_upto(m), None if m in (None, "server_args=", "Init torch distributed") else 503, True)
             for m in markers]
    steps.append((REAL_LOG, 200, True))
    start = ScriptedStart(steps)
    took = start.wait(spec)
    assert start.phases == ["starting the server process"] + [label for _m, label in sglang_log.PHASES]
    assert took == pytest.approx(2.0 * len(markers))


def test_phase_repeated_polls_are_reported_once(spec):
    upto_graphs = _log_upto("Capture target decode CUDA graph begin")
    start = ScriptedStart([(upto_graphs, 503, True)] * 5 + [(REAL_LOG, 200, True)])
    assert start.wait(spec) == 10.0
    assert start.phases == [sglang_log.phase(upto_graphs)]      # 5 polls, one report; 200 returns at once
    assert start.phases[0].startswith("capturing decode CUDA graphs")


CRASH_IN_KV_ALLOC = _log_upto("Load weight end") + """\
[2026-11-22 13:09:18] Scheduler hit an exception: Traceback (most recent call last):
  File "/tmp/site/sglang/srt/managers/scheduler.py", line 3012, in run_scheduler_process
    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, moe_ep_rank, pp_rank, dp_rank)
  File "/tmp/site/sglang/srt/model_executor/model_runner.py", line 1871, in init_memory_pool
    raise RuntimeError(
RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.
"""


def test_server_exits_during_start_carries_the_sglang_error_line(spec, tmp_path):
    start = ScriptedStart([(_log_upto("Load weight begin"), None, True), (CRASH_IN_KV_ALLOC, None, False)])
    with pytest.raises(VramkitError) as err:
        start.wait(spec)
    e = err.value
    assert e.code == Exit.START_FAILED == 15
    assert e.what == ("SGLang exited during start-up (allocating the KV cache): "
                      "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.")
    assert e.todo == f"see {tmp_path / 'state' / 'vramkit-test.log'}"
    assert "\n" not in e.line()


def test_docker_start_failure_points_at_docker_logs(spec):
    spec.runtime = "docker"
    start = ScriptedStart([(CRASH_IN_KV_ALLOC, None, False)])
    with pytest.raises(VramkitError) as err:
        start.wait(spec)
    assert err.value.todo == "see docker logs vramkit-test"


def test_timeout_names_the_last_phase(spec):
    spec.timeout_s = 30
    stuck = _log_upto("Capture target decode CUDA graph begin")
    start = ScriptedStart([(stuck, 503, True)] * 100)
    with pytest.raises(VramkitError) as err:
        start.wait(spec)
    e = err.value
    assert e.code == Exit.HEALTH_TIMEOUT == 16
    assert e.what.startswith("SGLang did not become healthy within 30 s (last phase: capturing decode CUDA graphs")
    assert "TIMEOUT=" in e.todo
    assert 30 < start.now <= 34          # gave up on the first poll past the limit, not later


def test_healthy_at_once(spec):
    start = ScriptedStart([(REAL_LOG, 200, True)])
    assert start.wait(spec) == 0.0
    assert start.phases == []


# ----------------------------------------------------------------------------------------------
# the log parser on the real log
# ----------------------------------------------------------------------------------------------
def test_parse_real_gptq_start():
    f = sglang_log.parse(REAL_LOG)
    assert f.values == {
        "dist_init_mem": 0.09, "load_begin_avail": 15.33, "load_end_avail": 5.92, "weights": 9.41, "kv_tokens": 15493,
        "pool_end_avail": 2.66, "graph_begin_avail": 2.57, "graph_mem": 0.06, "graph_end_avail": 2.51,
        "graph_s": 377.76, "max_total_num_tokens": 15493, "context_len": 32768, "max_running_requests": 2048,
        "available_after_start": 2.51,
    }
    assert f.bytes("weights") == round(9.41 * GiB)      # SGLang's "GB" is GiB
    assert f.bytes("not_in_log") is None


def test_parse_nothing_yet():
    assert sglang_log.parse("").values == {}
    assert sglang_log.phase("") == "starting the server process"


def test_real_log_phase_is_ready():
    assert sglang_log.phase(REAL_LOG) == "ready"


def test_last_error_of_a_crash_is_the_exception_line():
    assert sglang_log.last_error(CRASH_IN_KV_ALLOC) == \
        "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."


def test_last_error_of_a_silent_death_is_not_import_noise():
    killed_in_graph_capture = _log_upto("Capture target decode CUDA graph begin")
    assert "Ignore import error" not in sglang_log.last_error(killed_in_graph_capture)


def test_env_cpuset_from_environment_and_bad_value(monkeypatch):
    monkeypatch.setenv("VRAMKIT_SGLANG_CPUSET", "0-2,5")
    assert steps.env_cpuset() == (0, 1, 2, 5)
    monkeypatch.setenv("VRAMKIT_SGLANG_CPUSET", "3-1")
    with pytest.raises(VramkitError) as e:
        steps.env_cpuset()
    assert e.value.code == Exit.BAD_INPUT and "runs backwards" in e.value.what


def test_read_env_value_last_wins_and_export():
    from vramkit.core.host_plan import read_env_value
    text = "# cores\nVRAMKIT_SGLANG_CPUSET=0-3\nexport VRAMKIT_SGLANG_CPUSET = 4-7\nOTHER=1\n"
    assert read_env_value(text, "VRAMKIT_SGLANG_CPUSET") == "4-7"
    assert read_env_value(text, "MISSING") is None


def test_host_ram_is_one_rule_with_its_own_check():
    """The planner types its reasons; a host-RAM shortfall is the host-ram check's (exit 14), not also 'fit'."""
    small = _resolved("--preset", "optimized", host_ram_gib=12)
    assert [r.kind for r in small.plan.reasons] == ["host_ram"]
    checks = _preflight(small, host_ram=12 * GiB)
    assert checks["fit"].ok and not checks["host-ram"].ok
    # RAM freed since the plan was made: the fresh reading decides, through the same rule
    assert all(c.ok for c in _preflight(small, host_ram=64 * GiB).values())


def test_plan_json_carries_typed_reasons(capsys):
    from vramkit.cli import main
    assert main(["plan", "--preset", "optimized", "--context", "131072", "--host-ram-gib", "64", "--json"]) == Exit.NO_FIT
    d = json.loads(capsys.readouterr().out)
    assert d["fits"] is False and any("131,072-token request" in r for r in d["reasons"])
    assert d["knobs"]["hicache_gb"] == 8 and "sglang_args" in d


def test_a_native_start_decoding_on_the_int4_kernel_warns_without_a_c_compiler():
    """The plan decodes the CPU layers on the int4 kernel (the moe preset's auto on a GPTQ-Int4 checkpoint): a native
    start asks for the C compiler the server builds it with, and warns (not fatal: the layers then decode on kt-kernel)
    where there is none; a plan on kt-kernel's decode, or a container start, does not ask."""
    flags = ("--preset", "moe", "--model", "qwen3-30b-a3b-gptq-int4", "--gpu", "rtx-5060-ti-16gb", "--cpu-isa", "amx",
             "--host-cores", "16")
    asked: list[str] = []

    def checks(resolved, runtime, cc):
        spec = steps.LaunchSpec(name="vramkit-test", runtime=runtime)
        return {c.name: c for c in launch_checks.preflight(
            resolved, spec, gpu_present=True, docker_check=docker_fine, host_ram=lambda: 256 * GiB,
            memlock=lambda: (None, None), port_free=lambda host, port: True,
            c_compiler=lambda: asked.append(runtime) or cc)}
    int4, kt_only = _resolved(*flags), _resolved(*flags, "--kt-cpu-decode", "kt")
    assert int4.hybrid.plan.cpu_decode == "int4" and kt_only.hybrid.plan.cpu_decode == "kt"
    missing = checks(int4, "native", None)["int4-cc"]
    assert not missing.ok and not missing.fatal and "install gcc, or --kt-cpu-decode kt" in missing.reason
    assert checks(int4, "native", "/usr/bin/cc")["int4-cc"].ok
    assert "int4-cc" not in checks(kt_only, "native", None) and "int4-cc" not in checks(int4, "docker", None)
    assert asked == ["native", "native"]


def test_vramkit_up_warns_where_the_planned_int4_decode_did_not_run():
    """After a start, `vramkit up` reads the log: the committed int4 run passes silently; a log where the kernel gave
    up on a layer, or where the adapter said nothing, gets one warning with the way to plan what runs."""
    from vramkit import catalog
    from vramkit.core.plan.planner import Knobs, Target, plan
    from vramkit.launch import hybrid
    p = plan(catalog.model("qwen3-30b-a3b-gptq-int4"),
             Target(gpu=catalog.gpu("rtx-5060-ti-16gb"), host_ram_available_bytes=64 * GiB, host=hybrid.REFERENCE_HOST),
             Knobs(**catalog.preset("moe").knobs), catalog.engine(), with_alternatives=False)
    assert p.hybrid is not None and p.hybrid.cpu_decode == "int4"
    ran = (ROOT / "benchmarks/results/gpu/moe-vs-llamacpp-int4/r3/k16-preset-int4.evidence.txt").read_text()
    assert steps.int4_warning(p, ran) is None
    gave_up = ran + ("\nvramkit_int4_experts: layer 3: no C compiler (cc) to build int4_experts.c: install gcc, or set "
                     "CC; the CPU layers' decode stays on kt-kernel from here on")
    said = steps.int4_warning(p, gave_up)
    assert said is not None and said.startswith("the CPU layers' decode is not all on the int4 kernel: layer 3: no C "
                                                "compiler") and said.endswith("-> `--kt-cpu-decode kt` plans the "
                                                                              "server as it runs")
    twin = (ROOT / "benchmarks/results/gpu/moe-vs-llamacpp-int4/r3/k16-preset.evidence.txt").read_text()
    assert "not on SGLang's path" in (steps.int4_warning(p, twin) or "")
