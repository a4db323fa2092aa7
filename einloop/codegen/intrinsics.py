"""einloop's own tensor intrinsics (``s[T].tensorize``): exact u8 x s8 -> s32 dot products and
bf16 x bf16 -> f32 dot products.

Each u8 x s8 one computes, for a tile of output lanes ``j`` and a group of ``k``::

    C[j] += sum_k int32(A[k]) * int32(B[j, k])        A: uint8 [group], B: int8 [lanes, group]

so a GEMM ``C[i, j] = sum_k A[i, k] * B[k, j]`` tensorizes its innermost ``j`` (by ``lanes``)
and ``k`` (by ``group``) loops once B is laid out as ``[N/lanes, K/group, lanes, group]`` (or
any layout whose ``lanes x group`` tiles are dense: e.g. ``s.pack(B, 1, lanes)`` then
``s.pack`` of that copy on its K axis by ``group``).  All are exact (the int32 accumulator wraps
as NumPy's int32 does):

- ``x86.avx2.u8s8_i32x8`` (AVX2): A and B widened to int16, ``vpmaddwd`` multiplies 16 pairs
  and adds each pair into one of 8 int32 lanes; ``|a * b| <= 255 * 128`` so a pair's sum needs
  17 bits and nothing saturates.  (``vpmaddubsw`` would do 32 products at once but saturates a
  pair's sum to int16: ``2 * 255 * 127 > 32767``; einloop does not use it.)
- ``x86.avx2.s16s8_i32x8`` (AVX2): the same with A int16 (``|a * b| <= 2**22``, exact), for a
  GEMM that reads a copy of its uint8 A widened once to int16 (a compute stage): the pair of A
  is then one broadcast load instead of a load, a widening and a broadcast per row;
- ``x86.avx512vnni.u8s8_i32x16`` (AVX-512 VNNI, ``vpdpbusd`` on zmm): 16 lanes x 4 bytes;
- ``x86.avxvnni.u8s8_i32x8`` (AVX-VNNI, ``{vex} vpdpbusd`` on ymm): 8 lanes x 4 bytes.

The bf16 ones (AVX512-BF16 ``vdpbf16ps``) compute, for a pair of ``k``::

    C[j] += sum_k float32(A[k]) * float32(B[j, k])     A: bfloat16 [2], B: bfloat16 [lanes, 2]

- ``x86.avx512bf16.bf16_f32x16`` (zmm) and ``x86.avx512bf16.bf16_f32x8`` (ymm, AVX512-VL).

They are not bit-exact to float32 arithmetic in another order: a product of two bfloat16 is
exact in float32, but the instruction adds the pair's two products and the accumulator in its
own order, rounding to nearest even after each add, and treats subnormal inputs and results as
zero.  The error bound of a float32 sum of the same products holds for it (``K`` adds of
relative error ``2**-24`` each); only subnormal products, far below any normal sum, differ by
more.

:func:`for_target` lists those a target has, best first.
"""
from __future__ import annotations

from .. import te
from ..te.tensor_intrin import TensorIntrin
from .target import Target


def _u8s8(name, lanes, group, body, declarations, features, a_dtype="uint8"):
    A = te.placeholder((group,), a_dtype, name="A")
    B = te.placeholder((lanes, group), "int8", name="B")
    k = te.reduce_axis((0, group), name="k")
    C = te.compute((lanes,), lambda j: te.sum(A[k].astype("int32") * B[j, k].astype("int32"),
                                               axis=k), name="C")
    return TensorIntrin(name, C, body, declarations, features)


def _broadcast(v, lanes, scalar="i32"):
    """LLVM lines broadcasting ``%<v>`` (a *scalar*) to ``%<v>.all`` of *lanes* lanes."""
    return (f"  %{v}.one = insertelement <{lanes} x {scalar}> poison, {scalar} %{v}, i64 0\n"
            f"  %{v}.all = shufflevector <{lanes} x {scalar}> %{v}.one, <{lanes} x {scalar}> "
            f"poison, <{lanes} x i32> zeroinitializer\n")


#: the AVX2 body after ``%a.pairs`` (A's pair as 16 x i16, (a0, a1) repeated): B's tile
#: sign-extended to 16 x i16, vpmaddwd, the sum added to the accumulator tile
_AVX2_DOT = (
    "  %b.bytes = load <16 x i8>, ptr %in1, align 1\n"
    "  %b.words = sext <16 x i8> %b.bytes to <16 x i16>\n"
    "  %dot = call <8 x i32> @llvm.x86.avx2.pmadd.wd(<16 x i16> %a.pairs, <16 x i16> %b.words)\n"
    "  %acc = load <8 x i32>, ptr %out, align 4\n"
    "  %sum = add <8 x i32> %acc, %dot\n"
    "  store <8 x i32> %sum, ptr %out, align 4\n"
    "  ret void\n")
_AVX2_BODY = (
    "  %a.bytes = load <2 x i8>, ptr %in0, align 1\n"
    "  %a.words = zext <2 x i8> %a.bytes to <2 x i16>\n"
    "  %a = bitcast <2 x i16> %a.words to i32\n"
    + _broadcast("a", 8)
    + "  %a.pairs = bitcast <8 x i32> %a.all to <16 x i16>\n"
    + _AVX2_DOT)
