"""The suite's scheduling groups (tests/conftest.py): a test file that asks the shared SGLang checker for work runs in
the "sglang" group, so only one xdist worker starts that process and pays its SGLang import. A file left out starts a
second checker in the other worker (test_gpu_prefill_sglang.py did until 2026-11-29: ~6 s of a 150 s run)."""
from __future__ import annotations

import re
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
# the adapter's calls that send the shared checker a request (vramkit/adapters/sglang_check.py)
ASKS = re.compile(r"sglang_check\.(run_batch|gguf_configs|dummy_weights|gpu_prefill_call|gpu_prefill_numbers"
                  r"|check_launches|parser_accepts|shared_checker)\(")


def _conftest():
    import importlib.util
    spec = importlib.util.spec_from_file_location("suite_conftest", TESTS / "conftest.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_every_file_that_asks_the_sglang_checker_is_in_its_group():
    conf = _conftest()
    asking = {p.relative_to(TESTS.parent).as_posix() for p in TESTS.rglob("test_*.py") if ASKS.search(p.read_text())}
    assert "tests/integration/test_gpu_prefill_sglang.py" in asking        # the pattern still finds the calls
    # a file whose checker calls sit in a fixture the group takes by name is grouped through that fixture
    by_fixture = {p for p in asking if "def pinned_transformers(" in (TESTS.parent / p).read_text()}
    assert set(conf.SGLANG_FILES) >= asking - by_fixture, sorted(asking - by_fixture - set(conf.SGLANG_FILES))
