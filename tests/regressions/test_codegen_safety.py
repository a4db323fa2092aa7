"""Code generation defects found by differential fuzzing: each checked against NumPy or an error.

- float16 conversions call compiler-rt helpers that MCJIT cannot find (a call to address 0);
  any unresolved symbol must be a BuildError at build time.
- LLVM's O3 pipeline never finishes on reductions whose update uses the old value twice.
- Wrong results on AVX-512 hosts (an LLVM 22 X86CompressEVEX miscompile) and integer arithmetic
  that may wrap but was marked ``nsw``.
- A failed malloc of a local buffer and an unallocatable temporary buffer must raise, not crash.
"""
import sys
import textwrap

import llvmlite.binding as llvm
import numpy as np
import pytest

from einloop import build, create_schedule, lower, te
from einloop.codegen import Target, compile_func, jit, workarounds
from einloop.codegen.compiled import Compiled
from einloop.codegen.llvm import llvm_lock
from einloop.codegen.kernel import CompiledKernel
from einloop.codegen.objfile import undefined_symbols
from einloop.errors import BuildError, KernelRuntimeError
from einloop.ir.stmt import (Allocate, Buffer, For, ForKind, Load, LoweredFunc, Scope,
                                      Seq, Store)
from einloop.ir.expr import Var

from isolated import run_python

NO_F16C = "llvm -mcpu=x86-64"                 # a CPU without F16C: every float16 op is a libcall
HOST_AVX512 = Target.parse("llvm").has_feature("avx512f")


def load(buf, index):
    return Load(buf, index, buf.dtype)


def vectorized_or_not(s, stage, vector):
    if vector:
        _, inner = s[stage].split(stage.op.axis[0], factor=16)
        s[stage].vectorize(inner)
    return s


# float16 helpers -----------------------------------------------------------------------------

def float64_cases():
    """Random magnitudes, specials, and every float16 rounding midpoint with its neighbours."""
    rng = np.random.default_rng(5)
    x = rng.standard_normal(500) * 10.0 ** rng.integers(-9, 6, 500)
    special = [0.0, -0.0, np.inf, -np.inf, np.nan, 65504.0, 65519.99, 65520.0, 1e300,
               2.0 ** -14, 2.0 ** -24, 2.0 ** -25, 3 * 2.0 ** -26, 5e-324]
    halves = np.arange(0x7C00, dtype=np.uint16).view(np.float16).astype(np.float64)
    mid = (halves[:-1] + halves[1:]) / 2
    return np.concatenate([x, special, mid, -mid, np.nextafter(mid, 0), np.nextafter(mid, 1)])


@pytest.mark.parametrize("target", ["llvm", NO_F16C])
@pytest.mark.parametrize("src", ["float64", "float32"])
@pytest.mark.parametrize("vector", [False, True])
def test_float_to_float16_rounds_like_numpy(target, src, vector):
    with np.errstate(over="ignore"):
        x = float64_cases().astype(src)
    A = te.placeholder(x.shape, src, name="A")
    H = te.compute(x.shape, lambda i: A[i].astype("float16"), name="H")
    f = build(vectorized_or_not(create_schedule(H), H, vector), [A, H], target=target)
    out = np.empty(x.shape, np.float16)
    f(x, out)
    with np.errstate(over="ignore"):
        want = x.astype(np.float16)
    same = (out.view(np.uint16) == want.view(np.uint16)) | (np.isnan(out) & np.isnan(want))
    assert same.all(), (x[~same][:5], out[~same][:5], want[~same][:5])


@pytest.mark.parametrize("target", ["llvm", NO_F16C])
@pytest.mark.parametrize("dst", ["float64", "float32", "int32", "int8", "uint8", "bool"])
def test_float16_to_other_types_like_numpy(target, dst):
    h = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
    if not dst.startswith("float"):             # only values NumPy converts without overflow
        h = np.where(np.isfinite(h) & (np.abs(h) < 100), h, 0).astype(np.float16)
        h = np.abs(h) if dst == "uint8" else h
    A = te.placeholder(h.shape, "float16", name="A")
    B = te.compute(h.shape, lambda i: A[i].astype(dst), name="B")
    f = build(vectorized_or_not(create_schedule(B), B, True), [A, B], target=target)
    out = np.empty(h.shape, dst)
    f(h, out)
    np.testing.assert_array_equal(out, h.astype(dst))


