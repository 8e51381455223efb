"""A GPTQ-Int4 Linear repacked into kt-kernel's RAWINT4 form (vramkit/core/model/kt_repack.py): value for value but
for the -8s the kernel computes wrong, and the one-line refusals for the GPTQ checkpoints it has no form for."""
from __future__ import annotations

import pytest

from vramkit.core.model import kt_repack
from vramkit.errors import Exit, VramkitError

torch = pytest.importorskip("torch")

K, N, GROUP = 256, 64, 128


def gptq(seed: int = 0) -> tuple:
    """A GPTQ Linear as AutoGPTQ writes it: every nibble 0..15 drawn (so -8s among them), fp16 scales."""
    g = torch.Generator().manual_seed(seed)
    nib = torch.randint(0, 16, (K, N), generator=g, dtype=torch.int32)
    qweight = kt_repack.pack(nib, 0)                                      # [K/8, N], along K
    scales = (torch.rand(K // GROUP, N, generator=g) * 0.01 + 0.001).to(torch.float16)
    return nib, qweight, scales


def test_repack_keeps_every_value_but_the_minus_eights():
    nib, qweight, scales = gptq()
    packed, scale, raised = kt_repack.gptq_to_rawint4(qweight, scales, GROUP)
    assert packed.shape == (N, K // 8) and packed.dtype == torch.int32
    assert scale.shape == (N, K // 32) and scale.dtype == torch.bfloat16
    minus8 = (nib == 0).T                                                    # [N, K]
    assert raised == int(minus8.sum()) > 0
    got, want = kt_repack.rawint4_values(packed, scale), kt_repack.gptq_values(qweight, scales, GROUP)
    step = scales.float().T.repeat_interleave(GROUP, 1)                      # each weight's group scale
    # the scales' fp16 -> bf16 rounding: at most 2^-9 of a value
    assert torch.allclose(got[~minus8], want[~minus8], rtol=2 ** -8, atol=0)
    # a -8 becomes -7: one step of its group's scale up (and -7 x the bf16 rounding of the scale: <= 7 x 2^-9)
    assert torch.allclose((got - want)[minus8], step[minus8], rtol=2 ** -5, atol=0)


def test_floor_zero_keeps_the_minus_eights():
    nib, qweight, scales = gptq(1)
    packed, scale, raised = kt_repack.gptq_to_rawint4(qweight, scales, GROUP, floor=0)
    assert raised == 0
    assert torch.allclose(kt_repack.rawint4_values(packed, scale), kt_repack.gptq_values(qweight, scales, GROUP),
                          rtol=2 ** -8, atol=0)


def test_wider_out_groups_repeat_the_scale():
    _, qweight, scales = gptq(2)
    _, s32, _ = kt_repack.gptq_to_rawint4(qweight, scales, GROUP, 32)
    _, s128, _ = kt_repack.gptq_to_rawint4(qweight, scales, GROUP, 128)
    assert torch.equal(s32, s128.repeat_interleave(4, 1))


def test_act_order_g_idx_is_refused():
    _, qweight, scales = gptq()
    g_idx = (torch.arange(K) // GROUP).flip(0).to(torch.int32)
    with pytest.raises(VramkitError) as e:
        kt_repack.gptq_to_rawint4(qweight, scales, GROUP, g_idx=g_idx)
    assert e.value.code == Exit.UNSUPPORTED_MODEL and "act-order" in e.value.what
    kt_repack.gptq_to_rawint4(qweight, scales, GROUP, g_idx=(torch.arange(K) // GROUP).to(torch.int32))


def test_mismatched_tensors_are_one_line():
    _, qweight, scales = gptq()
    with pytest.raises(VramkitError) as e:
        kt_repack.gptq_to_rawint4(qweight, scales[:1], GROUP)
    assert e.value.code == Exit.BAD_INPUT and "\n" not in e.value.line()


@pytest.mark.parametrize("quant, word", [
    ({"quant_method": "gptq", "bits": 8, "group_size": 128}, "8 bits"),
    ({"quant_method": "awq", "bits": 4, "group_size": 128}, "awq"),
    ({"quant_method": "gptq", "bits": 4, "group_size": 128, "sym": False}, "zero points"),
    ({"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": True}, "act-order"),
    ({"quant_method": "gptq", "bits": 4, "group_size": 48}, "group size 48"),
    ({"quant_method": "gptq", "bits": 4, "group_size": -1}, "group size -1"),
])
def test_checkpoints_without_a_rawint4_form_are_refused(quant, word):
    with pytest.raises(VramkitError) as e:
        kt_repack.check_gptq(quant, "ckpt")
    assert e.value.code == Exit.UNSUPPORTED_MODEL and word in e.value.what


def test_qwen_gptq_config_is_taken():
    assert kt_repack.check_gptq({"quant_method": "gptq", "bits": 4, "group_size": 128, "sym": True,
                                 "desc_act": False}, "ckpt") == 128


def test_a_layer_at_once_is_each_expert_alone():
    experts = [gptq(s) for s in range(3)]
    packed, scale, raised = kt_repack.gptq_experts_to_rawint4([q for _, q, _ in experts], [s for _, _, s in experts],
                                                              GROUP, [None, (torch.arange(K) // GROUP), None])
    assert raised == sum(int((n == 0).sum()) for n, _, _ in experts)
    for (_, q, s), p, sc in zip(experts, packed, scale, strict=True):
        one = kt_repack.gptq_to_rawint4(q, s, GROUP)
        assert torch.equal(p, one[0]) and torch.equal(sc, one[1])
    with pytest.raises(VramkitError):
        kt_repack.gptq_experts_to_rawint4([experts[0][1]], [experts[0][2]], GROUP, [torch.zeros(K, dtype=torch.int32)])


def test_the_writer_repacks_a_gptq_folder_and_refuses_others_in_one_line(tmp_path, capsys):
    """tools/make_random_checkpoint.py --kt-layout RAWINT4 --from: a GPTQ folder's experts, or one line and exit 21."""
    import json
    import sys

    from safetensors.torch import load_file, save_file

    from vramkit import catalog
    sys.path.insert(0, str(catalog.CONFIG_DIR.parent / "tools"))
    from make_random_checkpoint import main
    cfg = {"num_hidden_layers": 1, "num_experts": 2, "hidden_size": K, "moe_intermediate_size": N,
           "quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": GROUP, "sym": True}}
    src = tmp_path / "gptq"
    src.mkdir()
    (src / "config.json").write_text(json.dumps(cfg))
    tensors, nibs = {}, {}
    for e in range(2):
        for proj, (n, k) in (("gate", (N, K)), ("up", (N, K)), ("down", (K, N))):
            nib = torch.randint(0, 16, (k, n), generator=torch.Generator().manual_seed(e), dtype=torch.int32)
            name = f"model.layers.0.mlp.experts.{e}.{proj}_proj"
            tensors[name + ".qweight"] = kt_repack.pack(nib, 0)
            tensors[name + ".scales"] = torch.full((k // GROUP, n), 0.01, dtype=torch.float16)
            nibs[name] = nib
    save_file(tensors, str(src / "model.safetensors"))
    out = tmp_path / "kt"
    assert main([str(src), str(out), "--kt-layout", "RAWINT4", "--from", str(src)]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["raised_from_minus_8"] == sum(int((n == 0).sum()) for n in nibs.values())
    got = load_file(str(out / "rawint4-layer-000.safetensors"))
    for name, nib in nibs.items():
        assert torch.equal(kt_repack.unpack(got[name + ".weight_packed"], 1), nib.T.clamp_min(1))
    # a folder without the expert tensors, and an FP8 config: one line each, exit 21 (unsupported model), no traceback
    (src / "model.safetensors").unlink()
    save_file({"x": torch.zeros(1)}, str(src / "model.safetensors"))
    assert main([str(src), str(tmp_path / "kt2"), "--kt-layout", "RAWINT4", "--from", str(src)]) == Exit.UNSUPPORTED_MODEL
    err = capsys.readouterr().err
    assert "no tensor model.layers.0.mlp.experts.0.gate_proj.qweight" in err and err.count("\n") == 1
    assert not (tmp_path / "kt2").exists()                  # nothing written before the check
    (src / "config.json").write_text(json.dumps(cfg | {"quantization_config": {"quant_method": "fp8"}}))
    assert main([str(src), str(tmp_path / "kt3"), "--kt-layout", "RAWINT4", "--from", str(src)]) == Exit.UNSUPPORTED_MODEL
    assert "RAWINT4 is made from a 4-bit GPTQ checkpoint" in capsys.readouterr().err


def test_pack_along_either_axis_is_unpack_undone():
    nib, qweight, _ = gptq(4)
    assert torch.equal(kt_repack.unpack(qweight, 0), nib)                    # GPTQ: along K, the first axis
    assert torch.equal(kt_repack.pack(nib.T), kt_repack.pack(nib, 0).T)      # RAWINT4: along a row
    assert torch.equal(kt_repack.unpack(kt_repack.pack(nib.T), 1), nib.T)
