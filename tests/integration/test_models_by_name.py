"""Models by name (issue 19 item 1): `--model owner/name` and `vramkit pull`, through the real huggingface_hub
against a local server that speaks the Hub's file API (local_hub.py), never a mock of the kit's code.

Each case runs the real `vramkit` command line in a subprocess with its own HF_HOME (the Hub's cache),
VRAMKIT_STATE_DIR and VRAMKIT_MODELS_DIR, and HF_ENDPOINT pointing at the local server (or at a closed port).
"""
from __future__ import annotations

import json
import os
import random
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from local_hub import LocalHub

from vramkit import catalog
from vramkit.errors import Exit

HF_ID = "Qwen/Qwen2.5-Coder-14B-Instruct-GPTQ-Int4"
CATALOGUED = "qwen2.5-coder-14b-instruct-gptq-int4"
WEIGHTS = random.Random(19).randbytes(1 << 20)          # 1 MiB stands in for the safetensors


def _repo() -> dict[str, dict[str, bytes]]:
    config = (catalog.CONFIG_DIR / "models" / CATALOGUED / "config.json").read_bytes()
    return {HF_ID: {"config.json": config, "tokenizer_config.json": b'{"model_max_length": 32768}',
                    "model.safetensors": WEIGHTS, "README.md": b"# not needed by SGLang\n",
                    "original/consolidated.pth": b"x" * 1000}}


@pytest.fixture
def hub():
    with LocalHub(_repo()) as server:
        yield server


@pytest.fixture
def homes(tmp_path):
    return {"HF_HOME": tmp_path / "hf", "VRAMKIT_STATE_DIR": tmp_path / "state",
            "VRAMKIT_MODELS_DIR": tmp_path / "models"}


def _closed_port() -> str:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"http://127.0.0.1:{port}"


def _vramkit(*argv: str, endpoint: str, homes: dict, offline: bool = False, **extra_env) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "VRAMKIT_", "HUGGING"))}
    env |= {k: str(v) for k, v in homes.items()} | {"HF_ENDPOINT": endpoint, "HF_HUB_DISABLE_TELEMETRY": "1",
                                                     "HF_HUB_ETAG_TIMEOUT": "3", "HF_HUB_DOWNLOAD_TIMEOUT": "5"}
    env |= {k: str(v) for k, v in extra_env.items()}
    if offline:
        env["HF_HUB_OFFLINE"] = "1"
    return subprocess.run([sys.executable, "-m", "vramkit", *argv], env=env, capture_output=True, text=True,
                          timeout=120, cwd=Path(__file__).resolve().parents[2])


def _one_line(r: subprocess.CompletedProcess) -> str:
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    return lines[0]


PLAN = ("plan", "--model", HF_ID, "--gpu", "rtx-4060-ti-16gb", "--host-ram-gib", "64", "--json")


def test_a_hub_id_plans_from_the_cache_with_no_network(hub, homes):
    online = _vramkit(*PLAN, endpoint=hub.url, homes=homes)            # fills the Hub cache: config.json only
    assert online.returncode in (0, 10), online.stderr
    assert [p for m, p, _ in hub.log if m == "GET" and "/resolve/" in p] == [f"/{HF_ID}/resolve/main/config.json"]
    # no network at all: HF_HUB_OFFLINE and a closed port; the cache answers
    r = _vramkit(*PLAN, endpoint=_closed_port(), homes=homes, offline=True)
    assert r.returncode == online.returncode, r.stderr
    by_id, by_name = json.loads(r.stdout), json.loads(_vramkit(*PLAN[:2], CATALOGUED, *PLAN[3:], endpoint=hub.url,
                                                               homes=homes).stdout)
    assert by_id["model"] == HF_ID
    for key in ("weights_bytes", "kv_bytes_per_token", "kv_pool_tokens", "peak_vram_bytes"):
        assert by_id[key] == by_name[key], key        # the same config.json: the same plan as the catalogued copy
    assert by_id["sglang_args"][:2] == ["--model-path", HF_ID]