@pytest.mark.parametrize("target", ["llvm", NO_F16C])
@pytest.mark.parametrize("vector", [False, True])
def test_float16_arithmetic_and_int_casts(target, vector):
    n = 300
    A = te.placeholder((n,), "float16", name="A")
    K = te.placeholder((n,), "int64", name="K")
    B = te.compute((n,), lambda i: A[i] * A[i] - te.exp(A[i]) / (K[i].astype("float16") + 1.5),
                   name="B")
    f = build(vectorized_or_not(create_schedule(B), B, vector), [A, K, B], target=target)
    rng = np.random.default_rng(1)
    a = rng.uniform(-3, 3, n).astype(np.float16)
    k = rng.integers(-1000, 1000, n)
    out = np.empty(n, np.float16)
    f(a, k, out)
    want = a * a - np.exp(a) / (k.astype(np.float16) + np.float16(1.5))
    np.testing.assert_allclose(out.astype(np.float32), want.astype(np.float32), rtol=2e-3,
                               atol=2e-3)


def test_the_float16_helpers_themselves_need_no_helper():
    from einloop.codegen import compiler_rt
    for spec in ("llvm", NO_F16C):
        mod = llvm.parse_assembly(compiler_rt.HELPERS_IR)
        assert undefined_symbols(Target.parse(spec).target_machine().emit_object(mod)) == []


def test_an_unresolvable_symbol_is_a_build_error_not_a_call_to_address_zero():
    text = textwrap.dedent("""
        declare double @einloop_test_no_such_function(double)
        define double @probe(double %x) {
          %y = call double @einloop_test_no_such_function(double %x)
          ret double %y
        }""")
    target = Target.parse("llvm")
    with llvm_lock:
        mod = llvm.parse_assembly(text)
        mod.triple = target.triple
        with pytest.raises(BuildError, match=r"kernel probe for target .*: the compiled code "
                                             r"calls einloop_test_no_such_function, which no "
                                             r"library loaded in this process defines"):
            jit.link(mod, target, "probe", "probe")


# compile time --------------------------------------------------------------------------------

def test_min_max_and_custom_reductions_compile_quickly():
    """Each of these hung in O3 (LLVM's loop vectorizer walked 2**n paths of the chain)."""
    result = run_python("""
        import time
        from einloop import te, create_schedule, build

        C = te.placeholder((2, 15), name="C")
        k = te.reduce_axis((0, 31), name="k")
        reducers = [te.max, te.min,
                    te.comm_reducer(lambda x, y: te.if_then_else(x > y, x, y),
                                    lambda dt: te.const(-1e30, dt), name="select_max"),
                    te.comm_reducer(lambda x, y: x * x + y, lambda dt: te.const(0.0, dt),
                                    name="square_sum"),
                    te.comm_reducer(lambda x, y: te.log(te.exp(x) + te.exp(y)),
                                    lambda dt: te.const(-1e30, dt), name="logsumexp")]
        for r in reducers:
            T = te.compute((4, 12), lambda i, j: r(C[(k + 3) % 2, 6], axis=k), name="T")
            s = create_schedule(T)
            s[T].unroll(T.op.axis[1])
            build(s, [C, T])

        D = te.placeholder((2, 67), name="D")
        k3 = te.reduce_axis((0, 17), name="k3")
        k4 = te.reduce_axis((0, 2), name="k4")
        M = te.compute((35,), lambda i: te.min(te.const(0.486) - D[0, 64 - k4], axis=[k3, k4]),
                       name="M")
        build(create_schedule(M), [D, M])
        print("ok")
        """, timeout=120)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-2000:]


