"""einloop's AMX intrinsics (``tdpbusd``, ``tdpbf16ps``) through a hand schedule
(examples/gemm_amx.py): exact int8 and bf16 within float32 rounding where the host has AMX;
everywhere, the instructions in the kernel's assembly for ``llvm -mcpu=sapphirerapids``, a
kernel using AMX refused where the CPU lacks it, and the features an exported library records."""
import os
import re
import sys

import numpy as np
import pytest

from einloop import build, lower, te
from einloop.codegen import amx
from einloop.codegen.jit import emit_optimised
from einloop.codegen.target import Target
from einloop.errors import BuildError, LibraryError, ScheduleError
from einloop.runtime import amx as amx_runtime
from einloop.runtime.library import check_amx, check_cpu

from tzutil import host_has

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))
import gemm_amx  # noqa: E402

pytestmark = pytest.mark.skipif(not Target.parse("llvm").is_x86, reason="x86-64 only")

SPR = "llvm -mcpu=sapphirerapids"
UNIT = {"int8": "amx-int8", "bf16": "amx-bf16"}
MUL = {"int8": "tdpbusd", "bf16": "tdpbf16ps"}


def host_runs(kind):
    return host_has("amx-tile", UNIT[kind]) and amx_runtime.request() is None


def _asm(s, args, target=SPR):
    """The kernel's assembly for *target*, compiled without loading it (this host may lack
    AMX)."""
    t = Target.parse(target)
    mod, *_ = emit_optimised(lower(s, args), t)
    return t.target_machine().emit_assembly(mod)


def _run(kind, M, N, K, kb=None):
    s, args = gemm_amx.schedule(M, N, K, kind, kb)
    f = build(s, args)
    a, b = gemm_amx.random_inputs(M, N, K, kind, seed=M + K)
    out = np.full((M, N), 7, np.int32 if kind == "int8" else np.float32)
    f(a, b, out)
    return out, gemm_amx.reference(a, b, kind)


@pytest.mark.parametrize("M, N, K, kb", [(64, 96, 256, 64), (32, 32, 192, 64),
                                         (96, 64, 512, 256)])
def test_int8_gemm_is_exact(M, N, K, kb):
    if not host_runs("int8"):
        pytest.skip("the host has no AMX-INT8 (or Linux refuses it)")
    out, ref = _run("int8", M, N, K, kb)
    np.testing.assert_array_equal(out, ref)


def test_int8_gemm_in_column_groups_is_exact():
    if not host_runs("int8"):
        pytest.skip("the host has no AMX-INT8 (or Linux refuses it)")
    s, args = gemm_amx.schedule(64, 128, 256, "int8", 128, panel=2)
    f = build(s, args)
    a, b = gemm_amx.random_inputs(64, 128, 256, "int8", seed=3)
    out = np.empty((64, 128), np.int32)
    f(a, b, out)
    np.testing.assert_array_equal(out, gemm_amx.reference(a, b))


@pytest.mark.parametrize("M, N, K, kb", [(64, 96, 128, 32), (32, 64, 256, 128)])
def test_bf16_gemm_within_float32_rounding(M, N, K, kb):
    if not host_runs("bf16"):
        pytest.skip("the host has no AMX-BF16 (or Linux refuses it)")
    out, ref = _run("bf16", M, N, K, kb)
    # products of bf16 are exact in float32; only the order of the float32 sums differs
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-4 * np.sqrt(K))


@pytest.mark.parametrize("kind", ["int8", "bf16"])
def test_assembly_for_sapphirerapids(kind):
    s, args = gemm_amx.schedule(64, 64, 256, kind, 64 if kind == "int8" else 32)
    asm = _asm(s, args)
    assert re.search(r"\bldtilecfg\b", asm)
    assert re.search(rf"\b{MUL[kind]}\s+%tmm", asm)
    assert re.search(r"\btileloadd\b", asm) and re.search(r"\btilestored\b", asm)
    # the first K block zeroes its accumulators (the reset form); the tiles are released
    assert re.search(r"\btilezero\b", asm) and re.search(r"\btilerelease\b", asm)


def test_named_cpus_features():
    assert Target.parse(SPR).has_feature("amx-int8")
    assert Target.parse(SPR).has_feature("amx-bf16")
    assert not Target.parse("llvm -mcpu=znver3").has_feature("amx-tile")
    assert Target.parse(SPR + " -mattr=-amx-int8").lacks_feature("amx-int8")
    assert amx.for_target(SPR, "u8s8") and not amx.for_target("llvm -mcpu=znver3", "bf16")