@pytest.mark.parametrize("how", ["offline", "unreachable"])
def test_without_the_cache_and_without_the_hub_it_is_one_line_exit_26(homes, how):
    if how == "offline":
        r = _vramkit(*PLAN, endpoint=_closed_port(), homes=homes, offline=True)
        assert "HF_HUB_OFFLINE" in _one_line(r)
    else:
        r = _vramkit(*PLAN, endpoint=_closed_port(), homes=homes)
        assert "cannot be reached" in _one_line(r)
    assert r.returncode == Exit.MODEL_UNREACHABLE == 26
    assert f"vramkit pull {HF_ID}" in _one_line(r)
    assert _one_line(r).endswith(f"--model {CATALOGUED}")       # the kit carries this one's config.json


def test_a_repo_the_hub_does_not_have_is_bad_input(hub, homes):
    r = _vramkit("plan", "--model", "Qwen/No-Such-Model", endpoint=hub.url, homes=homes)
    assert r.returncode == Exit.BAD_INPUT and "no model Qwen/No-Such-Model on the Hub" in _one_line(r)
    r = _vramkit(*PLAN[:3], "--revision", "v9", *PLAN[3:], endpoint=hub.url, homes=homes)
    assert r.returncode == Exit.BAD_INPUT and "no revision 'v9'" in _one_line(r)


def test_pull_says_the_size_first_downloads_what_sglang_loads_and_plan_uses_the_folder(hub, homes):
    r = _vramkit("pull", HF_ID, endpoint=hub.url, homes=homes)
    assert r.returncode == 0, r.stderr
    first = r.stdout.splitlines()[0]
    size = len(WEIGHTS) + len(_repo()[HF_ID]["config.json"]) + len(_repo()[HF_ID]["tokenizer_config.json"])
    assert first.startswith(f"{HF_ID} (c0ffee0000): 3 files, ") and "to download" in first    # before any byte
    assert f"{size / 2**20:.2f} MiB" in first or f"{size / 2**20:.1f} MiB" in first, first
    folder = homes["VRAMKIT_MODELS_DIR"] / HF_ID.replace("/", "--")
    assert (folder / "model.safetensors").read_bytes() == WEIGHTS
    assert not (folder / "README.md").exists() and not (folder / "original").exists()   # not what SGLang loads
    record = json.loads((homes["VRAMKIT_STATE_DIR"] / "pulled" / "Qwen--Qwen2.5-Coder-14B-Instruct-GPTQ-Int4.json")
                        .read_text())
    assert record["path"] == str(folder.resolve()) and record["commit"] == hub.commit
    # no Hub, and an empty Hub cache: plan reads the pulled folder, and SGLang is given it, not the id
    r = _vramkit(*PLAN, endpoint=_closed_port(), homes=homes | {"HF_HOME": homes["HF_HOME"].parent / "empty"},
                 offline=True)
    assert r.returncode in (0, 10), r.stderr
    assert json.loads(r.stdout)["sglang_args"][:2] == ["--model-path", str(folder.resolve())]
    again = _vramkit("pull", HF_ID, "--dry-run", endpoint=hub.url, homes=homes)
    assert "all already here" in again.stdout


def test_a_broken_pull_resumes_where_it_stopped(hub, homes):
    hub.drop_after["model.safetensors"] = 300_000         # the connection breaks after 300 kB, then 503s
    r = _vramkit("pull", HF_ID, endpoint=hub.url, homes=homes)
    assert r.returncode == Exit.MODEL_UNREACHABLE, r.stdout + r.stderr
    assert "Traceback" not in r.stderr
    hub.heal()
    served_before = len(hub.served_ranges("model.safetensors"))
    r = _vramkit("pull", HF_ID, endpoint=hub.url, homes=homes)
    assert r.returncode == 0, r.stderr
    assert "to download" in r.stdout.splitlines()[0]
    resumed = hub.served_ranges("model.safetensors")[served_before:]
    assert resumed and resumed[0] is not None and resumed[0].startswith("bytes=")
    assert int(resumed[0].removeprefix("bytes=").split("-")[0]) > 0        # not from byte 0
    folder = homes["VRAMKIT_MODELS_DIR"] / HF_ID.replace("/", "--")
    assert (folder / "model.safetensors").read_bytes() == WEIGHTS


