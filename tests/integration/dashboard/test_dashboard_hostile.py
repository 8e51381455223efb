"""Issue 20 item 4: the dashboard against a web page that rebinds its DNS name to 127.0.0.1, and against a
committed capture that links to a secret. Each test failed on the code the issue was filed against."""
from __future__ import annotations

import json
import shutil
import time

import pytest
from fastapi.testclient import TestClient

from vramkit.cli import main
from vramkit.dashboard.app import create_app
from vramkit.dashboard.capture import ReplaySource
from vramkit.dashboard.sources import LiveSource

from .conftest import REPO

CAPTURE = REPO / "benchmarks" / "results" / "gpu" / "dashboard-capture"


def client(source=None, host: str = "127.0.0.1") -> TestClient:
    return TestClient(create_app(source or LiveSource(), sample_s=0), base_url=f"http://{host}")


@pytest.mark.parametrize("host", ["evil.example", "evil.example:8003", "127.0.0.1.evil.example"])
def test_a_foreign_host_gets_403_on_every_route(host, state_dir):
    with client(host=host) as c:
        for path in ("/api/meta", "/api/server", "/metrics", "/api/plan?model=/root", "/"):
            r = c.get(path)
            assert r.status_code == 403 and "Host" in r.json()["error"]["message"], path
    with client() as c:
        assert c.get("/api/meta").status_code == 200


def test_listed_names_and_a_wide_bind_follow_the_settings(state_dir):
    with TestClient(create_app(LiveSource(), sample_s=0, host_names={"box.lan"}), base_url="http://box.lan") as c:
        assert c.get("/health").status_code == 200
    with TestClient(create_app(LiveSource(), sample_s=0, host_names=None), base_url="http://any.name") as c:
        assert c.get("/health").status_code == 200


def _replay_copy(tmp_path):
    d = tmp_path / "capture"
    shutil.copytree(CAPTURE, d)
    return d


def test_replay_never_follows_a_link_out_of_the_capture(tmp_path, state_dir):
    secret = tmp_path / "shadow"
    secret.write_text("root:$6$secret-hash:19000:0:99999:7:::\n")
    d = _replay_copy(tmp_path)
    (d / "metrics.txt").unlink()
    (d / "metrics.txt").symlink_to(secret)
    with client(ReplaySource(d)) as c:
        r = c.get("/metrics")
        assert "secret-hash" not in r.text and r.status_code >= 400
    (d / "meta.json").rename(d / "meta.real")
    (d / "meta.json").symlink_to(d / "meta.real")
    assert main(["dashboard", "--replay", str(d), "--background", "--port", "1"]) == 65


def test_plan_folders_say_nothing_about_what_exists(tmp_path, state_dir):
    (tmp_path / "empty").mkdir()
    (tmp_path / "file").write_text("x")
    (tmp_path / "odd" / "config.json").mkdir(parents=True)      # a folder where the file should be
    with client() as c:
        said = set()
        for name in ("missing", "empty", "file", "odd"):
            r = c.get("/api/plan", params={"model": str(tmp_path / name)})
            assert r.status_code == 400
            said.add(r.json()["error"]["message"].replace(str(tmp_path / name), "PATH"))
    assert len(said) == 1, said


def test_plan_inputs_are_bounded_and_rate_limited(tmp_path, state_dir):
    big = tmp_path / "big"
    big.mkdir()
    cfg = json.loads((REPO / "config/models/qwen2.5-coder-14b-instruct-gptq-int4/config.json").read_text())
    cfg["padding"] = "x" * (10 << 20)
    (big / "config.json").write_text(json.dumps(cfg))
    with client() as c:
        t0 = time.perf_counter()
        r = c.get("/api/plan", params={"model": str(big)})
        assert r.status_code == 400 and "bytes" in r.json()["error"]["message"]
        r = c.get("/api/plan", params={"preset": "optimized", "context": "9" * 400})
        assert r.status_code == 400 and "2^40" in r.json()["error"]["message"]
        r = c.get("/api/plan", params={"model": "x" * 5000})
        assert r.status_code == 400 and "characters" in r.json()["error"]["message"]
        assert time.perf_counter() - t0 < 5
        codes = [c.get("/api/plan", params={"colour": "red"}).status_code for _ in range(30)]
    assert codes[0] == 400 and 429 in codes
