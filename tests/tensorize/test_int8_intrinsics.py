"""einloop's u8 x s8 -> s32 intrinsics through ``s[T].tensorize``: exact results against NumPy's
int32 matmul where the host has the instructions (AVX2 on any x86-64 machine this suite runs
on), the instructions in the assembly for targets that have them (the VNNI ones, compiled for a
named CPU when the host lacks them), and a target without the feature refused."""
import re

import numpy as np
import pytest

from einloop import build, create_schedule, lower, te
from einloop.codegen import intrinsics
from einloop.codegen.intrinsics import AVX2_S16S8, AVX2_U8S8, AVX512VNNI_U8S8, AVXVNNI_U8S8
from einloop.errors import BuildError, LibraryError, ScheduleError

from tzutil import (default_tensorized, host_has, int8_gemm, intrin_tile, pack_for,
                    random_int8, reference, tiled)

pytestmark = pytest.mark.skipif(not host_has("avx2"), reason="x86-64 with AVX2 only")


def _run(s, args, M, N, K, seed=0):
    f = build(s, args)
    a, b = random_int8(M, N, K, seed)
    c = np.full((M, N), 7, np.int32)            # the kernel initialises the accumulator
    f(a, b, c)
    np.testing.assert_array_equal(c, reference(a, b))
    return f


@pytest.mark.parametrize("M, N, K", [(37, 24, 10), (1, 8, 2), (5, 40, 102), (101, 16, 34)])
def test_avx2_gemm_is_exact(M, N, K):
    s, args = default_tensorized(AVX2_U8S8, M, N, K)
    f = _run(s, args, M, N, K)
    asm = f.get_source("asm")
    assert re.search(r"\bvpmaddwd\b", asm)
    assert not re.search(r"\bvpmulld\b", asm)          # no 32-bit multiply left
    assert not re.search(r"\bvpmaddubsw\b", asm)       # the saturating one is never used


@pytest.mark.parametrize("M, N, K", [(3, 37, 11), (37, 101, 37), (1, 13, 3)])
def test_partial_tiles_run_as_plain_loops_and_stay_exact(M, N, K):
    s, args = default_tensorized(AVX2_U8S8, M, N, K)
    text = str(lower(s, args))
    assert "if j.outer * 8 + 7 < " in text and "tensorized" in text
    _run(s, args, M, N, K, seed=N)


def test_the_tensorized_loops_become_one_call_in_the_loop_ir():
    s, args = default_tensorized(AVX2_U8S8, 5, 16, 6)
    text = str(lower(s, args))
    assert "tensorized einloop.tensorize.x86.avx2.u8s8_i32x8(&C[" in text
    assert "j.inner" in text                       # the init loop stays ordinary code
    assert "k.inner" not in text                   # the reduction's tile loop is gone


def test_extreme_values_do_not_saturate():
    M, N, K = 3, 8, 64
    s, args = default_tensorized(AVX2_U8S8, M, N, K)
    f = build(s, args)
    a = np.full((M, K), 255, np.uint8)
    for bval in (-128, 127):
        b = np.full((K, N), bval, np.int8)
        c = np.zeros((M, N), np.int32)
        f(a, b, c)
        assert (c == 255 * bval * K).all()


def test_whole_reduction_inside_the_tile_initialises_before_the_call():
    # K == group: the reduction loop is inside the tile, so its init comes just before the call
    M, N, K = 7, 16, 2
    s, args = default_tensorized(AVX2_U8S8, M, N, K)
    _run(s, args, M, N, K)


