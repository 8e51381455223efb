"""PyTorch's CUDA caching allocator, as a model: how much GPU memory a sequence of allocations reserves.

SGLang's "Load weight end ... mem usage" is cudaMemGetInfo before minus after (after an empty_cache), so
it counts the allocator's *segments*, not the tensors: a 9 MB tensor is carved from a 20 MiB segment, and
the rest of that segment stays reserved if nothing else fits there. Whether it does depends on the sizes
and order of the allocations, so the planner replays them here rather than guessing an overhead.

The rules are those of c10/cuda/CUDACachingAllocator.cpp (PyTorch 2.x, default settings: no
expandable segments, no max_split_size, no roundup_power2_divisions):
  - every request is rounded up to a multiple of 512 B (kMinBlockSize);
  - requests of at most 1 MiB (kSmallSize) come from the small pool, in 2 MiB segments (kSmallBuffer);
  - larger ones from the large pool: under 10 MiB (kMinLargeAlloc) in 20 MiB segments (kLargeBuffer),
    from 10 MiB on in a segment of their own size rounded up to 2 MiB (kRoundLarge);
  - a request takes the smallest free block of its pool that fits (ties: the lower address) and splits off
    the rest when that is >= 512 B (small pool) or > 1 MiB (large pool). Addresses are cudaMalloc's, which
    the model cannot know; it takes the newer segment as the lower one (the driver hands out addresses from
    the top down) and, inside a segment, the lower offset. Three weight loads of Qwen3-Coder-30B-A3B recorded
    by torch's memory recorder (benchmarks/results/gpu/moe-vs-llamacpp-gptq/h200-stagesnap*/, replayed by
    benchmarks/gpu/replay_trace.py) end with the reserve the recorder saw to the MiB under this rule; taking
    the older segment first leaves one of them 98 MiB under (a 1.5 MiB repack buffer lands in another
    segment's free 2 MiB, and a 96 MiB segment is never cut);
  - a freed block merges with free neighbours in its segment; empty_cache() returns only segments
    that are entirely free.
Checked against every committed calibration run (benchmarks/calibration/, tests/unit/test_calibration.py):
the replayed loads of the 14B and 7B GPTQ and the dense 0.5B and 7B land within 8 MiB of SGLang's logged
figure (its log rounds to 10 MiB), tensor parallel 2 included.
"""
from __future__ import annotations

import bisect
import math
from typing import Any

MIN_BLOCK = 512
SMALL_SIZE = 1 << 20
SMALL_BUFFER = 2 << 20
LARGE_BUFFER = 20 << 20
MIN_LARGE_ALLOC = 10 << 20
ROUND_LARGE = 2 << 20


def round_size(nbytes: int) -> int:
    return MIN_BLOCK if nbytes < MIN_BLOCK else -(-nbytes // MIN_BLOCK) * MIN_BLOCK


def segment_size(rounded: int) -> int:
    if rounded <= SMALL_SIZE:
        return SMALL_BUFFER
    if rounded < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return ROUND_LARGE * math.ceil(rounded / ROUND_LARGE)


class CachingAllocator:
    """Replays malloc/free; `reserved` is what cudaMemGetInfo would show as used by the process's pools."""

    def __init__(self) -> None:
        self._segments: dict[int, int] = {}                 # segment id -> size
        self._blocks: dict[int, dict[int, list[Any]]] = {}       # segment id -> offset -> [size, free]
        self._free: dict[bool, list[tuple[int, int, int]]] = {True: [], False: []}   # small? -> (size, seg, off)
        self._small_seg: dict[int, bool] = {}
        self._live: dict[int, tuple[int, int]] = {}         # handle -> (segment, offset)
        self._next_seg = 0                                  # counts down: the newer segment sorts first
        self._next_handle = 0

    # -- bookkeeping of free blocks ------------------------------------------------------------
    def _add_free(self, small: bool, size: int, seg: int, off: int) -> None:
        bisect.insort(self._free[small], (size, seg, off))

    def _remove_free(self, small: bool, size: int, seg: int, off: int) -> None:
        lst = self._free[small]
        del lst[bisect.bisect_left(lst, (size, seg, off))]

    # -- the allocator's two calls -------------------------------------------------------------
    def malloc(self, nbytes: int) -> int | None:
        """Allocate; returns a handle for free(), or None for an empty tensor (no memory)."""
        if nbytes <= 0:
            return None
        n = round_size(nbytes)
        small = n <= SMALL_SIZE
        lst = self._free[small]
        i = bisect.bisect_left(lst, (n, -math.inf, -1))
        if i < len(lst):
            size, seg, off = lst.pop(i)
        else:
            seg, size, off = self._next_seg, segment_size(n), 0
            self._next_seg -= 1
            self._segments[seg] = size
            self._small_seg[seg] = small
            self._blocks[seg] = {0: [size, True]}
        blocks = self._blocks[seg]
        rest = size - n
        if (small and rest >= MIN_BLOCK) or (not small and rest > SMALL_SIZE):
            blocks[off] = [n, False]
            blocks[off + n] = [rest, True]
            self._add_free(small, rest, seg, off + n)
        else:
            blocks[off][1] = False
        handle = self._next_handle
        self._next_handle += 1
        self._live[handle] = (seg, off)
        return handle

    def free(self, handle: int | None) -> None:
        if handle is None:
            return
        seg, off = self._live.pop(handle)
        blocks, small = self._blocks[seg], self._small_seg[seg]
        size = blocks[off][0]
        nxt = blocks.get(off + size)
        if nxt is not None and nxt[1]:                      # merge with the next free block
            self._remove_free(small, nxt[0], seg, off + size)
            del blocks[off + size]
            size += nxt[0]
        prev_off = next((o for o, b in blocks.items() if o + b[0] == off and b[1]), None)
        if prev_off is not None:                            # and with the previous one
            self._remove_free(small, blocks[prev_off][0], seg, prev_off)
            del blocks[off]
            off = prev_off
            size += blocks[off][0]
        blocks[off] = [size, True]
        self._add_free(small, size, seg, off)

    def empty_cache(self) -> None:
        for seg in [s for s, b in self._blocks.items() if len(b) == 1 and b[0][1]]:
            self._remove_free(self._small_seg[seg], self._segments[seg], seg, 0)
            del self._segments[seg], self._blocks[seg], self._small_seg[seg]

    def run(self, ops: tuple[int, ...]) -> list[int | None]:
        """A sequence of allocator calls: n > 0 allocates n bytes, -k frees the k-th allocation (1-based). Returns the
        handles in allocation order, None for those it freed."""
        handles: list[int | None] = []
        for n in ops:
            if n > 0:
                handles.append(self.malloc(n))
            else:
                self.free(handles[-n - 1])
                handles[-n - 1] = None
        return handles

    # -- what it holds --------------------------------------------------------------------------
    @property
    def reserved(self) -> int:
        return sum(self._segments.values())

    @property
    def segment_sizes(self) -> list[int]:
        return list(self._segments.values())

    @property
    def allocated(self) -> int:
        return sum(b[0] for blocks in self._blocks.values() for b in blocks.values() if not b[1])
