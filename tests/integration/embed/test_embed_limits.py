"""Issue 10, item 3: bounded work, against the real app under uvicorn and a real valkey-server.

Body size capped while reading (413 before the body is read), a characters budget per request,
uncached encoding shared fairly (a big request does not starve a small one, cached hits stay
fast), precache answers early, shows progress inside big files, and always ends.
"""
from __future__ import annotations

import select
import socket
import threading
import time

import httpx

from .conftest import wait_for


def _answer(s: socket.socket) -> bytes:
    """The answer's head and as much of its body as its Content-Length names: uvicorn writes the two apart, and a
    loaded machine can deliver them in two reads."""
    got = b""
    while True:
        head, sep, body = got.partition(b"\r\n\r\n")
        if sep:
            length = next((int(ln.split(b":", 1)[1]) for ln in head.split(b"\r\n")
                           if ln.lower().startswith(b"content-length:")), 0)
            if len(body) >= length:
                return got
        try:
            more = s.recv(4096)
        except OSError:       # reset after the answer: what came is all there is
            return got
        if not more:
            return got
        got += more


def _raw(port: int, head: bytes, body_parts=(), read_timeout_s: float = 10.0) -> bytes:
    """Send a request by hand (headers, then body parts as long as the server reads) and return
    the answer (its head and body)."""
    with socket.create_connection(("127.0.0.1", port), timeout=read_timeout_s) as s:
        s.sendall(head)
        for part in body_parts:
            if select.select([s], [], [], 0)[0]:
                break         # the server answered: it stopped reading (more bytes would only earn a reset)
            try:
                s.sendall(part)
            except OSError:   # the server answered and closed: it stopped reading
                break
        return _answer(s)


def test_a_huge_declared_body_is_refused_before_it_is_read(serve):
    srv = serve()
    head = (b"POST /embed HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: 500000000\r\n\r\n")
    t0 = time.monotonic()
    answer = _raw(srv.port, head, [b'{"texts": ["' + b"a" * 1000])   # 1 kB of the 500 MB
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert time.monotonic() - t0 < 5
    assert b"limit is" in answer


def test_a_streamed_body_is_cut_at_the_cap_while_reading(serve):
    srv = serve(max_request_chars=1000)     # cap = 6 * 1000 + 65,536 bytes
    cap = srv.state.config.max_body_bytes()
    head = (b"POST /embed HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n")
    piece = b"x" * 8192
    chunk = b"%x\r\n" % len(piece) + piece + b"\r\n"
    sent = {"n": 0}

    def parts():
        for _ in range(64):          # 512 kB offered, no Content-Length to check up front
            sent["n"] += len(piece)
            yield chunk

    answer = _raw(srv.port, head, parts())
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert b"over %d bytes" % cap in answer


def test_a_request_has_a_total_characters_budget(serve):
    srv = serve(max_request_chars=100)
    with httpx.Client(base_url=srv.url, timeout=60) as http:
        r = http.post("/embed", json={"texts": ["a" * 60, "b" * 60]})
        assert r.status_code == 413 and "limit is 100 in all" in r.json()["error"]["message"]
        assert http.post("/embed", json={"texts": ["a" * 50, "b" * 50]}).status_code == 200


def _long_texts(n: int, tag: str) -> list[str]:
    """Texts of ~1,000 characters: each is a full 256-token forward pass."""
    return [f"{tag} {i} " + " ".join(f"w{(i * 31 + j) % 997}" for j in range(200)) for i in range(n)]