def test_target_without_amx_refused():
    s, args = gemm_amx.schedule(32, 32, 64, "int8", 64)
    with pytest.raises(BuildError, match=r"amx-tile, amx-int8.*does not have"):
        build(s, args, target="llvm -mcpu=znver3")


def test_kernel_refused_where_the_cpu_lacks_amx(monkeypatch):
    """The load-time check: a kernel for a CPU with AMX, loaded where the CPU has none."""
    monkeypatch.setattr(amx_runtime, "missing_units", lambda used: tuple(used))
    s, args = gemm_amx.schedule(32, 64, 128, "int8", 64)
    with pytest.raises(BuildError, match=r"uses AMX tile instructions.*this CPU lacks amx-tile"):
        build(s, args, target=SPR)


def test_exported_where_the_cpu_lacks_amx(monkeypatch, tmp_path):
    """On a CPU without AMX, a kernel for one that has it compiles for export only: calling it
    is a clear error, not SIGILL; its object file and the features it needs are written."""
    from einloop.codegen.export import metadata
    from einloop.runtime import cpu
    flags = cpu.host_flags() or frozenset()
    monkeypatch.setattr(cpu, "host_flags", lambda: frozenset(
        f for f in flags if not f.startswith("amx")))
    s, args = gemm_amx.schedule(32, 64, 128, "int8", 64)
    k = build(s, args, target=SPR)
    with pytest.raises(BuildError, match=r"compiled for target .*sapphirerapids.*, whose CPU "
                                         r"features .*amx-tile.* this CPU lacks; write it out"):
        k(*[np.zeros([int(d) for d in t.shape], t.dtype) for t in args])
    assert os.path.getsize(k.export_object(tmp_path / "k.o")) > 0
    feats = metadata([k])["target"]["features"].split(",")
    assert "+amx-tile" in feats and "+amx-int8" in feats and "+amx-bf16" not in feats


def test_permission_refusal_is_a_sentence(monkeypatch):
    monkeypatch.setattr(amx_runtime.cpu, "host_flags", lambda: frozenset({"avx2"}))
    assert "no AMX tile unit" in amx_runtime._ask()


def test_features_used():
    s, args = gemm_amx.schedule(32, 32, 64, "int8", 64)
    from einloop.codegen.jit import emit
    text = emit(lower(s, args), Target.parse(SPR))[0]
    assert amx.features_used(text) == ("amx-tile", "amx-int8")
    A = te.placeholder((8,), "float32", name="A")
    B = te.compute((8,), lambda i: A[i] + 1, name="B")
    from einloop import create_schedule
    plain = emit(lower(create_schedule(B), [A, B]), Target.parse(SPR))[0]
    assert amx.features_used(plain) == ()


def test_library_amx_check():
    meta = {"target": {"triple": "x86_64-unknown-linux-gnu", "cpu": "sapphirerapids",
                       "features": "+avx2,+amx-tile,+amx-int8"}}
    with pytest.raises(LibraryError, match="amx-tile, amx-int8"):
        check_cpu("lib.so", meta, flags=frozenset({"avx2"}))
    check_cpu("lib.so", meta, flags=frozenset({"avx2", "amx_tile", "amx_int8"}))
    check_amx("plain.so", {"target": {"features": "+avx2"}})      # no AMX: nothing asked


def test_export_records_amx_only_where_used(tmp_path):
    if not host_runs("int8"):
        pytest.skip("the host has no AMX-INT8 (or Linux refuses it)")
    from einloop.codegen.export import metadata
    s, args = gemm_amx.schedule(32, 32, 64, "int8", 64)
    f = build(s, args)
    feats = metadata([f])["target"]["features"].split(",")
    assert "+amx-tile" in feats and "+amx-int8" in feats and "+amx-bf16" not in feats
    A = te.placeholder((8,), "float32", name="A")
    B = te.compute((8,), lambda i: A[i] + 1, name="B")
    from einloop import create_schedule
    g = build(create_schedule(B), [A, B])
    assert not any("amx" in x for x in metadata([g])["target"]["features"].split(","))


