"""A GGUF given as --model (issue 19 item 1): read with the gguf library, refused with the reason, exit 21.

The files are real GGUFs written by the gguf library's own writer (tiny tensors); the command is the real CLI.
"""
from __future__ import annotations

import pytest
from nvml_scenarios import run_cli

from vramkit.errors import Exit

gguf = pytest.importorskip("gguf", reason="the gguf library reads and writes the files (make install puts it in .venv)")
np = pytest.importorskip("numpy")


def _write(path, arch: str, **tensors) -> None:
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name("tiny-coder")
    w.add_block_count(2)
    w.add_context_length(4096)
    for name, array in tensors.items():
        w.add_tensor(name.replace("__", "."), array)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def _plan(model, capsys) -> tuple[int, str]:
    code = run_cli(["plan", "--model", str(model), "--gpu", "rtx-4060-ti-16gb", "--host-ram-gib", "64"])
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return code, err


def test_a_gguf_of_an_architecture_sglang_loads_is_refused_with_what_was_read(tmp_path, capsys):
    path = tmp_path / "tiny-coder-Q8_0.gguf"
    _write(path, "qwen2", token_embd__weight=np.zeros((32, 64), np.float16),
           blk__0__attn_q__weight=np.zeros((64, 64), np.float32), blk__1__attn_q__weight=np.zeros((64, 64), np.float32))
    code, err = _plan(path, capsys)
    assert code == Exit.UNSUPPORTED_MODEL == 21
    assert "GGUF of tiny-coder (qwen2, 2 layers, 3 tensors" in err and "2 F32, 1 F16" in err
    assert "SGLang 0.5.15.post1 serves it (--load-format gguf" in err
    assert "--model owner/name" in err                            # the way to a plan


def test_a_gguf_sglang_cannot_load_says_so(tmp_path, capsys):
    path = tmp_path / "rwkv.gguf"
    _write(path, "rwkv6", token_embd__weight=np.zeros((8, 8), np.float32))
    code, err = _plan(path, capsys)
    assert code == Exit.UNSUPPORTED_MODEL and "cannot load it" in err and "'rwkv6'" in err


def test_gguf_is_known_by_its_magic_and_a_broken_one_is_a_bad_file(tmp_path, capsys):
    renamed = tmp_path / "model.bin"
    _write(renamed, "llama", token_embd__weight=np.zeros((8, 8), np.float32))
    code, err = _plan(renamed, capsys)                         # SGLang's check_gguf_file: b"GGUF" at the start
    assert code == Exit.UNSUPPORTED_MODEL and "(llama, 2 layers" in err
    broken = tmp_path / "cut.gguf"
    broken.write_bytes(renamed.read_bytes()[:40])               # a download cut short
    code, err = _plan(broken, capsys)
    assert code == Exit.BAD_FILE and "not a readable GGUF" in err
