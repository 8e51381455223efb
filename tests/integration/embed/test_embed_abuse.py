"""Issue 20: hostile input and faults, round two, against the real app under the service's own uvicorn
settings, the real model and a real valkey-server. Each test reproduces a finding and failed on the code
the issue was filed against. Bounds are set short here (the defaults are in EmbedConfig)."""
from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import subprocess
import sys
import time

import httpx
import psutil
import pytest
import redis

from vramkit.embed.queue import MicroBatcher
from vramkit.embed.requests import BadRequest

from .conftest import wait_for


def _spawned_workers() -> set[int]:
    """The encoder's worker processes: spawn children of this test process."""
    out = set()
    for child in psutil.Process().children(recursive=True):
        try:
            if any("spawn" in part for part in child.cmdline()):
                out.add(child.pid)
        except psutil.Error:
            pass
    return out


# --- item 1: the worker that never healed ------------------------------------------------------------

def test_worker_killed_then_its_replacement_killed_while_loading_heals(serve, encoder):
    """The OOM killer's double kill: the worker, then its replacement during the model load. On the code
    of the issue every uncached request then answered 500 for good and /health said down forever."""
    srv = serve()
    statuses: list[int] = []
    encoder.wait_s, saved_wait = 0.5, encoder.wait_s     # requests in the gap answer 503 quickly
    try:
        with httpx.Client(base_url=srv.url, timeout=60) as http:
            assert http.post("/embed", json={"text": "before the kills"}).status_code == 200
            restarts = encoder.worker_restarts
            first = encoder.worker_pid
            os.kill(first, signal.SIGKILL)
            assert wait_for(lambda: http.get("/health").status_code == 503, timeout_s=5)   # noticed
            replacement = None

            def replacement_started() -> bool:
                nonlocal replacement
                new = _spawned_workers() - {first}
                replacement = min(new) if new else None
                return replacement is not None
            assert wait_for(replacement_started, timeout_s=20, step_s=0.01)
            os.kill(replacement, signal.SIGKILL)                # during its load
            for i in range(5):                                  # in the gap: 503, never 500
                statuses.append(http.post("/embed", json={"text": f"in the gap {i}"}).status_code)
            assert wait_for(lambda: http.get("/health").status_code == 200, timeout_s=90, step_s=0.2), \
                encoder.last_error
            r = http.post("/embed", json={"text": "after the heal"})
            assert r.status_code == 200 and r.json()["cached"] == [False]
            stats = http.get("/stats").json()["encoder"]
    finally:
        encoder.wait_s = saved_wait
    assert set(statuses) <= {200, 503}, statuses
    assert stats["serving"] and stats["worker_restarts"] >= restarts + 1 and stats["failed_restarts"] >= 1


def test_an_encoder_that_cannot_be_replaced_gives_up_after_its_bound(tmp_path):
    """Past `max_down_s` without a worker the service gives up (serve exits 27, Exit.ENCODER_DOWN, so systemd restarts it)."""
    from vramkit.embed.encoder import Encoder

    said: list[str] = []
    enc = Encoder("all-MiniLM-L6-v2", max_down_s=0.3, on_give_up=said.append)
    enc.dim = 384                                      # as if it had been serving
    enc.folder = tmp_path / "removed-model"            # the model folder is gone: every restart fails
    enc._broken(None, "killed")
    assert not enc.serving
    assert wait_for(lambda: bool(said), timeout_s=5)
    assert enc.gave_up and "could not be replaced" in said[0] and enc.failed_restarts >= 1
    enc.shutdown()
    exit_code = subprocess.run([sys.executable, "-c", "from vramkit.embed.server import _give_up; _give_up('x')"],
                             capture_output=True, text=True, timeout=60)
    assert exit_code.returncode == 27, exit_code.stderr


# --- item 5: abandoned work --------------------------------------------------------------------------

