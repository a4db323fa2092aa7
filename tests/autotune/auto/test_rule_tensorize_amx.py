"""The tensorize rule's AMX sketches: on a target with AMX an int8 (u8 x s8 -> s32) or bf16 ->
fp32 matmul or batched matmul is offered einloop's AMX intrinsics (A and B packed into the tiles'
layouts, 32 x 32 accumulator blocks), one per K depth, next to the others; extents the blocks do
not fit are skipped with the reason, never raised; the seeds are exact where the host runs AMX
and have the instructions in their assembly for ``llvm -mcpu=sapphirerapids`` everywhere."""
import re

import numpy as np
import pytest

from einloop import build, lower, te
from einloop.autotune.space.sketch import MachineModel, generate_space
from einloop.autotune.space.sketch.rules import KnobKind, knob_name
from einloop.autotune.space.sketch.seeds import config_from
from einloop.codegen.jit import emit_optimised
from einloop.codegen.target import Target
from einloop.runtime import amx as amx_runtime
from einloop.schedule.steps import StepKind

from test_rule_tensorize import (batched_u8s8, matmul_u8s8, random_operands, reference,
                                 tensorize_values)

pytestmark = pytest.mark.skipif(not Target.parse("llvm").is_x86, reason="x86-64 only")

SPR = "llvm -mcpu=sapphirerapids"


def host_runs(unit):
    t = Target.parse("llvm")
    return t.has_feature("amx-tile") and t.has_feature(unit) and amx_runtime.request() is None


def matmul_bf16(M, N, K, batch=None):
    lead = () if batch is None else (batch,)
    A = te.placeholder(lead + (M, K), "bfloat16", name="A")
    B = te.placeholder(lead + (K, N), "bfloat16", name="B")
    k = te.reduce_axis((0, K), name="k")
    if batch is None:
        body = lambda i, j: te.sum(A[i, k].astype("float32") * B[k, j].astype("float32"), axis=k)
    else:
        body = lambda b, i, j: te.sum(A[b, i, k].astype("float32") * B[b, k, j].astype("float32"),
                                      axis=k)
    return [A, B], te.compute(lead + (M, N), body, name="C")


def amx_values(sp):
    return [v for v in tensorize_values(sp) if v.startswith("x86.amx.")]


def _amx_seeds(sp, n=3):
    out = []
    for c in sp.seed_configs(n):
        steps = sp.steps(c)
        if any(st.kind is StepKind.TENSORIZE and "amx" in str(st) for st in steps):
            out.append(c)
    return out


def test_spr_offers_amx_int8_first_with_skips_counted():
    ins, C = matmul_u8s8(64, 96, 256)
    sp = generate_space([C], MachineModel.of(SPR))
    vals = tensorize_values(sp)
    assert vals[1:3] == ["x86.amx.u8s8_i32_32x32x128", "x86.amx.u8s8_i32_32x32x256"]
    assert "x86.avx512vnni.u8s8_i32x16" in vals          # the others stay offered
    skipped = {intrin: why for _, intrin, why in sp.tensorize_skipped}
    assert "multiples of 32" in skipped["x86.amx.u8s8_i32_32x32x512"]   # K 256 < 512
    assert "float32" in skipped["x86.amx.bf16_f32_32x32x64"]           # an int8 stage
    assert _amx_seeds(sp)


def test_spr_offers_amx_bf16():
    ins, C = matmul_bf16(32, 64, 128)
    sp = generate_space([C], MachineModel.of(SPR))
    assert amx_values(sp) == ["x86.amx.bf16_f32_32x32x64", "x86.amx.bf16_f32_32x32x128"]


def test_extents_the_blocks_do_not_fit_are_skipped():
    ins, C = matmul_u8s8(40, 48, 64)
    sp = generate_space([C], MachineModel.of(SPR))
    assert amx_values(sp) == []
    reasons = [why for _, intrin, why in sp.tensorize_skipped if "amx.u8s8" in intrin]
    assert reasons and all("multiples of 32" in why for why in reasons)


def test_no_amx_without_the_feature():
    ins, C = matmul_u8s8(64, 64, 128)
    sp = generate_space([C], MachineModel.of("llvm -mcpu=znver3"))
    assert amx_values(sp) == []
    assert not any("amx" in intrin for _, intrin, _ in sp.tensorize_skipped)