_TINY_QWEN2 = {"model_type": "qwen2", "hidden_size": 256, "intermediate_size": 768, "num_hidden_layers": 3,
               "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 500, "max_position_embeddings": 8192,
               "rope_theta": 5e5, "rms_norm_eps": 1e-6}


@pytest.fixture(scope="module")
def pinned_transformers(tmp_path_factory):
    """The transformers pinned beside SGLang (.venv-sglang), asked in the shared SGLang checker (transformers is
    imported there already; tests/conftest.py puts these tests in its worker): its version, its GGUF
    architectures, and the config it gives SGLang for two tiny Qwen2 GGUFs (tied, untied) written by
    tools/make_random_gguf.py."""

    from vramkit.adapters import sglang_check
    python = sglang_check.checker_python()
    if not python.exists():
        pytest.fail(f"the SGLang checking environment is missing ({python}): run make setup-sglang-check",
                    pytrace=False)
    from repo_modules import load_module
    writer = load_module("tools/make_random_gguf.py")
    tmp = tmp_path_factory.mktemp("gguf")
    files = []
    for tie in (True, False):
        folder = tmp / f"cfg-{tie}"
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps(_TINY_QWEN2 | {"tie_word_embeddings": tie}))
        files.append(tmp / f"tiny-{tie}.gguf")
        writer.write(folder, files[-1], layout="Q4_K_M")
    gguf = sglang_check.gguf_configs(files)
    return gguf["transformers_version"], gguf["architectures"], list(zip(files, gguf["configs"], strict=True))


@pytest.mark.sglang
def test_the_gguf_architectures_are_the_pinned_transformers_ones(pinned_transformers):
    # vramkit/gguf_model.py declares which GGUF architectures SGLang 0.5.15.post1 can load (their config comes
    # from transformers' GGUF conversion): held to the transformers pinned beside SGLang in .venv-sglang
    from vramkit import gguf_model
    version, keys, _ = pinned_transformers
    assert version == "5.12.1"
    renamed = {"qwen2moe", "qwen3moe", "gpt-oss", "minimax-m2"}      # llama.cpp spellings transformers renames
    decoders = set(keys) - {"general", "tokenizer", "tokenizer_config", "t5", "umt5"}
    assert gguf_model.SGLANG_GGUF_ARCHITECTURES == decoders | renamed


@pytest.mark.sglang
def test_a_planned_gguf_reads_as_the_pinned_transformers_gives_sglang_its_config(pinned_transformers):
    # SGLang 0.5.15.post1 asks transformers 5.12.1 for a GGUF's config (AutoConfig with gguf_file=...): the kit's
    # reading of the same file (vramkit/gguf_model.py) must give the shape SGLang builds, tied or not
    ties = []
    for f, theirs in pinned_transformers[2]:
        m = catalog.model(str(f))
        assert theirs == {"model_type": "qwen2", "hidden_size": m.hidden_size, "intermediate_size": m.intermediate_size,
                          "num_hidden_layers": m.num_layers, "num_attention_heads": m.num_heads,
                          "num_key_value_heads": m.num_kv_heads, "vocab_size": m.vocab_size,
                          "max_position_embeddings": m.max_position_embeddings, "rope_theta": m.rope_theta,
                          "tie_word_embeddings": m.tie_word_embeddings}, f.name
        ties.append(m.tie_word_embeddings)
    assert ties == [True, False]