def test_queue_bounds_per_client_and_in_all_and_a_cancelled_caller_leaves(encoder):
    async def scenario() -> tuple[MicroBatcher, list[BadRequest]]:
        b = MicroBatcher(encoder, 32, max_queued_texts=100, max_queued_per_client=60)
        first = asyncio.create_task(b.encode([f"a{i}" for i in range(60)], True, 256, client="a"))
        await asyncio.sleep(0)                         # queued, not yet handed to the model
        refusals = []
        for texts, client in ((["one more"], "a"), ([f"b{i}" for i in range(50)], "b")):
            with pytest.raises(BadRequest) as err:
                await b.encode(texts, True, 256, client=client)
            refusals.append(err.value)
        first.cancel()                                 # the caller went away
        with pytest.raises(asyncio.CancelledError):
            await first
        return b, refusals

    b, refusals = asyncio.run(scenario())
    assert [r.status for r in refusals] == [429, 429] and all(r.retry_after_s for r in refusals)
    assert "from your address" in refusals[0].message and "in all" in refusals[1].message
    assert b.queued() == 0 and b.cancelled_texts == b.admitted_texts == 60 and b.batches == b.encoded_texts == 0


def test_a_client_that_disconnects_cancels_its_queued_texts(serve):
    """Ten abandoned maximal requests kept the encoder busy for minutes on the code of the issue."""
    srv = serve()
    texts = [f"abandoned text {i} " + "word " * 60 for i in range(1024)]
    body = httpx.Request("POST", srv.url + "/embed", json={"texts": texts})
    raw = (f"POST /embed HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
           f"Content-Length: {len(body.read())}\r\n\r\n").encode() + body.read()
    socks = []
    for _ in range(3):
        s = socket.create_connection(("127.0.0.1", srv.port))
        s.sendall(raw)
        socks.append(s)
    batcher = srv.state.live_service.batcher
    # all three in the queue before they go: a request whose disconnect is noticed before it is queued never
    # enters it (on a loaded CI run two of three did not, and a count that assumed all 3,072 texts came up short)
    assert wait_for(lambda: batcher.admitted_texts == 3 * 1024, timeout_s=30), batcher.admitted_texts
    for s in socks:
        s.close()
    # the queue empties as each disconnect is noticed (the counters below prove it was by cancelling, not by
    # encoding); 5 s was too tight once on a loaded 2-core run (a fresh clone's second `make test`)
    assert wait_for(lambda: batcher.queued() == 0, timeout_s=20)
    calls = batcher.batches
    time.sleep(1.0)
    assert batcher.batches - calls <= 1, "the encoder kept working for callers that went away"
    with httpx.Client(base_url=srv.url, timeout=60) as http:
        t0 = time.perf_counter()
        assert http.post("/embed", json={"text": "one text after the abandoned ones"}).status_code == 200
        assert time.perf_counter() - t0 < 10.0     # one encode call ahead at most (loose: shared cores)
        stats = http.get("/stats").json()
    # every admitted text was either encoded or dropped unencoded, none twice and none lost; how many were encoded
    # before the disconnects were noticed depends on the machine's load, so the bar is a handful of calls' worth
    enc = stats["encoder"]
    assert enc["admitted_texts"] == 3 * 1024 + 1 and stats["disconnects"] >= 3, enc
    assert enc["cancelled_texts"] + enc["encoded_texts"] == enc["admitted_texts"], enc
    assert enc["encoded_texts"] <= 32 * enc["encode_calls"] and enc["cancelled_texts"] >= 8 * 32, enc


# --- item 2: idle connections, slow bodies, logs -----------------------------------------------------

def _closed_by_server(s: socket.socket, within_s: float) -> bool:
    s.settimeout(within_s)
    try:
        return s.recv(1) == b""
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


