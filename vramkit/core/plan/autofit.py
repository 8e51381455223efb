"""Auto-fit at start (issue 19 item 2): when a preset no longer fits the memory free at start (a desktop's
compositor and browser hold VRAM too), step down in a declared order to the largest configuration that fits.

Pure: a model, the target (its free memory as measured), the asked knobs and the engine in; an `AutoFit` out
(the plan as asked, the plan that fits, each step with what it costs), or None when nothing in the order fits.
`vramkit up` (launch/up.py) calls it; `--no-auto-fit` refuses instead.

The order, cheapest loss first (STEP_ORDER):
1. KV dtype: fp16/bf16 -> fp8_e5m2 halves the bytes per token (the optimized preset is fp8 already).
2. context: the longest (a multiple of 1,024 tokens) whose requests still fit; longer prompts are refused.
3. GPU experts (the hybrid MoE mode, a fixed --kt-num-gpu-experts): fewer per layer on the GPU, the rest on
   the CPU; "auto" already sizes them to the context, so there is nothing to step.
4. memory fraction: the largest --mem-fraction-static (0.50-0.90, the highest measured to start on the
   emulated 16 GB card, benchmarks/calibration/fp8-f090-16g.json) that fits; then the context again at that
   fraction if the fraction alone was not enough.
Each step is kept only if the plan after it is closer to fitting (it never makes the plan worse), and each is
re-planned by the planner, never estimated.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from vramkit.core.model.spec import ModelSpec
from vramkit.core.plan.knobs import Knobs, by_name
from vramkit.core.plan.planner import Engine, Plan, Target, cell_is_fp8, plan
from vramkit.units import bytes2human

STEP_ORDER = ("kv_dtype", "context", "kt_num_gpu_experts", "mem_fraction")
# what the GPU's memory decides; the rest (host RAM, the CPU, tensor parallel, what SGLang cannot run) no step
# here changes, and `vramkit up` has its own check for each
GPU_KINDS = frozenset({"weights", "kv", "concurrency", "headroom"})
CONTEXT_STEP = 1024          # tokens: the context steps down in multiples of this
MIN_CONTEXT = 1024
FRACTIONS = tuple(f / 100 for f in range(90, 49, -1))   # largest first
STEP_KV_DTYPE = "fp8_e5m2"


@dataclass(frozen=True)
class Step:
    knob: str
    before: Any
    after: Any
    cost: str                # what the change costs, in words and numbers

    def text(self) -> str:
        flag = by_name()[self.knob].cli_flag
        return f"{flag} {_show(self.before)} -> {_show(self.after)}: {self.cost}"


@dataclass(frozen=True)
class AutoFit:
    asked: Plan              # the asked knobs at the memory measured (does not fit)
    plan: Plan               # the stepped-down plan (fits)
    steps: tuple[Step, ...]

    @property
    def knobs(self) -> dict[str, Any]:
        """The changed knobs, as a request's knob values."""
        return {s.knob: s.after for s in self.steps}

    def lines(self) -> list[str]:
        """What changed and what it costs, for the terminal and the run record."""
        a, p = self.asked, self.plan
        out = [s.text() for s in self.steps]
        speed = ""
        if a.decode_tok_s is not None and p.decode_tok_s is not None:
            speed = f"; single-stream decode {a.decode_tok_s:.1f} -> {p.decode_tok_s:.1f} tok/s"
        out.append(f"in all: longest prompt < {a.knobs.context:,} asked -> < {p.max_request_tokens:,}; KV pool "
                   f"{a.kv_pool_tokens:,} -> {p.kv_pool_tokens:,} tokens; peak {bytes2human(a.peak_vram_bytes)} -> "
                   f"{bytes2human(p.peak_vram_bytes)} of {bytes2human(p.free_at_start_bytes)} free at start{speed}")
        return out


def _show(v: Any) -> str:
    return f"{v:,}" if isinstance(v, int) and not isinstance(v, bool) else str(v)


def gpu_reasons(p: Plan) -> list[str]:
    return [r for r in p.reasons if getattr(r, "kind", None) in GPU_KINDS]


def gpu_fits(p: Plan) -> bool:
    return not gpu_reasons(p)


