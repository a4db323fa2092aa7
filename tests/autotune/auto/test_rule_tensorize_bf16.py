"""The tensorize rule on bf16 x bf16 -> f32 reductions: on a target with AVX512-BF16 the
matmul (and batched matmul) gets sketches tensorized with ``vdpbf16ps``, each within the
float32 sum's error bound of the float64 product of the same inputs where the host has the
instruction (compiled for ``-mcpu=sapphirerapids`` on any host); a target without it offers
none, and no int8 intrinsic matches a bf16 reduction."""
import re

import ml_dtypes
import numpy as np
import pytest

from einloop import autotune, build, te
from einloop.autotune.space.sketch import RuleKind, generate_space
from einloop.codegen.target import Target
from einloop.schedule.steps import StepKind

SPR = "llvm -mcpu=sapphirerapids"
BF16_16, BF16_8 = "x86.avx512bf16.bf16_f32x16", "x86.avx512bf16.bf16_f32x8"
HOST_BF16 = all(Target.parse("llvm").has_feature(f) for f in ("avx512bf16", "avx512vl"))
needs_bf16 = pytest.mark.skipif(not HOST_BF16,
                                reason="the host CPU has no AVX512-BF16 (compile-checked only)")


def matmul_bf16(M, N, K, batch=()):
    A = te.placeholder((*batch, M, K), "bfloat16", name="A")
    B = te.placeholder((*batch, K, N), "bfloat16", name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((*batch, M, N), lambda *ix: te.sum(
        A[(*ix[:-1], k)].astype("float32") * B[(*ix[:-2], k, ix[-1])].astype("float32"),
        axis=k), name="C")
    return [A, B], C


def tensorize_values(sp):
    knob = sp.config_space.knobs.get("C.tensorize")
    return [] if knob is None else [e.val for e in knob.entities]


def tensorized_seeds(sp, n=3):
    return [c for c in sp.seed_configs(n)
            if StepKind.TENSORIZE in [st.kind for st in sp.steps(c)]]


def run_close(s, ins, C):
    """Run *s* on random bf16 operands; the result within K * 2**-24 * sum |products| of the
    float64 product (each bf16 product is exact in float32: only the adds round)."""
    f = build(s, ins + [C])
    rng = np.random.default_rng(1)
    a, b = (rng.standard_normal(t.shape).astype(np.float32).astype(ml_dtypes.bfloat16)
            for t in ins)
    c = np.full(C.shape, np.nan, np.float32)
    f(a, b, c)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    bound = a.shape[-1] * 2.0 ** -24 * np.matmul(np.abs(a64), np.abs(b64))
    assert (np.abs(c - np.matmul(a64, b64)) <= bound).all()
    return f


@pytest.mark.parametrize("batch", [(), (2,)], ids=["matmul", "batched"])
def test_a_target_with_avx512bf16_offers_vdpbf16ps_and_seeds_it_first(batch):
    ins, C = matmul_bf16(9, 48, 16, batch)
    sp = generate_space(C, SPR)
    assert RuleKind.TENSORIZE in sp.fired["C"]
    assert tensorize_values(sp) == ["none", BF16_16, BF16_8]
    for _, name, why in sp.tensorize_skipped:   # the int8 ones; AMX's bf16 ones by the shape
        assert ("int32" in why) if "bf16" not in name else ("multiples of 32" in why), why
    seed, *_ = tensorized_seeds(sp)
    assert seed.entities["C.tensorize"].val == BF16_16
    asm = build(sp.schedule(seed), ins + [C], target=SPR).get_source("asm")   # not run here
    assert re.search(r"\bvdpbf16ps\s+[^\n]*%zmm", asm)


def test_a_target_without_avx512bf16_offers_no_bf16_sketch():
    ins, C = matmul_bf16(9, 48, 16)
    for target in ("llvm -mcpu=haswell", "llvm -mcpu=skylake-avx512"):
        sp = generate_space(C, target)
        assert tensorize_values(sp) == []
        assert RuleKind.TENSORIZE not in sp.fired["C"]
        assert sp.tensorize_skipped and all(
            re.search(r"accumulates float32, the intrinsic \S+ int32", why)
            for *_, why in sp.tensorize_skipped)


@needs_bf16
@pytest.mark.parametrize("M, N, K, batch", [(37, 48, 34, ()), (5, 37, 101, ()),
                                            (13, 32, 10, (2,))])
def test_every_tensorized_seed_is_within_the_float32_bound(M, N, K, batch):
    ins, C = matmul_bf16(M, N, K, batch)
    sp = generate_space(C)
    seeds = tensorized_seeds(sp)
    assert seeds
    for c in seeds:
        f = run_close(sp.schedule(c), ins, C)
        assert re.search(r"\bvdpbf16ps\b", f.get_source("asm"))


@needs_bf16
def test_auto_schedule_of_a_bf16_matmul_is_within_the_bound(tmp_path):
    ins, C = matmul_bf16(32, 64, 48)
    fast = autotune.measure_option(number=1, repeat=1, timeout=20, n_parallel=2)
    s, args = autotune.auto_schedule(ins + [C], n_trial=3, seed=0, measure_option=fast,
                                     log=str(tmp_path / "bf16.jsonl"), quiet=True)
    run_close(s, args[:2], args[2])