def test_a_connection_that_sends_no_request_is_closed(serve):
    srv = serve(header_timeout_s=0.3)
    with socket.create_connection(("127.0.0.1", srv.port)) as idle, \
            socket.create_connection(("127.0.0.1", srv.port)) as slow:
        slow.sendall(b"GET /health HTTP/1.1\r\nHost: 127")     # headers that never end (slowloris)
        assert _closed_by_server(idle, 3.0) and _closed_by_server(slow, 3.0)


def test_idle_connections_past_the_cap_are_closed_and_a_keyed_client_is_served(serve):
    srv = serve(max_connections=40, api_key="k3y")
    idle = [socket.create_connection(("127.0.0.1", srv.port)) for _ in range(200)]
    try:
        with httpx.Client(base_url=srv.url, timeout=10, headers={"X-API-Key": "k3y"}) as http:
            http.post("/embed", json={"text": "keyed"})
            lat = []
            for _ in range(20):
                t0 = time.perf_counter()
                assert http.post("/embed", json={"text": "keyed"}).status_code == 200
                lat.append(time.perf_counter() - t0)
        still_open = sum(not _closed_by_server(s, 0.01) for s in idle)
    finally:
        for s in idle:
            s.close()
    assert still_open <= 40, f"{still_open} idle connections held past the cap of 40"
    assert max(lat) < 5.0       # served at all; its latency under 5,000 connections is the bench's


def _partial_post(port: int, path: str = "/embed") -> socket.socket:
    """Headers complete, a body promised and never finished: a request in flight."""
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
              f"Content-Length: 5000\r\n\r\n{{\"texts\": [".encode())
    return s


def test_requests_in_flight_per_client_are_bounded(serve):
    srv = serve(max_requests_per_client=3)
    held = [_partial_post(srv.port) for _ in range(3)]
    try:
        time.sleep(0.2)
        r = httpx.post(srv.url + "/embed", json={"text": "a fourth"}, timeout=10)
        assert r.status_code == 429 and r.headers["retry-after"]
    finally:
        for s in held:
            s.close()
    assert wait_for(lambda: httpx.post(srv.url + "/embed", json={"text": "later"}, timeout=10).status_code == 200)


def test_a_slow_body_times_out_408_and_disconnects_log_one_line_not_tracebacks(serve, caplog):
    srv = serve(body_timeout_s=0.4)
    s = _partial_post(srv.port)
    s.settimeout(5)
    assert s.recv(200).startswith(b"HTTP/1.1 408")
    s.close()
    caplog.set_level(logging.INFO)
    for _ in range(5):                                 # the body never finishes: the client leaves
        gone = _partial_post(srv.port)
        time.sleep(0.05)
        gone.close()
    assert wait_for(lambda: srv.state.disconnects >= 5, timeout_s=5)
    text = caplog.text
    assert "Traceback" not in text and "Exception in ASGI application" not in text
    assert text.count("went away") == 1, text          # rate-limited: one line for the five


# --- item 7: the small ones --------------------------------------------------------------------------

def test_model_as_a_list_is_422_on_both_routes(client):
    assert client.post("/embed", json={"texts": ["a"], "model": ["x"]}).status_code == 422
    assert client.post("/v1/embeddings", json={"input": "a", "model": ["x"]}).status_code == 422


def test_the_embedded_redis_has_a_memory_cap(serve):
    srv = serve(redis_maxmemory_bytes=64 << 20)
    r = redis.Redis.from_url(srv.state.embedded.url)
    assert int(r.config_get("maxmemory")["maxmemory"]) == 64 << 20
    assert r.config_get("maxmemory-policy")["maxmemory-policy"] == "allkeys-lru"
    r.close()
    from vramkit.embed.config import EmbedConfig

    assert EmbedConfig().redis_maxmemory_bytes > 0           # capped by default


def test_listening_beyond_loopback_without_a_key_is_said():
    from vramkit.embed.config import EmbedConfig

    assert "without an API key" in (EmbedConfig(host="0.0.0.0").exposure_warning() or "")
    assert EmbedConfig(host="0.0.0.0", api_key="k").exposure_warning() is None
    assert EmbedConfig().exposure_warning() is None


