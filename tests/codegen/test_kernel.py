"""The Kernel wrapper (argument checks, sources, timing), the compile cache and targets."""
import numpy as np
import pytest

from cgutil import VEC, Store, Var, arg, compile_func, func, ld, loop, temp
from einloop.codegen import Target
from einloop.runtime import Kernel, Timing
from einloop.errors import ArgumentError, BuildError, Error


def fma_func(n=64, dtype="float32", name="fma"):
    A, B, C = arg("A", dtype, n), arg("B", dtype, n), arg("C", dtype, n)
    i = Var("i")
    return func(name, (A, B, C), loop(i, n, Store(C, i, ld(A, i) * ld(B, i) + ld(C, i)), VEC))


@pytest.fixture(scope="module")
def kern():
    return compile_func(fma_func())


def arrays(n=64):
    return [np.ones(n, np.float32) for _ in range(3)]


def test_call_and_repr(kern):
    a, b, c = arrays()
    kern(a, b, c)
    assert (c == 2).all()
    assert isinstance(kern, Kernel)
    assert "fma(A: float32[64]" in repr(kern)


@pytest.mark.parametrize("mutate,pattern", [
    (lambda xs: xs[:2], r"kernel fma takes 3 arrays \(A: float32\[64\], B: float32\[64\], "
                        r"C: float32\[64\]\), got 2"),
    (lambda xs: [xs[0], list(xs[1]), xs[2]], r"argument 1 \(B\): expected a numpy.ndarray of "
                                             r"float32\[64\], got list"),
    (lambda xs: [xs[0].astype(np.float64), xs[1], xs[2]],
     r"argument 0 \(A\): expected dtype float32, got float64"),
    (lambda xs: [xs[0], xs[1], np.ones(65, np.float32)],
     r"argument 2 \(C\): expected shape \(64,\), got \(65,\)"),
    (lambda xs: [xs[0], np.ones(128, np.float32)[::2], xs[2]],
     r"argument 1 \(B\): the array is not C-contiguous"),
    (lambda xs: [xs[0], xs[1], np.broadcast_to(np.float32(1), (64,))],
     r"argument 2 \(C\): (the kernel writes this array but it is read-only|.*C-contiguous)"),
    (lambda xs: [xs[0], xs[2], xs[2]],
     r"argument 2 \(C\): the kernel writes this array but it shares memory with argument 1 "
     r"\(B\)"),
])
def test_argument_errors(kern, mutate, pattern):
    with pytest.raises(ArgumentError, match=pattern):
        kern(*mutate(arrays()))


def test_read_only_output_and_declared_outputs():
    ro = np.ones(64, np.float32)
    ro.flags.writeable = False
    k = compile_func(fma_func())
    with pytest.raises(ArgumentError, match=r"argument 2 \(C\): the kernel writes this array "
                                            "but it is read-only"):
        k(*arrays()[:2], ro)
    # inputs may alias each other and be read-only
    a = np.ones(64, np.float32)
    a.flags.writeable = False
    c = np.zeros(64, np.float32)
    k(a, a, c)
    assert (c == 1).all()
    # an explicitly declared output is checked, the last argument then is not
    f = fma_func()
    f.attrs["outputs"] = ["A"]
    k2 = compile_func(f)
    with pytest.raises(ArgumentError, match=r"argument 0 \(A\): the kernel writes"):
        k2(ro, *arrays()[:2])


def test_temps_are_allocated_per_call():
    n = 32
    A, O = arg("A", "float32", n), arg("O", "float32", n)
    T = temp("T", "float32", n)
    i, j = Var("i"), Var("j")
    from cgutil import seq
    body = seq(loop(i, n, Store(T, i, ld(A, i) + 1.0), VEC),
               loop(j, n, Store(O, j, ld(T, n - 1 - j) * 2.0), VEC))
    k = compile_func(func("temps", (A, O), body, temps=(T,)))
    a, o = np.arange(n, dtype=np.float32), np.zeros(n, np.float32)
    k(a, o)
    np.testing.assert_array_equal(o, (a[::-1] + 1) * 2)
    assert "ptr noalias %\"T\"" in k.get_source("llvm-unopt")


def test_compile_cache_reuses_the_compiled_code():
    k1 = compile_func(fma_func(name="cached"))
    k2 = compile_func(fma_func(name="cached"))        # equal structure, new objects
    assert k1 is not k2 and k1.owner is k2.owner
    k3 = compile_func(fma_func(name="cached", dtype="float64"))
    k4 = compile_func(fma_func(n=65, name="cached"))
    assert len({id(k.owner) for k in (k1, k3, k4)}) == 3


