"""Cache keys, vector bytes and text chunks for the embedding cache (issue 3). Pure: no Redis, no I/O.

Key scheme: ``emb:v1:<namespace>:<sha256(text)>``. The namespace is a digest of every setting that
changes the vector (model id, model revision, dimension, normalization, truncation length), so two
models or two settings can never share an entry; the text digest is SHA-256 of its UTF-8 bytes, full
length (64 hex), so collisions are not a practical concern. The readable pieces are kept beside the
digest in `EmbedSettings.describe()` for /stats and logs, not in every key (they would cost bytes per
key in Redis).

Vectors are stored as little-endian float32 bytes (dim * 4 bytes), never JSON: a 384-dim vector is
1536 bytes and round-trips bit for bit.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

import numpy as np

KEY_VERSION = "v1"   # bump when the layout of keys or values changes; old entries then age out by LRU
_F32_LE = np.dtype("<f4")


@dataclass(frozen=True)
class EmbedSettings:
    """Everything that changes the vector a text maps to."""

    model_id: str          # name or path the operator configured
    revision: str          # content digest or package version of the weights actually loaded
    dim: int               # output dimension
    normalize: bool        # L2-normalized vectors or raw
    max_seq_tokens: int    # truncation: tokens past this are cut before encoding

    def describe(self) -> str:
        return (f"model={self.model_id}@{self.revision} dim={self.dim} "
                f"normalize={int(self.normalize)} max_seq_tokens={self.max_seq_tokens}")

    def namespace(self) -> str:
        """16 hex chars of SHA-256 over the settings; differs whenever any setting differs."""
        # JSON of a list: unambiguous, so no model name can spell another setting
        raw = json.dumps([KEY_VERSION, self.model_id, self.revision, self.dim,
                          bool(self.normalize), self.max_seq_tokens])
        return hashlib.sha256(raw.encode()).hexdigest()[:16]

    def key_prefix(self) -> bytes:
        return f"emb:{KEY_VERSION}:{self.namespace()}:".encode()


def text_digest(text: str) -> bytes:
    """Hex SHA-256 of the text's UTF-8 bytes (surrogates kept via surrogatepass)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest().encode()


def cache_keys(settings: EmbedSettings, texts: list[str]) -> list[bytes]:
    prefix = settings.key_prefix()
    return [prefix + text_digest(t) for t in texts]


def vector_to_bytes(vec: np.ndarray) -> bytes:
    """One vector as little-endian float32 bytes."""
    return np.ascontiguousarray(vec, dtype=_F32_LE).tobytes()


def bytes_to_vector(raw: bytes | None, dim: int) -> np.ndarray | None:
    """Back to a float32 vector; None when missing or of the wrong length (a foreign or torn value)."""
    if raw is None or len(raw) != dim * 4:
        return None
    return np.frombuffer(raw, dtype=_F32_LE)


def dedupe(texts: list[str]) -> tuple[list[str], list[int]]:
    """Unique texts in first-seen order, and for each input its index into that list."""
    first: dict[str, int] = {}
    where = []
    for t in texts:
        i = first.setdefault(t, len(first))
        where.append(i)
    return list(first), where


# --- chunking files for /precache/repo ---------------------------------------------------------
CHUNK_CHARS = 1000      # ~256 tokens at ~4 chars/token (a guess for code): all-MiniLM-L6-v2 reads at
                        # most 256 tokens, so a longer chunk would only be truncated
CHUNK_OVERLAP_LINES = 2  # lines repeated at the start of the next chunk so a split keeps context


def chunk_text(text: str, max_chars: int = CHUNK_CHARS,
               overlap_lines: int = CHUNK_OVERLAP_LINES) -> list[str]:
    """Split a file into pieces of whole lines, each at most `max_chars` (a longer line is cut).

    Deterministic: the same file gives the same chunks, so a second precache pass hits the cache.
    Blank-only chunks are dropped.
    """
    lines = text.splitlines(keepends=True)
    pieces: list[str] = []
    for line in lines:   # cut overlong lines first so every unit fits
        while len(line) > max_chars:
            pieces.append(line[:max_chars])
            line = line[max_chars:]
        pieces.append(line)
    chunks: list[str] = []
    cur: list[str] = []
    size = 0
    for line in pieces:
        if cur and size + len(line) > max_chars:
            chunks.append("".join(cur))
            keep = cur[-overlap_lines:] if overlap_lines else []
            while keep and sum(map(len, keep)) + len(line) > max_chars:
                keep = keep[1:]
            cur, size = list(keep), sum(map(len, keep))
        cur.append(line)
        size += len(line)
    if cur:
        chunks.append("".join(cur))
    return [c for c in chunks if c.strip()]


# --- which files precache reads ----------------------------------------------------------------
MAX_FILE_BYTES = 1 << 20   # issue 3: files over 1 MiB are skipped


def skip_reason(size_bytes: int, head: bytes, max_bytes: int = MAX_FILE_BYTES) -> str | None:
    """Why a file is not embedded ('too_large', 'binary'), or None. `head` is its first bytes."""
    if size_bytes > max_bytes:
        return "too_large"
    if b"\x00" in head:
        return "binary"
    return None


def decode_text(data: bytes) -> str | None:
    """UTF-8 text (a BOM is dropped), or None when the bytes are not UTF-8 ('undecodable')."""
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return None
