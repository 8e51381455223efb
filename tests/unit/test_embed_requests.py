"""Every bad input is a 4xx whose message says what to change (vramkit.embed.requests, config)."""
from __future__ import annotations

import pytest

from vramkit.embed.config import EmbedConfig
from vramkit.embed.requests import BadRequest, Limits, parse_embed, parse_openai
from vramkit.errors import VramkitError

LIM = Limits(max_texts=4, max_text_chars=20, model_names={"all-MiniLM-L6-v2"}, model_max_seq=256,
             dim=384)


@pytest.mark.parametrize("body, status, says", [
    ({"texts": []}, 422, "at least one text"),
    ({"texts": ["a"] * 5}, 413, "limit is 4"),
    ({"texts": ["x" * 21]}, 413, "limit is 20"),
    ({"texts": ["ok", 3]}, 422, "texts[1] is int"),
    ({"texts": "a", "text": "b"}, 422, "exactly one"),
    ({}, 422, "exactly one"),
    ({"text": ["a"]}, 422, "use 'texts'"),
    ({"texts": ["a"], "model": "gpt-4"}, 404, "unknown model 'gpt-4'"),
    ({"texts": ["a"], "model": ["all-MiniLM-L6-v2"]}, 422, "'model' must be a string"),  # issue 20 item 7: was 500
    ({"texts": ["a"], "model": {"x": 1}}, 422, "'model' must be a string"),
    ({"texts": ["a"], "normalize": "yes"}, 422, "true or false"),
    ({"texts": ["a"], "truncate": 0}, 422, "from 1 to 256"),
    ({"texts": ["a"], "truncate": 9999}, 422, "from 1 to 256"),
    ({"texts": ["a"], "truncate": True}, 422, "whole number"),
    ({"texts": ["a"], "colour": 1}, 422, "unknown field(s) colour"),
    (["a"], 422, "JSON object"),
])
def test_embed_refusals(body, status, says):
    with pytest.raises(BadRequest) as err:
        parse_embed(body, LIM)
    assert err.value.status == status
    assert says in err.value.message
    assert err.value.body()["error"]["message"] == err.value.message


def test_embed_accepts_text_or_texts_with_options():
    r = parse_embed({"text": "hi", "model": "all-MiniLM-L6-v2", "normalize": False, "truncate": 64}, LIM)
    assert (r.texts, r.normalize, r.max_seq_tokens) == (["hi"], False, 64)
    assert parse_embed({"texts": ["a", "b"]}, LIM).normalize is True


@pytest.mark.parametrize("body, status, says", [
    ({"model": "all-MiniLM-L6-v2"}, 422, "'input' is missing"),
    ({"input": [[1, 2, 3]]}, 422, "token arrays"),
    ({"input": "a", "encoding_format": "int8"}, 422, "'float' or 'base64'"),
    ({"input": "a", "dimensions": 128}, 422, "must be 384"),
    ({"input": "a", "model": "text-embedding-3-small"}, 404, "unknown model"),
    ({"input": "a", "model": ["m"]}, 422, "'model' must be a string"),   # issue 20 item 7: was 500
])
def test_openai_refusals(body, status, says):
    with pytest.raises(BadRequest) as err:
        parse_openai(body, LIM)
    assert err.value.status == status and says in err.value.message


def test_openai_accepts_a_string_and_base64():
    r = parse_openai({"input": "a", "encoding_format": "base64", "dimensions": 384}, LIM)
    assert (r.texts, r.encoding_format) == (["a"], "base64")


def test_config_reads_env_and_refuses_unknown_settings():
    cfg = EmbedConfig.from_env({"VRAMKIT_EMBED_PORT": "9000", "REDIS_URL": "redis://r:6379/0"})
    assert (cfg.port, cfg.redis_url, cfg.host) == (9000, "redis://r:6379/0", "127.0.0.1")
    with pytest.raises(VramkitError, match="unknown setting VRAMKIT_EMBED_PROT"):
        EmbedConfig.from_env({"VRAMKIT_EMBED_PROT": "9000"})
    with pytest.raises(VramkitError, match="not a whole number"):
        EmbedConfig.from_env({"VRAMKIT_EMBED_PORT": "eighty"})


def test_a_request_over_the_characters_budget_is_413_in_all():
    lim = Limits(max_texts=4, max_text_chars=20, model_names={"m"}, model_max_seq=256, dim=384,
                 max_request_chars=30)
    with pytest.raises(BadRequest) as err:
        parse_embed({"texts": ["a" * 20, "b" * 11]}, lim)
    assert err.value.status == 413 and "limit is 30 in all" in err.value.message
    assert parse_embed({"texts": ["a" * 20, "b" * 10]}, lim).texts[1] == "b" * 10


def test_config_empty_means_default_body_cap_is_derived_and_hosts_follow_the_bind():
    cfg = EmbedConfig.from_env({"VRAMKIT_EMBED_TORCH_THREADS": "", "VRAMKIT_EMBED_PRECACHE_SYNC_S": "2.5"})
    assert cfg.torch_threads == EmbedConfig().torch_threads and cfg.precache_sync_s == 2.5
    assert cfg.max_body_bytes() == cfg.max_request_chars * 6 + 65_536
    assert "127.0.0.1" in cfg.host_names() and "evil.example" not in cfg.host_names()
    assert EmbedConfig(host="0.0.0.0").host_names() is None
    assert EmbedConfig(host="0.0.0.0", allowed_hosts="embed, Embed.local").host_names() == \
        {"embed", "embed.local"}
    with pytest.raises(VramkitError, match="unknown setting VRAMKIT_EMBED_ENCODE_WORKERS"):
        EmbedConfig.from_env({"VRAMKIT_EMBED_ENCODE_WORKERS": "2"})   # removed: it was never read
    with pytest.raises(VramkitError, match="not a number"):
        EmbedConfig.from_env({"VRAMKIT_EMBED_PRECACHE_MAX_S": "soon"})
