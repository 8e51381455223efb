"""Run the embed app under uvicorn with the kit's connection limits (vramkit.adapters.http_server).

Logging: to stderr (the journal under systemd, `docker logs` under compose: both rotate), or with
`log_file` (what `embed up` passes) to a rotating file in a folder apart from the data folder, so a
flood of log lines can never fill the disk that holds the cache's AOF (issue 20 item 2: 186 MB of
tracebacks did). When the encoder worker cannot be replaced within its bound the process exits 27
(Exit.ENCODER_DOWN): `Restart=on-failure` (systemd) or `restart: unless-stopped` (compose) starts a
fresh one (issue 20 item 1).
"""
from __future__ import annotations

import logging
import logging.handlers
import os
import sys
from pathlib import Path

from vramkit.embed.config import EmbedConfig
from vramkit.errors import Exit

LOG_BYTES = 10 << 20       # one log file; 3 old ones kept: at most 40 MiB of log
LOG_KEEP = 3
log = logging.getLogger("vramkit.embed")


def setup_logging(log_file: Path | None, level: str = "info") -> None:
    handler: logging.Handler
    if log_file is not None:
        log_file.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        handler = logging.handlers.RotatingFileHandler(log_file, maxBytes=LOG_BYTES, backupCount=LOG_KEEP)
    else:
        handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True


def _give_up(why: str) -> None:
    log.critical("exiting %d: %s", int(Exit.ENCODER_DOWN), why)
    logging.shutdown()
    os._exit(int(Exit.ENCODER_DOWN))    # threads and the event loop cannot be trusted to wind down


def serve(config: EmbedConfig, log_level: str = "info", log_file: Path | None = None) -> None:
    import uvicorn  # noqa: PLC0415

    from vramkit.adapters.http_server import uvicorn_config  # noqa: PLC0415
    from vramkit.embed.app import create_app  # noqa: PLC0415

    setup_logging(log_file, log_level)
    warning = config.exposure_warning()
    if warning:
        log.warning("%s", warning)
    cfg = uvicorn_config(create_app(config, on_give_up=_give_up), config.host, config.port,
                         config.connection_limits(), log_level=log_level, logger_name="vramkit.embed",
                         log_config=None, timeout_graceful_shutdown=10)
    uvicorn.Server(cfg).run()