@pytest.mark.parametrize("case", ["matmul", "batched"])
def test_seed_assembly_for_sapphirerapids(case):
    ins, C = matmul_u8s8(64, 64, 128) if case == "matmul" else batched_u8s8(2, 32, 64, 128)
    sp = generate_space([C], MachineModel.of(SPR))
    (c, *_) = _amx_seeds(sp)
    t = Target.parse(SPR)
    mod, *_ = emit_optimised(lower(sp.schedule(c), ins + [C]), t)
    asm = t.target_machine().emit_assembly(mod)
    assert re.search(r"\btdpbusd\s+%tmm", asm) and re.search(r"\bldtilecfg\b", asm)


@pytest.mark.parametrize("case", ["matmul", "batched"])
def test_int8_seeds_are_exact_on_amx(case):
    if not host_runs("amx-int8"):
        pytest.skip("the host has no AMX-INT8 (or Linux refuses it)")
    ins, C = matmul_u8s8(64, 96, 256) if case == "matmul" else batched_u8s8(2, 32, 64, 128)
    sp = generate_space([C], MachineModel.of("llvm"))
    seeds = _amx_seeds(sp)
    assert seeds
    for c in seeds:
        _exact_with_tdpbusd(sp, c, ins, C)


def _exact_with_tdpbusd(sp, config, ins, C):
    """*config* of *sp* built: its code holds ``tdpbusd`` and computes the int8 matmul exactly
    (every output written: the output starts at 7)."""
    f = build(sp.schedule(config), ins + [C])
    assert "tdpbusd" in f.get_source("asm")
    a, b = random_operands(ins)
    out = np.full(C.shape, 7, np.int32)
    f(a, b, out)
    np.testing.assert_array_equal(out, reference(a, b))


@pytest.mark.parametrize("batch", [None, 2])
def test_bf16_seeds_on_amx(batch):
    if not host_runs("amx-bf16"):
        pytest.skip("the host has no AMX-BF16 (or Linux refuses it)")
    import ml_dtypes
    ins, C = matmul_bf16(32, 64, 128, batch)
    sp = generate_space([C], MachineModel.of("llvm"))
    seeds = _amx_seeds(sp)
    assert seeds
    rng = np.random.default_rng(1)
    a = rng.standard_normal(ins[0].shape, dtype=np.float32).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal(ins[1].shape, dtype=np.float32).astype(ml_dtypes.bfloat16)
    ref = np.matmul(a.astype(np.float32), b.astype(np.float32))
    for c in seeds:
        f = build(sp.schedule(c), ins + [C])
        assert "tdpbf16ps" in f.get_source("asm")
        out = np.empty(C.shape, np.float32)
        f(a, b, out)
        np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-3)


@pytest.mark.parametrize("order, panel", [("cols", 4), ("rows", 4), ("cols", 1)])
def test_block_orders_and_panels_are_exact_on_amx(order, panel):
    """Each tile order and column panel of the AMX sketch (K depth 1024 bytes: one call per
    block) computes the matmul exactly."""
    if not host_runs("amx-int8"):
        pytest.skip("the host has no AMX-INT8 (or Linux refuses it)")
    ins, C = matmul_u8s8(64, 256, 1024)
    sp = generate_space([C], MachineModel.of("llvm"))
    c = config_from(sp, {knob_name(KnobKind.TENSORIZE, "C"): "x86.amx.u8s8_i32_32x32x1024",
                         knob_name(KnobKind.TILE_ORDER, "C"): order,
                         knob_name(KnobKind.TENSOR_PANEL, "C"): panel})
    _exact_with_tdpbusd(sp, c, ins, C)


def test_int8_matmul_with_a_fused_requantize_is_exact_on_amx():
    """The AMX accumulator computed inside the fused requantize's blocks (no cache_write)."""
    if not host_runs("amx-int8"):
        pytest.skip("the host has no AMX-INT8 (or Linux refuses it)")
    from test_rule_tensorize_conv import requantize, requantize_ref
    ins, C = matmul_u8s8(64, 64, 128)
    Q = requantize(C)
    sp = generate_space([Q], MachineModel.of("llvm"))
    seeds = _amx_seeds(sp)
    assert seeds
    a, b = random_operands(ins)
    for c in seeds:
        assert not any(st.kind is StepKind.CACHE_WRITE for st in sp.steps(c))
        f = build(sp.schedule(c), ins + [Q])
        assert "tdpbusd" in f.get_source("asm")
        got = np.full(Q.shape, 5, np.int8)
        f(a, b, got)
        np.testing.assert_array_equal(got, requantize_ref(reference(a, b)))