#: the same with A's pair already int16 in memory (a copy of A widened once, outside the
#: GEMM's inner loop): the pair is one 32-bit broadcast load instead of four instructions
_AVX2_S16_BODY = (
    "  %a = load i32, ptr %in0, align 2\n"
    + _broadcast("a", 8)
    + "  %a.pairs = bitcast <8 x i32> %a.all to <16 x i16>\n"
    + _AVX2_DOT)


def _vnni_body(lanes, width):
    return ("  %a = load i32, ptr %in0, align 1\n"
            + _broadcast("a", lanes)
            + f"  %b = load <{lanes} x i32>, ptr %in1, align 1\n"
            f"  %acc = load <{lanes} x i32>, ptr %out, align 4\n"
            f"  %sum = call <{lanes} x i32> @llvm.x86.avx512.vpdpbusd.{width}(<{lanes} x i32> "
            f"%acc, <{lanes} x i32> %a.all, <{lanes} x i32> %b)\n"
            f"  store <{lanes} x i32> %sum, ptr %out, align 4\n"
            "  ret void\n")


def _vnni_declaration(lanes, width):
    v = f"<{lanes} x i32>"
    return f"declare {v} @llvm.x86.avx512.vpdpbusd.{width}({v}, {v}, {v})"


AVX2_U8S8 = _u8s8("x86.avx2.u8s8_i32x8", 8, 2, _AVX2_BODY,
                  "declare <8 x i32> @llvm.x86.avx2.pmadd.wd(<16 x i16>, <16 x i16>)", ("avx2",))
AVX2_S16S8 = _u8s8("x86.avx2.s16s8_i32x8", 8, 2, _AVX2_S16_BODY,
                   "declare <8 x i32> @llvm.x86.avx2.pmadd.wd(<16 x i16>, <16 x i16>)",
                   ("avx2",), a_dtype="int16")
AVX512VNNI_U8S8 = _u8s8("x86.avx512vnni.u8s8_i32x16", 16, 4, _vnni_body(16, 512),
                        _vnni_declaration(16, 512), ("avx512vnni",))
AVXVNNI_U8S8 = _u8s8("x86.avxvnni.u8s8_i32x8", 8, 4, _vnni_body(8, 256),
                     _vnni_declaration(8, 256), ("avxvnni",))



def _bf16(name, lanes, features):
    A = te.placeholder((2,), "bfloat16", name="A")
    B = te.placeholder((lanes, 2), "bfloat16", name="B")
    k = te.reduce_axis((0, 2), name="k")
    C = te.compute((lanes,), lambda j: te.sum(A[k].astype("float32") * B[j, k].astype(
        "float32"), axis=k), name="C")
    v, pairs = f"<{lanes} x float>", f"<{2 * lanes} x bfloat>"
    call = f"@llvm.x86.avx512bf16.dpbf16ps.{32 * lanes}"
    # A's pair is one 32-bit value broadcast to every lane; B's tile is lanes pairs, dense
    body = ("  %a = load i32, ptr %in0, align 2\n"
            + _broadcast("a", lanes)
            + f"  %a.pairs = bitcast <{lanes} x i32> %a.all to {pairs}\n"
            f"  %b = load {pairs}, ptr %in1, align 2\n"
            f"  %acc = load {v}, ptr %out, align 4\n"
            f"  %sum = call {v} {call}({v} %acc, {pairs} %a.pairs, {pairs} %b)\n"
            f"  store {v} %sum, ptr %out, align 4\n"
            "  ret void\n")
    return TensorIntrin(name, C, body, f"declare {v} {call}({v}, {pairs}, {pairs})", features)


AVX512BF16_F32X16 = _bf16("x86.avx512bf16.bf16_f32x16", 16, ("avx512bf16",))
AVX512BF16_F32X8 = _bf16("x86.avx512bf16.bf16_f32x8", 8, ("avx512bf16", "avx512vl"))

#: einloop's intrinsics, best first: u8 x s8 (per instruction: 64, 32, then 16 multiply-adds),
#: then bf16 x bf16 (32, then 16); an operand's dtypes decide which of them fit a stage
SHIPPED = (AVX512VNNI_U8S8, AVXVNNI_U8S8, AVX2_U8S8, AVX512BF16_F32X16, AVX512BF16_F32X8)
#: the variants for operands of other dtypes
VARIANTS = (AVX2_S16S8,)
#: intrinsic name -> its variant that reads A (the operand broadcast per row) widened: what the
#: auto-scheduler's sketch uses with a copy of A widened once to that dtype
#: (``s.cache_read(A, ..., dtype=...)``), the pair of A then one broadcast load
WIDENED_A = {AVX2_U8S8.name: AVX2_S16S8}


def for_target(target="llvm") -> list:
    """einloop's intrinsics that *target* (a Target or its string) is known to have, best
    first."""
    target = Target.parse(target) if isinstance(target, str) else target
    return [t for t in SHIPPED if all(target.has_feature(f) for f in t.features)]