@pytest.mark.parametrize("dtype", ["float32", "float16", "int8", "uint8", "int64"])
def test_max_min_follow_numpy_including_nan(dtype):
    A = te.placeholder((37, 50), dtype, name="A")
    k = te.reduce_axis((0, 50), name="k")
    Mx = te.compute((37,), lambda i: te.max(A[i, k], axis=k), name="Mx")
    Mn = te.compute((37,), lambda i: te.min(A[i, k], axis=k), name="Mn")
    E = te.compute((37, 50), lambda i, j: te.maximum(A[i, j], A[36 - i, j]), name="E")
    s = create_schedule([Mx, Mn, E])
    s[E].vectorize(s[E].op.axis[1])
    f = build(s, [A, Mx, Mn, E])
    rng = np.random.default_rng(2)
    if dtype.startswith("float"):
        a = rng.standard_normal((37, 50)).astype(dtype)
        a[3, 7] = a[5, 0] = a[6, 49] = np.nan
        a[8], a[9] = np.inf, -np.inf
    else:
        info = np.iinfo(dtype)
        a = rng.integers(info.min, info.max, (37, 50), endpoint=True).astype(dtype)
    mx, mn, e = np.empty(37, dtype), np.empty(37, dtype), np.empty((37, 50), dtype)
    f(a, mx, mn, e)
    np.testing.assert_array_equal(mx, a.max(axis=1))            # NaN where a row has one
    np.testing.assert_array_equal(mn, a.min(axis=1))
    np.testing.assert_array_equal(e, np.maximum(a, a[::-1]))


# wrong results -------------------------------------------------------------------------------