# --- item 3: a file name that is not UTF-8 -----------------------------------------------------------

def test_precache_with_latin1_file_names_answers_and_the_cli_exits_0(serve, repos, capsys):
    repo = repos / "latin1"
    repo.mkdir()
    (repo / "ok.py").write_text("def ok():\n    return 1\n")
    raw = os.fsencode(repo)
    for name, data in ((b"caf\xe9.py", b"def cafe():\n    return 2\n"),          # text, name in Latin-1
                       (b"na\xefve.txt", b"na\xefve caf\xe9\n")):                  # neither is UTF-8
        with open(raw + b"/" + name, "wb") as fh:
            fh.write(data)
    srv = serve()
    r = httpx.post(srv.url + "/precache/repo", json={"path": str(repo)}, timeout=60)
    assert r.status_code == 200, r.text
    job = r.json()
    assert job["state"] == "done" and job["files_embedded"] == 2
    assert job["skipped"] == {"undecodable": 1} and job["skipped_examples"]["undecodable"][0].endswith(
        "na\\xefve.txt")
    from vramkit.cli import main

    assert main(["embed", "precache", str(repo), "--url", srv.url]) == 0
    assert "done:" in capsys.readouterr().out


def test_the_cli_advice_matches_the_cause():
    from vramkit.commands.embed import _refused
    from vramkit.errors import VramkitError

    def said(code: int) -> VramkitError:
        with pytest.raises(VramkitError) as err:
            _refused(httpx.Response(code, json={"error": {"message": "m"}}), "http://x")
        return err.value

    assert said(500).code == 19 and "not your request" in said(500).todo
    assert said(401).code == 64 and "key" in said(401).todo
    assert said(422).code == 64 and "fix the request" in said(422).todo


def test_precache_jobs_are_listed_and_cancelled(serve, repos):
    repo = repos / "many"
    repo.mkdir()
    for i in range(300):
        (repo / f"f{i}.py").write_text(f"def f{i}():\n    return {i}  # " + "x " * 300 + "\n")
    srv = serve()
    with httpx.Client(base_url=srv.url, timeout=60) as http:
        job = http.post("/precache/repo", json={"path": str(repo), "wait": False}).json()
        listed = http.get("/precache/jobs").json()
        assert listed["running"] == 1 and listed["jobs"][0]["id"] == job["id"]
        gone = http.delete(f"/precache/jobs/{job['id']}").json()
        assert gone["state"] == "cancelled" and gone["files_done"] < 300
        assert http.get("/precache/jobs").json()["running"] == 0
        assert http.delete("/precache/jobs/nope").status_code == 404


def test_a_huge_gitignore_skips_its_folder_at_once(tmp_path, monkeypatch):
    """Skipped by its size, never compiled (compiling a 540 KB one held the GIL for seconds): no timing here."""
    import pathspec

    from vramkit.embed.precache import walk_repo

    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.py").write_text("x = 1\n")
    (tmp_path / "top.py").write_text("y = 2\n")
    (tmp_path / "sub" / ".gitignore").write_text("\n".join(f"dir{i}/*.tmp{i}" for i in range(30_000)))
    compiled: list[int] = []
    real = pathspec.GitIgnoreSpec.from_lines

    def counting(lines, *args, **kwargs):
        lines = list(lines)
        compiled.append(len(lines))
        return real(lines, *args, **kwargs)
    monkeypatch.setattr(pathspec.GitIgnoreSpec, "from_lines", counting)
    out = walk_repo(tmp_path)
    assert out.skipped.get("gitignore_too_large") == 1 and [p.name for p in out.files] == ["top.py"]
    assert compiled == [], f"a .gitignore of {max(compiled)} lines was compiled"
