"""Cache key scheme, float32 bytes, dedupe, chunking and file rules (vramkit.embed.keys)."""
from __future__ import annotations

import numpy as np
import pytest

from vramkit.embed.keys import (
    EmbedSettings,
    bytes_to_vector,
    cache_keys,
    chunk_text,
    decode_text,
    dedupe,
    skip_reason,
    vector_to_bytes,
)

BASE = EmbedSettings("sentence-transformers/all-MiniLM-L6-v2", "63b52178696a", 384, True, 256)


@pytest.mark.parametrize("other", [
    EmbedSettings("BAAI/bge-small-en-v1.5", "63b52178696a", 384, True, 256),   # another model
    EmbedSettings(BASE.model_id, "000000000000", 384, True, 256),              # other weights
    EmbedSettings(BASE.model_id, BASE.revision, 256, True, 256),               # dimension
    EmbedSettings(BASE.model_id, BASE.revision, 384, False, 256),              # normalization
    EmbedSettings(BASE.model_id, BASE.revision, 384, True, 128),               # truncation
])
def test_settings_that_change_the_vector_never_share_a_key(other):
    texts = ["def f(): pass", ""]
    assert not set(cache_keys(BASE, texts)) & set(cache_keys(other, texts))


def test_key_is_stable_and_depends_on_the_text():
    a = cache_keys(BASE, ["x", "y", "x"])
    assert a[0] == a[2] != a[1]
    assert a == cache_keys(EmbedSettings(*BASE.__dict__.values()), ["x", "y", "x"])
    assert a[0].startswith(b"emb:v1:" + BASE.namespace().encode() + b":")
    assert len(a[0].rsplit(b":", 1)[1]) == 64   # full SHA-256 of the text


def test_a_field_separator_in_the_model_name_cannot_forge_another_setting():
    a = EmbedSettings("m\x1frev", "x", 384, True, 256)
    b = EmbedSettings("m", "rev\x1fx", 384, True, 256)
    assert a.namespace() != b.namespace()
    assert EmbedSettings("m", "r", 384, True, 25).namespace() != \
        EmbedSettings("m", "r", 3842, True, 5).namespace()


def test_vectors_round_trip_bit_for_bit():
    rng = np.random.default_rng(0)
    vec = rng.standard_normal(384).astype(np.float32)
    vec[:4] = [0.0, -0.0, np.finfo(np.float32).tiny / 2, np.finfo(np.float32).max]
    raw = vector_to_bytes(vec)
    assert len(raw) == 384 * 4
    back = bytes_to_vector(raw, 384)
    assert back.tobytes() == vec.tobytes()
    assert np.signbit(back[1])


def test_float64_input_is_stored_as_float32_little_endian():
    raw = vector_to_bytes(np.array([1.0, 2.0], dtype=np.float64))
    assert raw == np.array([1.0, 2.0], dtype="<f4").tobytes()


@pytest.mark.parametrize("raw", [None, b"", b"\x00" * (384 * 4 - 1), b"\x00" * (384 * 8)])
def test_missing_or_torn_values_read_as_a_miss(raw):
    assert bytes_to_vector(raw, 384) is None


def test_dedupe_keeps_first_seen_order_and_maps_every_input():
    uniq, where = dedupe(["b", "a", "b", "c", "a"])
    assert uniq == ["b", "a", "c"]
    assert [uniq[i] for i in where] == ["b", "a", "b", "c", "a"]


def test_chunks_are_whole_lines_within_the_limit_and_cover_the_file():
    text = "".join(f"line {i} " + "x" * (i % 50) + "\n" for i in range(400))
    chunks = chunk_text(text, max_chars=300, overlap_lines=2)
    assert all(len(c) <= 300 for c in chunks)
    assert all(c.endswith("\n") for c in chunks)
    seen = set("".join(chunks).splitlines())
    assert seen == set(text.splitlines())
    assert chunk_text(text, 300, 2) == chunks          # deterministic: a second pass hits


def test_overlong_line_is_cut_and_blank_chunks_dropped():
    chunks = chunk_text("a" * 2500 + "\n\n\n   \n", max_chars=1000, overlap_lines=0)
    assert [len(c) for c in chunks] == [1000, 1000, 507]   # 500 + the blank lines after it
    assert chunk_text("\n \n\t\n") == []


def test_file_rules():
    assert skip_reason(2 << 20, b"text") == "too_large"
    assert skip_reason(10, b"ab\x00cd") == "binary"
    assert skip_reason(1 << 20, b"print(1)\n") is None        # exactly 1 MiB is allowed
    assert decode_text("\ufeffhé".encode()) == "hé"
    assert decode_text(b"\xff\xfeabc") is None