def test_cache_key_tells_same_named_variables_apart():
    # O[i*4 + j] = i  vs  O[i*4 + j] = j, where both loop variables are called "i"
    O = arg("O", "int64", 4, 4)
    outer, inner = Var("i"), Var("i")
    k_outer = compile_func(func("shadow", (O,), loop(outer, 4, loop(inner, 4, Store(
        O, outer * 4 + inner, outer)))))
    k_inner = compile_func(func("shadow", (O,), loop(outer, 4, loop(inner, 4, Store(
        O, outer * 4 + inner, inner)))))
    assert k_outer.owner is not k_inner.owner
    o1, o2 = np.zeros((4, 4), np.int64), np.zeros((4, 4), np.int64)
    k_outer(o1)
    k_inner(o2)
    np.testing.assert_array_equal(o1, o2.T)


def test_sources(kern):
    assert "fmul contract <64 x float>" in kern.get_source("llvm-unopt")
    assert "define noundef i32 @einloop_fma" in kern.get_source("llvm").replace('"', "")
    assert "for i in range(64)" in kern.get_source("ir")
    with pytest.raises(BuildError, match="unknown source format 'c'.*'llvm', 'llvm-unopt', "
                                         "'asm', 'ir'"):
        kern.get_source("c")


@pytest.mark.skipif(not Target.parse("llvm").has_feature("avx512f"), reason="needs AVX-512")
def test_vectorized_fma_uses_zmm_and_vfmadd(kern):
    asm = kern.get_source("asm")
    assert "zmm" in asm and "vfmadd" in asm


def test_time(kern):
    t = kern.time(*arrays(), number=5, repeat=4)
    assert isinstance(t, Timing) and len(t.results) == 4 and t.number == 5
    assert 0 < t.min <= t.median <= t.max and t.stdev >= 0
    t = kern.time(*arrays(), min_repeat_ms=2, repeat=2)
    assert t.number > 1      # calibrated from a run that took >= 2 ms; later runs may be faster
    with pytest.raises(ArgumentError, match="repeat must be"):
        kern.time(*arrays(), repeat=0)
    with pytest.raises(ArgumentError, match="expected dtype"):
        kern.time(*arrays()[:2], np.ones(64))
    with pytest.raises(AttributeError):
        t.median = 1.0


def test_num_threads_validation(kern):
    with pytest.raises(ArgumentError, match="num_threads must be a positive int"):
        kern.num_threads = 0
    kern.num_threads = 2
    assert kern.num_threads == 2
    kern.num_threads = None


def test_target_parsing():
    host = Target.parse("llvm")
    assert str(Target.parse(str(host))) == str(host)
    assert Target.parse(host) is host
    t = Target.parse("llvm -mcpu=skylake-avx512 -mattr=+avx2,-avx512f")
    assert t.cpu == "skylake-avx512" and t.has_feature("avx2") and not t.has_feature("avx512f")
    edited = Target.parse("llvm -mattr=-avx512f")
    assert edited.cpu == host.cpu and "-avx512f" in edited.features.split(",")
    for bad, msg in [("cuda", "only 'llvm' targets"), ("llvm -mcpu", "bad option"),
                     ("llvm -mfoo=1", "bad option"), ("llvm -mattr=avx2", "bad -mattr"),
                     ("llvm -mcpu=a -mcpu=b", "given twice"), (3, "must be a string")]:
        with pytest.raises(BuildError, match=msg):
            Target.parse(bad)
    assert issubclass(BuildError, Error)


def test_compile_for_a_target_without_avx512():
    k = compile_func(fma_func(name="noavx512"), "llvm -mattr=-avx512f")
    a, b, c = arrays()
    k(a, b, c)
    assert (c == 2).all()
    assert "zmm" not in k.get_source("asm")


@pytest.mark.parametrize("cpu,wide,narrow", [("skylake-avx512", "zmm", None),
                                             ("haswell", "ymm", "zmm")])
def test_explicit_cpu_gets_its_vector_width(cpu, wide, narrow):
    asm = compile_func(fma_func(name="cpu"), f"llvm -mcpu={cpu}").get_source("asm")
    assert wide in asm and "vfmadd" in asm
    assert narrow is None or narrow not in asm


def test_freed_engines_leave_the_shared_target_machine_alive(monkeypatch):
    # an MCJIT engine owns (and frees) the TargetMachine it is given: it must not be the shared
    # one that optimisation and get_source('asm') keep using
    import gc
    from einloop.codegen import jit
    for n in range(3):
        monkeypatch.setattr(jit, "_cache", {})
        k = compile_func(fma_func(n=8 + n, name="freed"))
        k(*arrays(8 + n))
        del k
        gc.collect()
    k = compile_func(fma_func(n=16, name="after_free"))
    a, b, c = arrays(16)
    k(a, b, c)
    assert (c == 2).all() and "vfmadd" in k.get_source("asm")