def test_unpacked_operand_mismatch():
    from einloop import create_schedule
    M = N = 32
    K = 64
    A = te.placeholder((M, K), "uint8", name="A")
    B = te.placeholder((K, N), "int8", name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k].astype("int32") * B[k, j].astype("int32"),
                                               axis=k), name="C")
    s = create_schedule(C)
    loops = _tile_loops(s[C])
    with pytest.raises(ScheduleError, match=r"operand B moves by 1 element\(s\) per step of "
                       r"loop j.inner, which is not a stride of dimension 3 .* B\[1, 16, 2, 64\]"):
        s[C].tensorize(loops[0], amx.U8S8[64])


def _tile_loops(st):
    """Split *st*'s 32 x 32 x K loops as the AMX intrinsic's: (ti, ii, tj, jj, kq, kg)."""
    i, j = st.op.axis
    ti, ii = st.split(i, factor=16)
    tj, jj = st.split(j, factor=16)
    kq, kg = st.split(st.op.reduce_axis[0], factor=4)
    st.reorder(ti, ii, tj, jj, kq, kg)
    return ti, ii, tj, jj, kq, kg


def test_a_row_major_is_read_in_place():
    """The intrinsic takes strides: a row-major A needs no copy (its tile rows K apart)."""
    from einloop import create_schedule
    M, N, K = 32, 32, 64
    A = te.placeholder((M, K), "uint8", name="A")
    B = te.placeholder((K, N), "int8", name="B")
    PB = te.compute((N // 16, K // 4, 16, 4), lambda x, y, z, w: B[y * 4 + w, x * 16 + z],
                    name="PB")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(
        A[i, k].astype("int32") * PB[j // 16, k // 4, j % 16, k % 4].astype("int32"), axis=k),
        name="C")
    s = create_schedule(C)
    loops = _tile_loops(s[C])
    s[C].tensorize(loops[0], amx.U8S8[64])
    text = str(lower(s, [A, B, C]))
    assert "&A[0] strides [1024, 64, 0]" in text      # rows K = 64 apart, in place (one K step)
    assert "&PB[0] strides [0, 64, 1024]" in text
    assert _asm(s, [A, B, C]).count("tdpbusd") == 4
    if host_runs("int8"):
        f = build(s, [A, B, C])
        a, b = gemm_amx.random_inputs(M, N, K, "int8", seed=3)
        out = np.zeros((M, N), np.int32)
        f(a, b, out)
        np.testing.assert_array_equal(out, gemm_amx.reference(a, b, "int8"))


def test_reduction_outside_the_column_blocks_resets_each_block_once():
    """K blocks outside the column blocks, the output accumulated in place (no local tile):
    each block's first K block calls the reset form, later ones accumulate; no zeroing loop."""
    from einloop import create_schedule
    M, N, K, kb = 64, 96, 256, 64
    A, B, PA, PB, C, intrin = gemm_amx.declare(M, N, K, "int8", kb)
    s = create_schedule(C)
    for P in (PA, PB):
        s[P].parallel(s[P].op.axis[0])
    io, jo, ii, ji = s[C].tile(*s[C].op.axis, 32, 32)
    kt, kr = s[C].split(s[C].op.reduce_axis[0], factor=kb)
    mt, mi = s[C].split(ii, factor=16)
    nt, ni = s[C].split(ji, factor=16)
    ks, ke = s[C].split(kr, factor=64)
    kq, kg = s[C].split(ke, factor=4)
    s[C].reorder(io, kt, jo, mt, mi, nt, ni, ks, kq, kg)
    s[C].parallel(io)
    s[C].tensorize(mt, intrin)
    nest = str(lower(s, [A, B, C])).split("parallel for i.outer")[1]
    assert re.fullmatch(r" in range\(2\):\s+for k\.outer in range\(4\):\s+"
                        r"for j\.outer in range\(3\):\s+if k\.outer == 0:\s+"
                        r"tensorized \S+\.reset\(&C\[[^\n]*\s+else:\s+tensorized [^\n]*\s*",
                        nest), nest                        # and nothing else: no zeroing
    if host_runs("int8"):
        f = build(s, [A, B, C])
        a, b = gemm_amx.random_inputs(M, N, K, "int8", seed=5)
        out = np.full((M, N), 7, np.int32)
        f(a, b, out)
        np.testing.assert_array_equal(out, gemm_amx.reference(a, b, "int8"))
