"""einloop's bf16 x bf16 -> f32 intrinsics (AVX512-BF16 ``vdpbf16ps``) through
``s[T].tensorize``: results against a float64 product of the same bfloat16 inputs where the host
has the instruction, the instruction in the assembly of a named CPU that has it (on any host),
and targets without it neither offered it nor able to build it."""
import re

import ml_dtypes
import numpy as np
import pytest

from einloop import build, create_schedule, lower, te
from einloop.codegen import intrinsics
from einloop.codegen.intrinsics import AVX512BF16_F32X8, AVX512BF16_F32X16, AVX2_U8S8
from einloop.errors import BuildError, ScheduleError

from tzutil import host_has, int8_gemm, pack_for, tiled

BF16 = ml_dtypes.bfloat16
INTRINSICS = [AVX512BF16_F32X16, AVX512BF16_F32X8]
_on_host = pytest.mark.skipif(not host_has("avx512bf16", "avx512vl"),
                              reason="the host CPU has no AVX512-BF16 (compile-checked only)")


def bf16_gemm(M, N, K):
    A = te.placeholder((M, K), "bfloat16", name="A")
    B = te.placeholder((K, N), "bfloat16", name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k].astype("float32") * B[k, j].astype(
        "float32"), axis=k), name="C")
    return A, B, C


def tensorized(intrin, M, N, K):
    """The bf16 GEMM with B packed into the intrinsic's [lanes, 2] tiles, tensorized."""
    A, B, C = bf16_gemm(M, N, K)
    s = create_schedule(C)
    lanes = intrin.shape[0]
    pack_for(s, B, lanes, 2)
    *_, ji, _ = tiled(s, C, lanes, 2)
    s[C].tensorize(ji, intrin)
    return s, [A, B, C]


def random_bf16(shape, rng):
    return rng.standard_normal(shape).astype(np.float32).astype(BF16)


def check_close(c, a, b):
    """*c* against the float64 product of bfloat16 *a* and *b*.  Each product of two bfloat16
    is exact in float32; vdpbf16ps and a float32 loop differ only in the order of the K adds
    (each rounded to nearest, relative error 2**-24), so both lie within K * 2**-24 of the
    sum of |products| from the exact result (the float32 sum's error bound)."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    want = a64 @ b64
    bound = a.shape[1] * 2.0 ** -24 * (np.abs(a64) @ np.abs(b64))
    err = np.abs(c.astype(np.float64) - want)
    assert (err <= bound).all(), f"largest error {err.max()} over its bound"


@_on_host
@pytest.mark.parametrize("intrin", INTRINSICS, ids=lambda t: t.name)
@pytest.mark.parametrize("M, N, K", [(37, 48, 22), (1, 16, 2), (5, 53, 101), (9, 20, 6)])
def test_gemm_is_within_the_float32_bound(intrin, M, N, K):
    s, args = tensorized(intrin, M, N, K)
    f = build(s, args)
    rng = np.random.default_rng(M * N + K)
    a, b = random_bf16((M, K), rng), random_bf16((K, N), rng)
    c = np.full((M, N), np.nan, np.float32)          # the kernel initialises the accumulator
    f(a, b, c)
    check_close(c, a, b)
    assert re.search(r"\bvdpbf16ps\b", f.get_source("asm"))


@_on_host
def test_subnormal_products_are_flushed_as_the_instruction_documents():
    """vdpbf16ps treats subnormal inputs as zero (DAZ): a subnormal bfloat16 times 1 adds 0,
    where float32 arithmetic (einloop's untensorized loop) adds it exactly."""
    M, N, K = 1, 16, 2
    tiny = np.float32(2.0 ** -130)                   # subnormal in bfloat16 and float32
    a = np.array([[tiny, 0.0]], np.float32).astype(BF16)
    b = np.ones((K, N), BF16)
    s, args = tensorized(AVX512BF16_F32X16, M, N, K)
    c = np.full((M, N), np.nan, np.float32)
    build(s, args)(a, b, c)
    assert (c == 0.0).all()
    A, B, C = bf16_gemm(M, N, K)
    plain = np.full((M, N), np.nan, np.float32)
    build(create_schedule(C), [A, B, C])(a, b, plain)
    assert (plain == tiny).all()


@pytest.mark.parametrize("intrin, pattern", [
    (AVX512BF16_F32X16, r"\bvdpbf16ps\s+[^\n]*%zmm"),
    (AVX512BF16_F32X8, r"\bvdpbf16ps\s+[^\n]*%ymm"),
], ids=["zmm", "ymm"])
@pytest.mark.parametrize("target", ["llvm -mcpu=sapphirerapids", "llvm -mcpu=cooperlake"])
def test_each_intrinsic_compiles_to_vdpbf16ps(intrin, pattern, target):
    s, args = tensorized(intrin, 9, 32, 16)
    asm = build(s, args, target=target).get_source("asm")
    assert re.search(pattern, asm), asm[:2000]
    assert "tensorized einloop.tensorize." + intrin.name in str(lower(s, args))


@pytest.mark.parametrize("target", ["llvm -mcpu=haswell", "llvm -mcpu=skylake-avx512",
                                    "llvm -mcpu=znver3"])
def test_a_target_without_avx512bf16_neither_offers_nor_builds_it(target):
    assert not any(t in intrinsics.for_target(target) for t in INTRINSICS)
    s, args = tensorized(AVX512BF16_F32X16, 4, 16, 8)
    with pytest.raises(BuildError, match=r"tensor intrinsic x86\.avx512bf16\.bf16_f32x16 needs "
                                         r"the CPU feature\(s\) avx512bf16, which target "):
        build(s, args, target=target)


def test_for_target_offers_bf16_after_the_int8_ones():
    names = [t.name for t in intrinsics.for_target("llvm -mcpu=cooperlake")]
    assert names[-2:] == [AVX512BF16_F32X16.name, AVX512BF16_F32X8.name]
    assert names.index("x86.avx512vnni.u8s8_i32x16") < names.index(AVX512BF16_F32X16.name)


@pytest.mark.parametrize("gemm, intrin, lanes, mine, theirs", [
    (int8_gemm, AVX512BF16_F32X16, 16, "int32", "float32"),
    (bf16_gemm, AVX2_U8S8, 8, "float32", "int32")], ids=["int8-gemm", "bf16-gemm"])
def test_an_int8_gemm_does_not_match_it_nor_a_bf16_gemm_the_int8_ones(gemm, intrin, lanes,
                                                                      mine, theirs):
    A, B, C = gemm(4, 16, 8)
    s = create_schedule(C)
    pack_for(s, B, lanes, 2)
    *_, ji, _ = tiled(s, C, lanes, 2)
    with pytest.raises(ScheduleError, match=rf"stage C accumulates {mine}, the intrinsic "
                                            rf"{re.escape(intrin.name)} {theirs}"):
        s[C].tensorize(ji, intrin)


def test_float32_operands_do_not_match_it():
    """A float32 GEMM is not a bf16 one: the operand's dtype differs (and it has no cast)."""
    M, N, K = 4, 16, 8
    A = te.placeholder((M, K), "float32", name="A")
    B = te.placeholder((K, N), "float32", name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = create_schedule(C)
    pack_for(s, B, 16, 2)
    *_, ji, _ = tiled(s, C, 16, 2)
    with pytest.raises(ScheduleError, match=r"stage C computes A\[.*\] \(float32\) where the "
                                            r"intrinsic x86\.avx512bf16\.bf16_f32x16 computes"):
        s[C].tensorize(ji, AVX512BF16_F32X16)