def floordiv_case():
    """int32 floor division by a data-dependent divisor of either sign."""
    A = te.placeholder((3, 4), "int32", name="A")
    B = te.placeholder((20, 4), "float64", name="B")
    T = te.compute((20, 4, 4), lambda i0, i1, i2: i2.astype("int32") // (
        A[(i0 + 3) % 3, i2]
        + te.if_then_else(i2 >= 1, A[i2 - 1, (i0 + 2) % 2], te.const(0, "int32"))
        + te.floor(te.tanh(B[i0, i2]) * 6.5).astype("int32")), name="T")
    rng = np.random.default_rng(0)
    a = rng.integers(-9, 10, (3, 4)).astype(np.int32)
    b = rng.uniform(-1, 1, (20, 4))
    i0, i2 = np.arange(20)[:, None, None], np.arange(4)[None, None, :]
    div = (a[(i0 + 3) % 3, i2] + np.where(i2 >= 1, a[np.maximum(i2 - 1, 0), (i0 + 2) % 2], 0)
           + np.floor(np.tanh(b[i0, i2]) * 6.5).astype(np.int32))
    with np.errstate(all="ignore"):
        want = np.broadcast_to(np.where(div == 0, 0, i2.astype(np.int32) // div), (20, 4, 4))
    return [A, B, T], [a, b], np.empty((20, 4, 4), np.int32), want


def gather_sum_case():
    """An int8 sum whose second operand is read through a data-dependent index."""
    A = te.placeholder((66, 25), "int8", name="A")
    B = te.placeholder((66, 33, 17), "int8", name="B")
    k2 = te.reduce_axis((3, 69), name="k2")
    k3 = te.reduce_axis((0, 17), name="k3")
    T = te.compute((1,), lambda i: te.sum(B[68 - k2, 6, k3] * A[k3, A[k2 - 3, k3]
                                                                .astype("int64") % 25],
                                          axis=[k2, k3]), name="T")
    rng = np.random.default_rng(0)
    a = rng.integers(-9, 10, (66, 25)).astype(np.int8)
    b = rng.integers(-9, 10, (66, 33, 17)).astype(np.int8)
    k2, k3 = np.arange(3, 69)[:, None], np.arange(17)[None, :]
    prod = b[68 - k2, 6, k3] * a[k3, a[k2 - 3, k3].astype(np.int64) % 25]
    return [A, B, T], [a, b], np.empty(1, np.int8), [prod.sum(dtype=np.int8)]


AVX512_TARGETS = ["llvm", pytest.param("llvm -mcpu=skylake-avx512", marks=pytest.mark.skipif(
    not HOST_AVX512, reason="running AVX-512 code needs a host with avx512f"))]


@pytest.mark.parametrize("case", [floordiv_case, gather_sum_case])
@pytest.mark.parametrize("target", AVX512_TARGETS)
def test_avx512_miscompiled_kernels_match_numpy(case, target):
    args, inputs, out, want = case()
    build(create_schedule(args[-1]), args, target=target)(*inputs, out)
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("case", [floordiv_case, gather_sum_case])
def test_code_for_avx512_has_no_movmsk_from_the_broken_evex_fold(case):
    """Whatever the host, the code built for skylake-avx512 has no movmsk: what the broken
    ``vpmov*2m + kmov`` fold emits (LLVM 22 X86CompressEVEX, llvm-project #191304, #198197)."""
    args = case()[0]
    asm = build(create_schedule(args[-1]), args, target="llvm -mcpu=skylake-avx512") \
        .get_source("asm")
    assert "movmsk" not in asm


@pytest.mark.parametrize("case", [floordiv_case, gather_sum_case])
def test_ir_optimised_for_avx512_computes_the_same_on_this_host(case):
    """The IR LLVM optimises for skylake-avx512 (its cost model) has no UB that shows here.
    Its machine code for this host goes through the workaround ``build`` uses (on an AVX-512
    host, the EVEX fold would otherwise miscompile it: 78 instead of 71 for gather_sum)."""
    args, inputs, out, want = case()
    func = lower(create_schedule(args[-1]), args)
    mod, text, symbol, parallel, _ = jit.emit_optimised(func, Target.parse(
        "llvm -mcpu=skylake-avx512"))
    host = Target.parse("llvm")
    with llvm_lock:
        if workarounds.evex_mask_fold_risk(mod, host):
            host = workarounds.without_mask_features(host)
        engine, address = jit.link(llvm.parse_assembly(str(mod)), host, symbol, func.name)
    CompiledKernel(func, Compiled(symbol, address, engine, text, str(mod), host, parallel))(
        *inputs, out)
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("vector", [False, True])
def test_int64_arithmetic_wraps_like_numpy(vector):
    """No nsw on user arithmetic: the wrapped value is used, compared and selected on."""
    n = 64
    A = te.placeholder((n,), "int64", name="A")
    B = te.compute((n,), lambda i: te.if_then_else(A[i] * 2 ** 62 + i * 2 ** 61 > A[i],
                                                   A[i] * 3 + i, -(A[i] - 2 ** 62) * 4), name="B")
    f = build(vectorized_or_not(create_schedule(B), B, vector), [A, B])
    a = np.random.default_rng(3).integers(-2 ** 62, 2 ** 62, n)
    i = np.arange(n)
    with np.errstate(over="ignore"):
        want = np.where(a * 2 ** 62 + i * 2 ** 61 > a, a * 3 + i, -(a - 2 ** 62) * 4)
    out = np.empty(n, np.int64)
    f(a, out)
    np.testing.assert_array_equal(out, want)


def test_nan_cast_to_an_index_reads_in_bounds():
    """fptosi of NaN/inf is LLVM poison; cast as NumPy does, the clamped index stays in bounds."""
    n = 32
    X = te.placeholder((n,), "float32", name="X")
    T = te.placeholder((8,), "float32", name="T")
    G = te.compute((n,), lambda i: T[X[i].astype("int64")], name="G")
    s = create_schedule(G)
    f = build(vectorized_or_not(s, G, True), [X, T, G])
    x = np.full(n, np.nan, np.float32)
    x[::3], x[1::3] = np.inf, -np.inf
    t = np.arange(8, dtype=np.float32)
    g = np.empty(n, np.float32)
    f(x, t, g)
    assert np.isin(g, t).all()


# memory --------------------------------------------------------------------------------------

def local_buffer_func(kind, n):
    """``for i (kind): allocate L[n]; L[j] = j for all j; O[i] = L[X[i]]`` (float32 L and O)."""
    X = Buffer("X", "int64", (4,), Scope.ARG)
    O = Buffer("O", "float32", (4,), Scope.ARG)
    Lb = Buffer("L", "float32", (n,), Scope.LOCAL)
    i, j = Var("i"), Var("j")
    fill = For(j, n, ForKind.SERIAL, Store(Lb, j, j.astype("float32")))
    body = Allocate(Lb, Seq((fill, Store(O, i, load(Lb, load(X, i))))))
    return LoweredFunc("local", (X, O), (), For(i, 4, kind, body), {})


def test_a_local_buffer_beyond_the_address_space_is_a_build_error():
    with pytest.raises(BuildError, match=r"local buffer L \(float32\[4611686018427387904\]\) "
                                         r"needs 18446744073709551616 bytes"):
        compile_func(local_buffer_func(ForKind.SERIAL, 2 ** 62))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
@pytest.mark.parametrize("kind", ["SERIAL", "PARALLEL"])
def test_a_failed_malloc_is_an_error_not_a_crash(kind):
    """malloc under an address-space limit returns NULL: the kernel reports it, then works again."""
    result = run_python(f"""
        import resource, sys
        import numpy as np
        sys.path.insert(0, {str(__import__('pathlib').Path(__file__).parent)!r})
        from test_codegen_safety import local_buffer_func
        from einloop.codegen import compile_func
        from einloop.errors import KernelRuntimeError
        from einloop.ir.stmt import ForKind

        # 64 MiB: over glibc's largest mmap threshold (32 MiB), so each call maps it afresh
        # even after the first kernel warmed the allocator (whose heap keeps smaller blocks)
        f = compile_func(local_buffer_func(ForKind.{kind}, 2 ** 24))
        x, out = np.arange(4), np.zeros(4, np.float32)
        f(x, out)                                         # starts libgomp's threads, if any
        vm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmSize"))
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        resource.setrlimit(resource.RLIMIT_AS, (vm * 1024 + 2 ** 23, hard))
        try:
            f(x, out)
        except KernelRuntimeError as e:
            print("error:", e)
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
        out[:] = -1
        f(x, out)
        print("then:", out.tolist())
        """)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "error: kernel local: a local buffer could not be allocated" in result.stdout
    assert "then: [0.0, 1.0, 2.0, 3.0]" in result.stdout


def temp_func(shape):
    """A kernel with a temporary buffer of *shape* (float32) between its input and output."""
    A, O = Buffer("A", "float32", (4,), Scope.ARG), Buffer("O", "float32", (4,), Scope.ARG)
    T = Buffer("T", "float32", shape, Scope.TEMP)
    i, j = Var("i"), Var("j")
    body = Seq((For(i, 4, ForKind.SERIAL, Store(T, i, load(A, i) * 2.0)),
                For(j, 4, ForKind.SERIAL, Store(O, j, load(T, j)))))
    return LoweredFunc("with_temp", (A, O), (T,), body, {})


def test_a_temporary_numpy_cannot_allocate_is_an_einloop_error():
    f = compile_func(temp_func((2 ** 40, 2 ** 24)))          # 2**66 bytes
    with pytest.raises(KernelRuntimeError, match=r"kernel with_temp: cannot allocate its "
                                                 r"temporary buffer T \(float32\[1099511627776, "
                                                 r"16777216\], 73786976294838206464 bytes\)"):
        f(np.ones(4, np.float32), np.empty(4, np.float32))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses RLIMIT_AS")
def test_a_temporary_refused_by_the_allocator_is_an_einloop_error():
    result = run_python(f"""
        import resource, sys
        import numpy as np
        sys.path.insert(0, {str(__import__('pathlib').Path(__file__).parent)!r})
        from test_codegen_safety import temp_func
        from einloop.codegen import compile_func
        from einloop.errors import KernelRuntimeError

        f = compile_func(temp_func((2 ** 28,)))            # 1 GiB
        vm = next(int(l.split()[1]) for l in open("/proc/self/status") if l.startswith("VmSize"))
        resource.setrlimit(resource.RLIMIT_AS, (vm * 1024 + 2 ** 26, resource.RLIM_INFINITY))
        try:
            f(np.ones(4, np.float32), np.empty(4, np.float32))
        except KernelRuntimeError as e:
            print("error:", e)
        """)
    assert result.returncode == 0, result.stderr[-2000:]
    assert ("error: kernel with_temp: cannot allocate its temporary buffer T (float32[268435456], "
            "1073741824 bytes)") in result.stdout