def _bf16_attention(S=64, B=2, H=2, D=64):
    """An attention block in bfloat16 reading Q, K and V through views of one qkv tensor (as
    the torch.compile backend declares nn.TransformerEncoderLayer's): both products are
    batched bf16 matmuls whose operands are views, P a computed softmax."""
    from einloop import nn
    qkv = te.placeholder((3, S, B, H * D), "bfloat16", name="qkv")

    def heads(n, name):
        x = nn.squeeze(nn.slice_axis(qkv, 0, n, n + 1, name=f"{name}_slice"), 0,
                       name=f"{name}_squeeze")
        x = nn.reshape(x, (S, B * H, D), name=f"{name}_reshape")
        return nn.permute(x, (1, 0, 2), name=f"{name}_permute")
    q, k, v = (heads(n, name) for n, name in enumerate("qkv"))
    scores = nn.matmul(q, nn.permute(k, (0, 2, 1), name="kt"), name="scores")
    return [qkv, nn.matmul(nn.softmax(scores, -1), v, name="out")]


@pytest.mark.parametrize("target", [SPR, "llvm"])
def test_bf16_attention_products_read_through_views_take_amx(target):
    """The AMX sketch packs both operands itself, so operands that are views (inlined into its
    copies) and a computed softmax (computed at the root, where the copy reads it) do not keep
    it from the attention's two products; the first seed takes AMX for both, and computes what
    the default schedule does."""
    from einloop import create_schedule
    from einloop.autotune.task.auto import AutoTask
    if target == "llvm" and not host_runs("amx-bf16"):
        pytest.skip("the host has no AMX-BF16 (or Linux refuses it)")
    tensors = _bf16_attention()
    task = AutoTask.of_tensors(tensors, target, 2)
    seed = task.seed_configs(1)[0]
    chosen = [v.val for k, v in seed.entities.items() if k.endswith(".tensorize")]
    assert len(chosen) == 2 and all(c.startswith("x86.amx.bf16") for c in chosen), chosen
    s, args = task.instantiate(seed)
    if target == SPR:
        t = Target.parse(SPR)
        mod, *_ = emit_optimised(lower(s, args), t)
        assert len(re.findall(r"\btdpbf16ps\b", t.target_machine().emit_assembly(mod))) >= 8
        return
    import ml_dtypes
    x = np.random.default_rng(0).standard_normal((3, 64, 2, 128)).astype(ml_dtypes.bfloat16)
    got = np.empty((4, 64, 64), ml_dtypes.bfloat16)
    want = np.empty_like(got)
    build(s, args)(x, got)
    build(create_schedule(tensors[-1]), tensors)(x, want)
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=2e-2,
                               atol=2e-2)


@pytest.mark.parametrize("shape", ["one data axis", "weight read on two dims"])
def test_stages_the_amx_sketch_cannot_shape_are_skipped_not_a_rule_failure(shape):
    """The AMX sketch reads views through its own copies, but still needs the loop shape
    every tensorized sketch needs: a bf16 reduction without a row axis, or whose weight is
    not read along its columns alone, is skipped with the reason (it was an IndexError that
    relaxed the space, a RuleFailureWarning)."""
    import warnings
    from einloop.autotune.space.sketch.rules import RuleKind
    k = te.reduce_axis((0, 64), name="k")
    if shape == "one data axis":
        A = te.placeholder((64,), "bfloat16", name="A")
        B = te.placeholder((64, 96), "bfloat16", name="B")
        C = te.compute((96,), lambda j: te.sum(A[k].astype("float32") * B[k, j].astype(
            "float32"), axis=k), name="C")
    else:
        A = te.placeholder((64, 64), "bfloat16", name="A")
        B = te.placeholder((64, 96, 96), "bfloat16", name="B")
        C = te.compute((64, 96), lambda i, j: te.sum(A[i, k].astype("float32") * B[
            k, j, j].astype("float32"), axis=k), name="C")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sp = generate_space([C], target=SPR)
    assert RuleKind.MULTI_LEVEL_TILING in sp.fired["C"]
    reasons = {why for _, intrin, why in sp.tensorize_skipped if intrin.startswith("x86.amx.")}
    assert len(reasons) == 1 and re.search(r"needs a row and a lanes data axis|no operand of C "
                                           r"is indexed by its last data axis", reasons.pop())