def test_hand_schedule_parallel_unrolled_with_a_register_accumulator():
    """cache_write accumulator computed at C's tile loop, outer loops parallel and unrolled."""
    M, N, K = 37, 48, 34
    A, B, C = int8_gemm(M, N, K)
    s = create_schedule(C)
    lanes, group = intrin_tile(AVX2_U8S8)
    pack_for(s, B, lanes, group)
    CL = s.cache_write(C, "local")
    i, j = s[C].op.axis
    io, ii = s[C].split(i, factor=4)
    jo, ji = s[C].split(j, factor=2 * lanes)
    s[C].reorder(io, jo, ii, ji)
    s[CL].compute_at(s[C], jo)
    s[C].parallel(io)
    s[C].vectorize(ji)
    ci, cj = s[CL].op.axis
    cjo, cji = s[CL].split(cj, factor=lanes)
    ko, ki = s[CL].split(s[CL].op.reduce_axis[0], factor=group)
    s[CL].reorder(ko, ci, cjo, cji, ki)
    s[CL].unroll(ci)
    s[CL].unroll(cjo)
    s[CL].tensorize(cji, AVX2_U8S8)
    _run(s, [A, B, C], M, N, K, seed=3)


def test_tail_rows_by_compute_at_stay_exact():
    """M = 37 split by 4 at the consumer: the last accumulator tile is computed for padded rows."""
    M, N, K = 37, 16, 8
    A, B, C = int8_gemm(M, N, K)
    s = create_schedule(C)
    lanes, group = intrin_tile(AVX2_U8S8)
    pack_for(s, B, lanes, group)
    CL = s.cache_write(C, "local")
    io, ii = s[C].split(s[C].op.axis[0], factor=4)
    s[CL].compute_at(s[C], io)
    ci, cj = s[CL].op.axis
    cjo, cji = s[CL].split(cj, factor=lanes)
    ko, ki = s[CL].split(s[CL].op.reduce_axis[0], factor=group)
    s[CL].reorder(ci, cjo, ko, cji, ki)
    s[CL].tensorize(cji, AVX2_U8S8)
    _run(s, [A, B, C], M, N, K, seed=5)


@pytest.mark.parametrize("intrin, target, pattern", [
    (AVX512VNNI_U8S8, "llvm -mcpu=cascadelake", r"\bvpdpbusd\s+[^\n]*%zmm"),
    (AVXVNNI_U8S8, "llvm -mcpu=alderlake", r"\{vex\}\s*vpdpbusd\s+[^\n]*%ymm"),
    # (on x86-64-v3: on an AVX-512 host, -mattr alone keeps EVEX, which reaches ymm16-31)
    (AVXVNNI_U8S8, "llvm -mcpu=x86-64-v3 -mattr=+avxvnni", r"\{vex\}\s*vpdpbusd\s+[^\n]*%ymm"),
    (AVX2_U8S8, "llvm -mcpu=haswell", r"\bvpmaddwd\s+[^\n]*%ymm"),
], ids=["avx512vnni-cascadelake", "avxvnni-alderlake", "avxvnni-mattr", "avx2-haswell"])
def test_each_intrinsic_compiles_to_its_instruction(intrin, target, pattern):
    M, N, K = 9, 32, 16
    s, args = default_tensorized(intrin, M, N, K)
    f = build(s, args, target=target)
    asm = f.get_source("asm")
    assert re.search(pattern, asm), asm[:2000]
    assert not re.search(r"\bvpmulld\b", asm)
    feature = intrin.features[0]
    if host_has(feature):                          # run it where the CPU has it
        _run(s, args, M, N, K)


def test_an_intrinsic_the_target_lacks_is_refused():
    s, args = default_tensorized(AVX512VNNI_U8S8, 4, 16, 8)
    target = "llvm" if not host_has("avx512vnni") else "llvm -mcpu=haswell"
    with pytest.raises(BuildError, match=r"tensor intrinsic x86\.avx512vnni\.u8s8_i32x16 needs "
                                         r"the CPU feature\(s\) avx512vnni, which target .* does "
                                         r"not have .*-mattr=\+avx512vnni"):
        build(s, args, target=target)


def test_for_target_lists_what_the_target_has_best_first():
    names = [t.name for t in intrinsics.for_target("llvm -mcpu=sapphirerapids")
             if t.op.output_dtype() == "int32"]           # (its bf16 ones: test_bf16_intrinsics)
    assert names == [AVX512VNNI_U8S8.name, AVXVNNI_U8S8.name, AVX2_U8S8.name]
    assert [t.name for t in intrinsics.for_target("llvm -mcpu=haswell")] == [AVX2_U8S8.name]
    assert [t.name for t in intrinsics.for_target("llvm -mcpu=alderlake")] == [
        AVXVNNI_U8S8.name, AVX2_U8S8.name]