def test_a_big_uncached_request_does_not_starve_small_ones_or_cached_hits(serve):
    srv = serve(max_batch_texts=8)      # the big request's 64 texts: 8 encode calls, each a turn for the others
    big_done = threading.Event()
    big: dict = {}

    def send_big() -> None:
        t0 = time.monotonic()
        with httpx.Client(base_url=srv.url, timeout=600) as h:
            big["status"] = h.post("/embed", json={"texts": _long_texts(64, "big")}).status_code
        big["s"] = time.monotonic() - t0
        big_done.set()

    with httpx.Client(base_url=srv.url, timeout=600) as http:
        http.post("/embed", json={"text": "cached one"})
        worker = threading.Thread(target=send_big)
        worker.start()
        time.sleep(1.0)                                  # the big one is encoding now
        t0 = time.monotonic()
        small = http.post("/embed", json={"texts": _long_texts(2, "small")})
        small_s = time.monotonic() - t0
        small_finished_first = not big_done.is_set()
        hits = []
        while not big_done.is_set() and len(hits) < 200:
            t1 = time.perf_counter()
            assert http.post("/embed", json={"text": "cached one"}).json()["cached"] == [True]
            hits.append(time.perf_counter() - t1)
            time.sleep(0.01)
        worker.join(600)
    assert small.status_code == 200 and big["status"] == 200
    assert small_finished_first, f"the small request waited for the big one ({small_s:.1f} s)"
    assert small_s < big["s"] / 2, (small_s, big["s"])
    hits.sort()
    p99 = hits[int(0.99 * (len(hits) - 1))]
    # the 50 ms goal is measured by benchmarks/embed_faults_bench.py; here a loose bound that
    # holds on a shared 2-core machine and fails when hits queue behind the encode
    assert len(hits) >= 20 and p99 < 0.5, (len(hits), p99)


def test_precache_answers_early_shows_progress_inside_a_big_file_and_ends(serve, repos):
    repo = repos / "big"
    repo.mkdir()
    (repo / "huge.py").write_text("".join(f"def f{i}(x):\n    return x * {i} + {i * 7}\n"
                                          for i in range(500)))         # ~15 kB, ~15 chunks: 4 batches of 4
    (repo / "over_cap.txt").write_text("x = 1\n" * 20_000)              # 120 kB > the cap below
    srv = serve(precache_sync_s=0.5, precache_batch=4, precache_max_file_bytes=100_000)
    with httpx.Client(base_url=srv.url, timeout=60) as http:
        t0 = time.monotonic()
        r = http.post("/precache/repo", json={"path": str(repo), "wait": True})
        assert r.status_code == 202 and time.monotonic() - t0 < 5, (r.status_code, r.text[:300])
        poll = r.json()["poll"]
        seen = []

        def progressed() -> bool:
            job = http.get(poll).json()
            seen.append(job)
            return job["state"] != "embedding"

        assert wait_for(progressed, timeout_s=300, step_s=0.2)
    last = seen[-1]
    assert last["state"] == "done" and last["files_embedded"] == 1
    assert last["skipped"] == {"too_large": 1}
    assert last["skipped_examples"]["too_large"] == [str(repo / "over_cap.txt")]
    inside = [j for j in seen if 0 < j["bytes_done"] < j["bytes_total"]
              and j["current_file"].endswith("huge.py")]
    assert inside, "no progress was visible while the big file was embedded"
    assert last["bytes_done"] == last["bytes_total"] and last["chunks_done"] == last["chunks"]


def test_a_precache_job_always_ends_within_its_time_budget(serve, repos):
    repo = repos / "slow"
    repo.mkdir()
    for i in range(40):
        (repo / f"m{i}.py").write_text("\n".join(_long_texts(3, f"m{i}")))
    srv = serve(precache_max_s=1.0, precache_batch=4)
    with httpx.Client(base_url=srv.url, timeout=60) as http:
        r = http.post("/precache/repo", json={"path": str(repo), "wait": True}).json()
        if r["state"] == "embedding":
            assert wait_for(lambda: http.get(r["poll"]).json()["state"] != "embedding", 60)
            r = http.get(r["poll"]).json()
    assert r["state"] == "failed" and "time budget" in r["error"]
    assert 1.0 <= r["seconds"] < 30 and r["files_done"] < 40   # stopped, not finished


def test_precache_jobs_running_at_once_are_limited(serve, repos):
    repo = repos / "busy"
    repo.mkdir()
    for i in range(6):
        (repo / f"m{i}.py").write_text("\n".join(_long_texts(3, f"busy{i}")))
    srv = serve(precache_max_jobs=1, precache_batch=4)
    with httpx.Client(base_url=srv.url, timeout=60) as http:
        first = http.post("/precache/repo", json={"path": str(repo), "wait": False}).json()
        assert first["state"] == "embedding"
        r = http.post("/precache/repo", json={"path": str(repo), "wait": False})
        assert r.status_code == 429 and "limit is 1" in r.json()["error"]["message"]
        assert wait_for(lambda: http.get(first["poll"]).json()["state"] == "done", 300, 0.2)
        assert http.post("/precache/repo", json={"path": str(repo)}).status_code in (200, 202)
