"""A GPTQ-Int4 checkpoint's experts in kt-kernel's group-wise int4 form (RAWINT4), value for value but -8 (issue 18).

kt-kernel 0.5.1's RAWINT4 method (AMXInt4_KGroup_MOE, written for Kimi-K2's compressed-tensors int4) reads per
expert matrix [N out, K in]:
- ``weight_packed`` int32 [N, K/8]: 8 consecutive values of a row per int32, lowest nibble first, each value
  stored plus 8 (the nibble 8 is 0);
- ``weight_scale`` bf16 [N, K/group]: one scale per group of K, the group read from the scales' width.
A symmetric GPTQ checkpoint (AutoGPTQ's layout, as SGLang reads it) holds per Linear:
- ``qweight`` int32 [K/8, N]: 8 consecutive values of a column per int32, lowest nibble first, stored plus 8;
- ``scales`` fp16 [K/group, N];
- ``qzeros``, which SGLang ignores for ``sym: true`` (the zero is 8: marlin's uint4b8 type), and ``g_idx``,
  trivial without act-order.
So the same nibbles, transposed and re-packed along K, with the scales transposed: w = (q - 8) x scale in both.
Two changes of value:
- kt-kernel 0.5.1's kernel computes the nibble 0 (-8) wrong, in its AMX and AVX-512 builds alike (a layer's
  output 65 % off with 0.35 % of the weights at -8, 1.3 % with none; benchmarks/results/gpu/kt-rawint4/), and
  symmetric GPTQ uses -8 (AutoGPTQ: round(w / scale) + 8 with scale = 2 max|w| / 15). The repack raises it to -7
  (`NIBBLE_FLOOR`): those weights move by one step of their group's scale;
- the scales' rounding from fp16 to bf16 (8 bits of mantissa against 11: at most 2^-9 of a group's scale).
Pure: torch tensors in, torch tensors out; imported only by the tools that write or check the files (torch at import).
"""
from __future__ import annotations

from typing import Any

import torch

from vramkit.core.model.checkpoint import RAWINT4_GROUP, rawint4_problem
from vramkit.errors import Exit, VramkitError

NIBBLES = 8                     # int4 values per int32
NIBBLE_FLOOR = 1                # the lowest nibble kt-kernel's RAWINT4 kernel computes right (-7)


def unpack(packed: torch.Tensor, dim: int) -> torch.Tensor:
    """int32 -> its 8 nibbles (0..15) along a new axis after `dim`, lowest first, merged into `dim`."""
    parts = torch.stack([(packed >> (4 * j)) & 15 for j in range(NIBBLES)], dim + 1)
    shape = list(packed.shape)
    shape[dim] *= NIBBLES
    return parts.reshape(shape)


def pack(values: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """unpack undone: nibbles (0..15) -> int32, 8 consecutive values along `dim` each, lowest nibble first (`dim`
    shrinks 8x; RAWINT4 packs along a row's last axis, GPTQ's qweight along its first)."""
    v = values.to(torch.int32).movedim(dim, -1)
    v = v.reshape(*v.shape[:-1], v.shape[-1] // NIBBLES, NIBBLES)
    out = torch.zeros(v.shape[:-1], dtype=torch.int32, device=v.device)
    for j in range(NIBBLES):
        out |= v[..., j] << (4 * j)
    return out.movedim(-1, dim).contiguous()


def check_gptq(quant: dict[str, Any], where: str) -> int:
    """The group size of a GPTQ quantization_config RAWINT4 reproduces; one line and exit 21 (unsupported model)
    otherwise (checkpoint.rawint4_problem, the planner's rule too)."""
    group = int(quant.get("group_size", -1))
    why = rawint4_problem(str(quant.get("quant_method", "")).lower(), int(quant.get("bits", 0)), group,
                          bool(quant.get("sym", True)), bool(quant.get("desc_act", False)))
    if why is not None:
        raise VramkitError(f"{where}: {why}", "use --kt-layout AMXINT8 from the bf16 or FP8 checkpoint",
                           Exit.UNSUPPORTED_MODEL)
    return group


def _check_g_idx(g_idx: torch.Tensor | None, k: int, group: int) -> None:
    if g_idx is not None and not torch.equal(g_idx.to(torch.int64), torch.arange(k) // group):
        raise VramkitError("a GPTQ g_idx out of group order (act-order) has no RAWINT4 form",
                           "use --kt-layout AMXINT8 from the bf16 or FP8 checkpoint", Exit.UNSUPPORTED_MODEL)


def gptq_to_rawint4(qweight: torch.Tensor, scales: torch.Tensor, group: int, out_group: int = RAWINT4_GROUP,
                    g_idx: torch.Tensor | None = None, floor: int = NIBBLE_FLOOR
                    ) -> tuple[torch.Tensor, torch.Tensor, int]:
    """One Linear: GPTQ (qweight [K/8, N] int32, scales [K/group, N]) -> RAWINT4 (weight_packed [N, K/8] int32,
    weight_scale [N, K/out_group] bf16), each scale repeated over the out_group-wide groups inside its group, and
    how many weights were raised from -8 to -7 (`floor` 0 keeps them: the kernel check's control)."""
    k = qweight.shape[0] * NIBBLES
    if scales.shape != (k // group, qweight.shape[1]) or group % out_group:
        raise VramkitError(f"GPTQ tensors qweight {tuple(qweight.shape)} / scales {tuple(scales.shape)} do not "
                           f"match group {group}", "check the checkpoint's quantization_config", Exit.BAD_INPUT)
    _check_g_idx(g_idx, k, group)
    nibbles = unpack(qweight, 0)                                  # [K, N]
    raised = int((nibbles < floor).sum())
    packed = pack(nibbles.clamp_min(floor).T)                     # [N, K/8]
    scale = scales.T.float().repeat_interleave(group // out_group, dim=1)
    return packed, scale.to(torch.bfloat16).contiguous(), raised


def gptq_experts_to_rawint4(qweights: list[torch.Tensor], scales: list[torch.Tensor], group: int,
                            g_idxs: list[torch.Tensor | None] | None = None, floor: int = NIBBLE_FLOOR
                            ) -> tuple[list[torch.Tensor], list[torch.Tensor], int]:
    """gptq_to_rawint4 over one projection of every expert of a layer at once (their columns side by side: one
    unpack and pack instead of one per expert); per expert (weight_packed, weight_scale), and the -8s raised."""
    for g_idx in g_idxs or []:
        _check_g_idx(g_idx, qweights[0].shape[0] * NIBBLES, group)
    packed, scale, raised = gptq_to_rawint4(torch.cat(qweights, 1), torch.cat(scales, 1), group, floor=floor)
    n = [q.shape[1] for q in qweights]
    return [t.contiguous() for t in packed.split(n)], [t.contiguous() for t in scale.split(n)], raised


def rawint4_values(packed: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """The weights a RAWINT4 pair stands for, f32 [N, K] (tests and checks)."""
    q = unpack(packed, 1).float() - 8                              # [N, K]
    group = q.shape[1] // scale.shape[1]
    return (q.view(q.shape[0], -1, group) * scale.float()[..., None]).reshape(q.shape)


def gptq_values(qweight: torch.Tensor, scales: torch.Tensor, group: int) -> torch.Tensor:
    """The weights a symmetric GPTQ pair stands for as SGLang computes them, f32 [N, K]."""
    q = unpack(qweight, 0).float() - 8                             # [K, N]
    return (q.view(-1, group, q.shape[1]) * scales.float()[:, None, :]).reshape(q.shape).T
