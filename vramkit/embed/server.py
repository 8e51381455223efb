"""Run the embed app under uvicorn (uvloop + httptools when installed: less per-request overhead)."""
from __future__ import annotations

import importlib.util

from vramkit.embed.config import EmbedConfig


def serve(config: EmbedConfig, log_level: str = "info") -> None:
    import uvicorn  # noqa: PLC0415

    from vramkit.embed.app import create_app  # noqa: PLC0415

    have = importlib.util.find_spec
    uvicorn.run(create_app(config), host=config.host, port=config.port,
                loop="uvloop" if have("uvloop") else "asyncio",
                http="httptools" if have("httptools") else "h11",
                access_log=False, log_level=log_level, timeout_graceful_shutdown=10)
