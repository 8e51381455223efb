"""Checks on request bodies: every refusal names what to change. Pure (no FastAPI in here)."""
from __future__ import annotations

from dataclasses import dataclass


class BadRequest(Exception):
    """A 4xx answer: `status`, a message saying what to change, and the offending field."""

    def __init__(self, status: int, message: str, param: str | None = None,
                 retry_after_s: int | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.retry_after_s = retry_after_s     # said in a Retry-After header (429, 503)

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": "invalid_request_error",
                          "param": self.param, "code": self.status}}


@dataclass
class EmbedRequest:
    texts: list[str]
    normalize: bool
    max_seq_tokens: int | None
    encoding_format: str = "float"   # OpenAI route: "float" or "base64"


@dataclass
class Limits:
    max_texts: int
    max_text_chars: int
    model_names: set[str]
    model_max_seq: int
    dim: int
    max_request_chars: int = 4_194_304   # all texts together (EmbedConfig.max_request_chars)


def _texts(value, field: str, lim: Limits) -> list[str]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        raise BadRequest(422, f"'{field}' must be a string or a list of strings", field)
    if not value:
        raise BadRequest(422, f"'{field}' is empty: send at least one text", field)
    if len(value) > lim.max_texts:
        raise BadRequest(413, f"{len(value)} texts in one request; the limit is {lim.max_texts}: "
                              "split the list into smaller requests", field)
    for i, t in enumerate(value):
        if not isinstance(t, str):
            raise BadRequest(422, f"{field}[{i}] is {type(t).__name__}, not a string: "
                                  "send text (token arrays are not accepted)", field)
        if len(t) > lim.max_text_chars:
            raise BadRequest(413, f"{field}[{i}] has {len(t)} characters; the limit is "
                                  f"{lim.max_text_chars}: chunk it first", field)
    total = sum(map(len, value))
    if total > lim.max_request_chars:
        raise BadRequest(413, f"{total} characters in one request; the limit is "
                              f"{lim.max_request_chars} in all: split the list into smaller "
                              "requests", field)
    return value


def _model(body: dict, lim: Limits) -> None:
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise BadRequest(422, f"'model' must be a string (got {type(model).__name__}): send the "
                              "model's name, or leave it out", "model")
    if model is not None and model not in lim.model_names:
        raise BadRequest(404, f"unknown model {model!r}: this service serves "
                              f"{', '.join(sorted(lim.model_names))}", "model")


def _truncate(body: dict, lim: Limits) -> int | None:
    value = body.get("truncate")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= lim.model_max_seq:
        raise BadRequest(422, f"'truncate' is the number of tokens kept: a whole number "
                              f"from 1 to {lim.model_max_seq}", "truncate")
    return value


def _object(body) -> dict:
    if not isinstance(body, dict):
        raise BadRequest(422, "the body must be a JSON object such as {\"texts\": [\"...\"]}")
    return body


def parse_embed(body, lim: Limits) -> EmbedRequest:
    """POST /embed: {"texts": [...]} or {"text": "..."}, optional model, normalize, truncate."""
    body = _object(body)
    unknown = set(body) - {"texts", "text", "model", "normalize", "truncate"}
    if unknown:
        raise BadRequest(422, f"unknown field(s) {', '.join(sorted(unknown))}: use texts|text, "
                              "model, normalize, truncate", sorted(unknown)[0])
    if ("texts" in body) == ("text" in body):
        raise BadRequest(422, "send exactly one of 'texts' (a list) or 'text' (a string)", "texts")
    field = "texts" if "texts" in body else "text"
    if field == "text" and not isinstance(body["text"], str):
        raise BadRequest(422, "'text' must be a string; use 'texts' for a list", "text")
    texts = _texts(body[field], field, lim)
    _model(body, lim)
    normalize = body.get("normalize", True)
    if not isinstance(normalize, bool):
        raise BadRequest(422, "'normalize' must be true or false", "normalize")
    return EmbedRequest(texts, normalize, _truncate(body, lim))


def parse_openai(body, lim: Limits) -> EmbedRequest:
    """POST /v1/embeddings: {"input": str | [str], "model", "encoding_format", "dimensions"}."""
    body = _object(body)
    if "input" not in body:
        raise BadRequest(422, "'input' is missing: send a string or a list of strings", "input")
    texts = _texts(body["input"], "input", lim)
    _model(body, lim)
    fmt = body.get("encoding_format") or "float"
    if fmt not in ("float", "base64"):
        raise BadRequest(422, "'encoding_format' must be 'float' or 'base64'", "encoding_format")
    dims = body.get("dimensions")
    if dims is not None and dims != lim.dim:
        raise BadRequest(422, f"'dimensions' must be {lim.dim} for this model (or left out)",
                         "dimensions")
    return EmbedRequest(texts, True, None, fmt)
