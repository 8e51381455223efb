"""A model `vramkit pull` recorded is what plan, up (native and Docker) and install-service load (issue 19
item 1): the folder, not the Hub id SGLang would download again. The record is written as `pull` writes it
(vramkit/adapters/hub.py); the download itself is tested against a local Hub in tests/integration."""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from nvml_scenarios import run_cli

from vramkit import catalog
from vramkit.adapters import hub

HF_ID = "Qwen/Qwen2.5-Coder-14B-Instruct-GPTQ-Int4"
BASE = ["--preset", "optimized", "--gpu", "rtx-4060-ti-16gb", "--host-ram-gib", "64", "--dry-run"]


@pytest.fixture
def pulled(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("VRAMKIT_STATE_DIR", str(tmp_path / "state"))
    folder = tmp_path / "models" / "Qwen--Qwen2.5-Coder-14B-Instruct-GPTQ-Int4"
    folder.mkdir(parents=True)
    shutil.copy(catalog.CONFIG_DIR / "models" / "qwen2.5-coder-14b-instruct-gptq-int4" / "config.json", folder)
    record = tmp_path / "state" / "pulled" / "Qwen--Qwen2.5-Coder-14B-Instruct-GPTQ-Int4.json"
    record.parent.mkdir(parents=True)
    record.write_text(json.dumps({"repo_id": HF_ID, "revision": "main", "commit": "c0ffee", "path": str(folder)}))
    return folder


def _model_path(out: str) -> str:
    words = out.replace('"', " ").replace("\n", " ").split()
    return words[words.index("--model-path") + 1]


def test_up_native_and_docker_load_the_pulled_folder(pulled, capsys):
    assert run_cli(["up", *BASE, "--runtime", "native"]) == 0
    assert _model_path(capsys.readouterr().out) == str(pulled)
    assert run_cli(["up", *BASE, "--runtime", "docker"]) == 0
    out = capsys.readouterr().out
    assert f"{pulled}:/models/{pulled.name}:ro" in out               # mounted read-only, --model-path the mount


def test_install_service_loads_the_pulled_folder(pulled, tmp_path, capsys):
    argv = ["install-service", *BASE, "--dir", str(tmp_path / "units"), "--sglang-python", sys.executable]
    assert run_cli(argv) == 0
    assert _model_path(capsys.readouterr().out) == str(pulled)


def test_without_a_record_sglang_is_given_the_hub_id(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("VRAMKIT_STATE_DIR", str(tmp_path / "empty"))
    assert run_cli(["up", *BASE, "--runtime", "native"]) == 0
    assert _model_path(capsys.readouterr().out) == HF_ID


def test_a_record_is_used_only_while_its_folder_has_the_config(pulled):
    assert hub.pulled_folder(HF_ID) == pulled and hub.pulled_folder(HF_ID, "main") == pulled
    assert hub.pulled_folder(HF_ID, "v2") is None                     # another revision was asked for
    (pulled / "config.json").unlink()
    assert hub.pulled_folder(HF_ID) is None                           # deleted since: not a folder to load


@pytest.mark.parametrize("text, is_id", [("Qwen/Qwen2.5-7B", True), ("meta-llama/Llama-3.1-8B-Instruct", True),
                                         ("qwen2.5-coder-7b-instruct", False), ("./Qwen/x", False),
                                         ("a/b/c", False), ("/abs/model", False), ("config/models", False)])
def test_what_counts_as_a_hub_id(text, is_id):
    assert hub.is_repo_id(text) is is_id
