"""On a real GPU: token embeddings read by the GPU from pinned host RAM (benchmarks/gpu/uva_embed_check.py, the
mechanism of a lever that would free the moe preset's 0.58 GiB of bf16 embed_tokens), on a small table.

Opt-in: `make test-gpu` (VRAMKIT_GPU_TESTS=1); the full-size run is benchmarks/results/gpu/uva-embed/h200/.
"""
from __future__ import annotations

import pytest

from tests.repo_modules import load_module

pytestmark = [pytest.mark.gpu]


def test_a_pinned_table_viewed_by_the_gpu_gathers_what_a_gpu_copy_gathers(torch_cuda):
    check = load_module("benchmarks/gpu/uva_embed_check.py")
    torch, F = torch_cuda, torch_cuda.nn.functional
    host = torch.randn(4096, 256, dtype=torch.bfloat16).pin_memory()
    before = torch.cuda.memory_allocated()
    view = check.device_view(host)
    assert view.is_cuda and view.dtype == torch.bfloat16 and torch.cuda.memory_allocated() == before
    gpu = host.cuda()
    ids = torch.randint(0, 4096, (512,), device="cuda")
    assert torch.equal(F.embedding(ids, view), F.embedding(ids, gpu))
    host[ids[0]] = 7                                   # the view reads host RAM as it is now, not a copy
    torch.cuda.synchronize()
    assert bool((F.embedding(ids[:1], view) == 7).all())
    with pytest.raises(AssertionError):                # pageable memory has no device address: refused
        check.device_view(torch.zeros(4, 4, dtype=torch.bfloat16))
