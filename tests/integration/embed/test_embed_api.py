"""The routes against a real valkey-server and the real all-MiniLM-L6-v2 (FastAPI test client)."""
from __future__ import annotations

import base64
import os
import time

import numpy as np
import redis

from vramkit.embed.keys import cache_keys


def test_second_embed_of_the_same_text_comes_from_the_cache(client):
    first = client.post("/embed", json={"text": "def add(a, b): return a + b"}).json()
    second = client.post("/embed", json={"text": "def add(a, b): return a + b"}).json()
    assert first["cached"] == [False] and second["cached"] == [True]
    assert first["dim"] == 384 and first["model"] == "sentence-transformers/all-MiniLM-L6-v2"
    # the cached vector is the computed one, bit for bit, also after JSON
    a = np.array(first["vectors"], dtype=np.float32)
    b = np.array(second["vectors"], dtype=np.float32)
    assert a.tobytes() == b.tobytes()
    assert abs(np.linalg.norm(a) - 1.0) < 1e-5


def test_stored_bytes_are_float32_of_the_model_output(client, encoder, flushed):
    text = "class Cache: pass"
    body = client.post("/embed", json={"texts": [text]}).json()
    settings = encoder.settings(True, None)
    raw = redis.Redis.from_url(flushed.url).get(cache_keys(settings, [text])[0])
    assert raw == np.array(body["vectors"][0], dtype="<f4").tobytes()
    bare = encoder.encode([text], True, settings.max_seq_tokens)[0]
    assert np.allclose(np.frombuffer(raw, "<f4"), bare, atol=1e-6)


def test_duplicates_in_a_batch_are_encoded_once(client):
    before = client.get("/stats").json()
    body = client.post("/embed", json={"texts": ["dup", "other", "dup", "dup"]}).json()
    after = client.get("/stats").json()
    assert after["misses"] - before["misses"] == 2
    assert after["texts"] - before["texts"] == 4
    assert body["vectors"][0] == body["vectors"][2] == body["vectors"][3]
    assert after["redis"]["keys"] == 2 and after["redis"]["bytes"] > 0


def test_normalization_and_truncation_are_separate_cache_entries(client):
    text = "the same words " * 40
    plain = client.post("/embed", json={"text": text}).json()
    raw = client.post("/embed", json={"text": text, "normalize": False}).json()
    short = client.post("/embed", json={"text": text, "truncate": 8}).json()
    assert plain["cached"] == raw["cached"] == short["cached"] == [False]
    # (all-MiniLM-L6-v2 ends in its own Normalize module, so both vectors have norm 1 here;
    # what matters is that the two settings are two cache entries)
    assert not np.allclose(plain["vectors"][0], short["vectors"][0])  # really truncated
    assert client.post("/embed", json={"text": text, "truncate": 8}).json()["cached"] == [True]


def test_openai_route_matches_embed_in_float_and_base64(client):
    texts = ["alpha beta", "gamma"]
    ours = client.post("/embed", json={"texts": texts}).json()["vectors"]
    r = client.post("/v1/embeddings", json={"input": texts, "model": "all-MiniLM-L6-v2"}).json()
    assert r["object"] == "list" and [d["index"] for d in r["data"]] == [0, 1]
    assert [d["embedding"] for d in r["data"]] == ours
    b = client.post("/v1/embeddings", json={"input": "gamma", "encoding_format": "base64"}).json()
    vec = np.frombuffer(base64.b64decode(b["data"][0]["embedding"]), dtype="<f4")
    assert vec.tobytes() == np.array(ours[1], dtype="<f4").tobytes()