def test_avx2_with_a_widened_once_to_int16_is_exact():
    """The s16 x s8 variant reads a copy of A widened to int16 by a compute stage of its own."""
    M, N, K = 37, 32, 22
    A = te.placeholder((M, K), "uint8", name="A")
    B = te.placeholder((K, N), "int8", name="B")
    AW = te.compute((M, K), lambda i, k: A[i, k].astype("int16"), name="AW")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(AW[i, k].astype("int32") * B[k, j].astype(
        "int32"), axis=k), name="C")
    s = create_schedule(C)
    s[AW].vectorize(s[AW].op.axis[1])
    pack_for(s, B, 8, 2)
    *_, ji, _ = tiled(s, C, 8, 2)
    with pytest.raises(ScheduleError, match=r"operand AW of stage C is int16, the intrinsic "
                                            r"x86\.avx2\.u8s8_i32x8's A is uint8"):
        s[C].tensorize(ji, AVX2_U8S8)
    s[C].tensorize(ji, AVX2_S16S8)
    f = _run(s, [A, B, C], M, N, K, seed=7)
    assert re.search(r"\bvpbroadcastd\s+\d*\(", f.get_source("asm"))   # A's pair: one load


def test_symbolic_extents_tensorize_their_whole_tiles():
    """M and N symbolic: one kernel for every size, whole tiles by the intrinsic, the rest plain."""
    M, N, K = te.size_var("M"), te.size_var("N"), 10
    A, B, C = int8_gemm(M, N, K)
    s = create_schedule(C)
    pack_for(s, B, 8, 2)
    *_, ji, _ = tiled(s, C, 8, 2)
    s[C].tensorize(ji, AVX2_U8S8)
    f = build(s, [A, B, C])
    for m, n in [(5, 37), (3, 16), (1, 7)]:
        a, b = random_int8(m, n, K, seed=n)
        c = np.zeros((m, n), np.int32)
        f(a, b, c)
        np.testing.assert_array_equal(c, reference(a, b))


def test_prefetch_sees_the_tiles_the_intrinsic_reads():
    M, N, K = 6, 32, 64
    A, B, C = int8_gemm(M, N, K)
    s = create_schedule(C)
    BP = pack_for(s, B, 8, 2)
    i, jo, ko, ji, ki = tiled(s, C, 8, 2)
    s[C].tensorize(ji, AVX2_U8S8)
    s[C].prefetch(BP, jo)                  # the B tiles of the next column block: 32 per jo
    text = str(lower(s, [A, B, C]))
    assert re.search(r"prefetch B\.pack\.pack\[.*:\+\d+\]", text), text
    _run(s, [A, B, C], M, N, K)


def test_an_exported_library_runs_the_tensorized_kernel_and_records_vnni(tmp_path):
    from einloop.runtime import load_module
    M, N, K = 9, 24, 10
    s, args = default_tensorized(AVX2_U8S8, M, N, K)
    path = build(s, args, name="gemm_u8s8").export_library(str(tmp_path / "gemm.so"))
    mod = load_module(path)
    a, b = random_int8(M, N, K)
    c = np.zeros((M, N), np.int32)
    mod["gemm_u8s8"](a, b, c)
    np.testing.assert_array_equal(c, reference(a, b))
    s, args = default_tensorized(AVX512VNNI_U8S8, 4, 16, 8)
    vnni = build(s, args, name="gemm_vnni", target="llvm -mcpu=cascadelake")
    lib = vnni.export_library(str(tmp_path / "vnni.so"))
    if not host_has("avx512vnni"):          # refused at load, with the feature named
        with pytest.raises(LibraryError, match=r"features this CPU lacks: .*avx512vnni"):
            load_module(lib)