def step_down(model: ModelSpec, target: Target, knobs: Knobs, engine: Engine) -> AutoFit | None:
    """The largest configuration in STEP_ORDER that fits the target's GPU memory; None when none does (or when
    the asked one fits: nothing to do)."""
    def planned(k: Knobs) -> Plan:
        return plan(model, target, k, engine, with_alternatives=False)

    asked = planned(knobs)
    if gpu_fits(asked):
        return None
    steps: list[Step] = []
    cur, cur_plan = knobs, asked

    def take(knob: str, value: Any, p: Plan, cost: str) -> None:
        nonlocal cur, cur_plan
        steps.append(Step(knob, getattr(cur, knob), value, cost))
        cur, cur_plan = replace(cur, **{knob: value}), p

    # 1. KV dtype
    if not cell_is_fp8(cur.kv_dtype):
        p = planned(replace(cur, kv_dtype=STEP_KV_DTYPE))
        if p.kv_pool_tokens > cur_plan.kv_pool_tokens:
            take("kv_dtype", STEP_KV_DTYPE, p, f"half the KV bytes per token ({cur_plan.kv_bytes_per_token:,} -> "
                 f"{p.kv_bytes_per_token:,} B); keys and values in 8 bits, a small accuracy risk")
    # 2. context
    if not gpu_fits(cur_plan):
        _context_step(cur, planned, take)
    # 3. GPU experts (a fixed count in the hybrid MoE mode)
    if not gpu_fits(cur_plan) and cur.kt_method and isinstance(cur.kt_num_gpu_experts, int):
        n = _largest(0, cur.kt_num_gpu_experts - 1, 1, lambda v: gpu_fits(planned(replace(cur, kt_num_gpu_experts=v))))
        if n is not None:
            p = planned(replace(cur, kt_num_gpu_experts=n))
            was = cur_plan.hybrid.decode_tok_s if cur_plan.hybrid else None
            now = p.hybrid.decode_tok_s if p.hybrid else None
            take("kt_num_gpu_experts", n, p, "more experts computed by the CPU from host RAM" + (
                f": decode ~{was:.1f} -> ~{now:.1f} tok/s (an estimate)" if was and now else ""))
    # 4. memory fraction, then the context again at the best fraction
    if not gpu_fits(cur_plan):
        frac = next((f for f in FRACTIONS if gpu_fits(planned(replace(cur, mem_fraction=f)))), None)
        if frac is None:
            best = _best_fraction(cur, planned)
            if best is not None and best != cur_plan.knobs.mem_fraction:
                p = planned(replace(cur, mem_fraction=best))
                if p.kv_pool_tokens > 0:
                    take("mem_fraction", best, p, _fraction_cost(cur_plan, p))
                    _context_step(cur, planned, take)
        else:
            take("mem_fraction", frac, planned(replace(cur, mem_fraction=frac)),
                 _fraction_cost(cur_plan, planned(replace(cur, mem_fraction=frac))))
    if not gpu_fits(cur_plan):
        return None
    return AutoFit(asked=asked, plan=cur_plan, steps=tuple(steps))


def _fraction_cost(before: Plan, after: Plan) -> str:
    return (f"KV pool {before.kv_pool_tokens:,} -> {after.kv_pool_tokens:,} tokens; "
            f"{bytes2human(after.startup_free_bytes)} left free after start-up for activations "
            f"(was {bytes2human(before.startup_free_bytes)})")


def _best_fraction(k: Knobs, planned: Callable[[Knobs], Plan]) -> float | None:
    """The fraction that leaves the most KV pool while the runtime margin holds (None: no fraction keeps it)."""
    for f in FRACTIONS:
        p = planned(replace(k, mem_fraction=f))
        if p.kv_pool_tokens > 0 and not any(getattr(r, "kind", None) in ("headroom", "weights") for r in p.reasons):
            return f
    return None


def _context_step(k: Knobs, planned: Callable[[Knobs], Plan], take: Callable[[str, Any, Plan, str], None]) -> None:
    """The longest context below the asked one that fits (a multiple of CONTEXT_STEP); nothing when none does."""
    steps = k.context // CONTEXT_STEP
    best = _largest(MIN_CONTEXT // CONTEXT_STEP, steps if k.context % CONTEXT_STEP else steps - 1, 1,
                    lambda n: gpu_fits(planned(replace(k, context=n * CONTEXT_STEP))))
    if best is None:
        return
    ctx = best * CONTEXT_STEP
    take("context", ctx, planned(replace(k, context=ctx)),
         f"requests of more than {ctx:,} tokens (prompt + output) are refused")


def _largest(lo: int, hi: int, step: int, ok: Callable[[int], bool]) -> int | None:
    """The largest n in [lo, hi] with ok(n), ok being monotone (true below some n): binary search."""
    if hi < lo or not ok(lo):
        return None
    while lo < hi:
        mid = (lo + hi + step) // 2
        if ok(mid):
            lo = mid
        else:
            hi = mid - step
    return lo