def test_bad_inputs_are_4xx_that_say_what_to_change(client):
    cases = [
        ("/embed", {"texts": []}, 422, "at least one text"),
        ("/embed", {"texts": ["a"] * 3000}, 413, "split the list"),
        ("/embed", {"text": "x" * 100_001}, 413, "chunk it first"),
        ("/embed", {"texts": ["a", None]}, 422, "not a string"),
        ("/embed", {"texts": ["a"], "model": "bge-large"}, 404, "unknown model"),
        ("/v1/embeddings", {"input": [1, 2]}, 422, "not a string"),
        ("/precache/repo", {"path": "/etc"}, 403, "outside the allowed roots"),
    ]
    for path, body, status, says in cases:
        r = client.post(path, json=body)
        assert r.status_code == status, (path, body, r.text)
        assert says in r.json()["error"]["message"]
    r = client.post("/embed", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400 and "not valid JSON" in r.json()["error"]["message"]


def test_precache_walks_embeds_and_second_pass_hits(client, repos):
    repo = repos / "proj"
    (repo / "pkg").mkdir(parents=True)
    (repo / ".gitignore").write_text("*.tmp\n")
    (repo / "pkg" / "a.py").write_text("".join(f"def f{i}(x):\n    return x * {i}\n" for i in range(60)))
    (repo / "README.md").write_text("# proj\n\nA small project.\n")
    (repo / "scratch.tmp").write_text("ignored\n")
    (repo / "blob.bin").write_bytes(b"\x00\x01\x02")
    secret = repos.parent / "secret.txt"
    secret.write_text("token=abc\n")
    os.symlink(secret, repo / "escape.txt")

    first = client.post("/precache/repo", json={"path": str(repo)}).json()
    assert first["state"] == "done"
    assert first["files_embedded"] == 3            # a.py, README.md, .gitignore
    assert first["skipped"] == {"gitignored": 1, "binary": 1, "symlink_outside": 1}
    assert first["chunks"] >= 3 and first["cache_hits"] == 0
    second = client.post("/precache/repo", json={"path": str(repo)}).json()
    assert second["chunks"] == first["chunks"] == second["cache_hits"]
    # a query for a chunk's exact text now hits
    body = client.post("/embed", json={"text": "# proj\n\nA small project.\n"}).json()
    assert body["cached"] == [True]
    traversal = client.post("/precache/repo", json={"path": str(repo / ".." / ".." )})
    assert traversal.status_code == 403


def test_precache_job_can_be_polled(client, repos):
    repo = repos / "jobrepo"
    repo.mkdir()
    (repo / "x.py").write_text("x = 1\n")
    r = client.post("/precache/repo", json={"path": str(repo), "wait": False})
    assert r.status_code == 202
    job_id = r.json()["id"]
    for _ in range(200):
        job = client.get(r.json()["poll"]).json()
        if job["state"] == "done":
            break
        time.sleep(0.05)   # up to 10 s: the encode runs in a worker process (issue 10)
    assert job["state"] == "done" and job["files_embedded"] == 1 and job["id"] == job_id
    assert client.get("/precache/jobs/nope").status_code == 404


def test_metrics_and_stats_report_the_same_counts(client):
    client.post("/embed", json={"texts": ["m1", "m2"]})
    client.post("/embed", json={"texts": ["m1"]})
    stats = client.get("/stats").json()
    text = client.get("/metrics").text
    assert stats["hits"] == 1 and stats["misses"] == 2 and stats["hit_ratio"] == round(1 / 3, 4)
    assert "vramkit_embed_cache_hits_total 1.0" in text
    assert "vramkit_embed_cache_misses_total 2.0" in text
    assert "vramkit_embed_redis_up 1.0" in text
    assert 'vramkit_embed_request_seconds_bucket{le="+Inf"} 2.0' in text
    assert stats["latency_ms"]["p50"] is not None and stats["latency_ms"]["window"] == 2


def test_api_key_guards_every_route_but_health(encoder, flushed, repos):
    from fastapi.testclient import TestClient

    from vramkit.embed.app import create_app

    from .conftest import make_config

    app = create_app(make_config(flushed.url, repos, api_key="s3cret"), encoder=encoder)
    with TestClient(app, base_url="http://127.0.0.1") as c:
        assert c.get("/health").status_code == 200
        for method, path, body in [("post", "/embed", {"text": "a"}),
                                   ("post", "/v1/embeddings", {"input": "a"}),
                                   ("post", "/precache/repo", {"path": str(repos)}),
                                   ("get", "/stats", None), ("get", "/metrics", None),
                                   ("get", "/precache/jobs/x", None)]:
            r = getattr(c, method)(path, **({"json": body} if body else {}))
            assert r.status_code == 401 and "X-API-Key" in r.json()["error"]["message"], path
        assert c.post("/embed", json={"text": "a"}, headers={"X-API-Key": "s3cret"}).status_code == 200
        assert c.post("/v1/embeddings", json={"input": "a"},
                      headers={"Authorization": "Bearer s3cret"}).status_code == 200
        assert c.post("/embed", json={"text": "a"}, headers={"X-API-Key": "wrong"}).status_code == 401


def test_vectors_come_back_in_request_order_whatever_the_lengths(client, encoder):
    """The fair queue encodes a request's texts shortest first; the answer is in the caller's order."""
    texts = ["a much longer text about caches, " * 20, "x", "a medium text about vectors", "yy"]
    body = client.post("/embed", json={"texts": texts}).json()
    assert body["cached"] == [False] * 4
    settings = encoder.settings(True, None)
    for text, got in zip(texts, body["vectors"], strict=True):
        alone = encoder.encode([text], True, settings.max_seq_tokens)[0]
        assert np.allclose(got, alone, atol=1e-5), text[:20]
