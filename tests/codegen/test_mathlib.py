"""Math intrinsics, scalar and vectorized, against float64 NumPy/math references."""
import math

import numpy as np
import pytest

from cgutil import SERIAL, VEC, Var, Store, arg, call, compile_func, func, ld, loop

KINDS = [SERIAL, VEC]
RNG = np.random.default_rng(1234)
SPECIAL = [np.inf, -np.inf, np.nan, 0.0, -0.0]


def run(name, x, dtype="float32", kind=VEC, y=None):
    n = x.size
    X, Y, O = arg("X", dtype, n), arg("Y", dtype, n), arg("O", dtype, n)
    i = Var("i")
    args = (ld(X, i),) if y is None else (ld(X, i), ld(Y, i))
    f = func(f"m_{name}", (X, Y, O), loop(i, n, Store(O, i, call(name, *args)), kind))
    out = np.zeros(n, dtype)
    compile_func(f)(x.astype(dtype), (x if y is None else y).astype(dtype), out)
    return out


def close(got, ref, rtol=2e-6, atol=3e-45):
    """Compare with the float64 reference rounded to the result dtype; NaN must match NaN."""
    ref = ref.astype(got.dtype)
    np.testing.assert_allclose(got.astype(np.float64), ref.astype(np.float64), rtol=rtol,
                               atol=atol, equal_nan=True)


def f32(*parts):
    return np.concatenate([np.asarray(p, dtype=np.float64).ravel() for p in parts]).astype(
        np.float32)


N = 20000
CASES = {
    "exp": (lambda: f32(RNG.uniform(-110, 95, N), SPECIAL, [88.72, 88.73, -103.9, -104.1]),
            np.exp),
    "log": (lambda: f32(10 ** RNG.uniform(-45, 38.5, N), RNG.uniform(0.5, 2, N), SPECIAL,
                        [-1, 1, 1e-45, 1.17e-38]), np.log),
    "tanh": (lambda: f32(RNG.uniform(-12, 12, N), RNG.uniform(-1, 1, N),
                         10 ** RNG.uniform(-30, 0, 1000), SPECIAL, [0.625, 0.6249, 1e-40]),
             np.tanh),
    "sigmoid": (lambda: f32(RNG.uniform(-110, 110, N), SPECIAL),
                lambda x: 1 / (1 + np.exp(-x))),
    "sqrt": (lambda: f32(10 ** RNG.uniform(-40, 38, N), SPECIAL, [-1]), np.sqrt),
    "abs": (lambda: f32(RNG.uniform(-1e6, 1e6, N), SPECIAL), np.abs),
    "floor": (lambda: f32(RNG.uniform(-1e3, 1e3, N), SPECIAL), np.floor),
    "ceil": (lambda: f32(RNG.uniform(-1e3, 1e3, N), SPECIAL), np.ceil),
}


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.value)
@pytest.mark.parametrize("name", sorted(CASES))
def test_float32_unary(name, kind):
    make, ref = CASES[name]
    x = make()
    with np.errstate(all="ignore"):
        close(run(name, x, kind=kind), ref(x.astype(np.float64)))


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.value)
def test_float32_erf_absolute_error(kind):
    x = f32(RNG.uniform(-6, 6, N), RNG.uniform(-1.2, 1.2, N), SPECIAL, [1, -1, 3.92, 3.93])
    got = run("erf", x, kind=kind)
    ref = np.array([math.erf(v) for v in x.astype(np.float64)])
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-6, equal_nan=True)
    assert got[np.isinf(x)].tolist() == [1.0, -1.0]
    assert np.abs(got - ref)[np.isfinite(x)].max() < 3e-7


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.value)
def test_float32_pow(kind):
    x = f32(RNG.uniform(0.01, 100, N), [-2, -2, -8, -8, 0, 0, -0.0, 1, 1, np.nan, 5, -1, -np.inf])
    y = f32(RNG.uniform(-15, 15, N), [3, 2, 1 / 3, -1, 2, -1, -1, np.nan, np.inf, 0, np.nan,
                                      np.inf, 0.5])
    with np.errstate(all="ignore"):
        ref = np.power(x.astype(np.float64), y.astype(np.float64))
    ref[-1] = np.inf   # pow(-inf, 0.5) is +inf in C and NumPy's float32 power
    close(run("pow", x, kind=kind, y=y), ref)


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.value)
@pytest.mark.parametrize("name", ["exp", "log", "tanh", "sigmoid", "erf", "pow", "sqrt"])
def test_float64_matches_libm(name, kind):
    x = np.concatenate([RNG.uniform(0.01, 20, 500), [0.5, 1.0, 2.0]])
    y = RNG.uniform(-3, 3, x.size)
    refs = {"exp": np.exp, "log": np.log, "tanh": np.tanh, "sqrt": np.sqrt,
            "sigmoid": lambda v: 1 / (1 + np.exp(-v)),
            "erf": np.vectorize(math.erf), "pow": lambda v: np.power(v, y)}
    got = run(name, x, "float64", kind, y=y if name == "pow" else None)
    np.testing.assert_allclose(got, refs[name](x), rtol=1e-14)


@pytest.mark.parametrize("name", ["exp", "tanh", "sigmoid", "sqrt", "abs"])
def test_float16_via_float32(name):
    x = RNG.uniform(-4, 4, 64).astype(np.float16)
    if name == "sqrt":
        x = np.abs(x)
    ref = CASES[name][1](x.astype(np.float64))
    np.testing.assert_allclose(run(name, x, "float16").astype(np.float64),
                               ref.astype(np.float16).astype(np.float64), rtol=2e-3, atol=1e-4)


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64"])
def test_integer_abs(dtype):
    x = np.array([-5, 0, 7, -100, 100] * 4, dtype=dtype)
    np.testing.assert_array_equal(run("abs", x, dtype), np.abs(x))


def test_unknown_intrinsic_is_a_build_error():
    from einloop.errors import BuildError
    with pytest.raises(BuildError, match="unknown intrinsic 'cosh'.*supported: exp"):
        run("cosh", np.ones(4, np.float32))


def test_vectorized_exp_does_not_call_libm():
    x = np.ones(64, np.float32)
    X, O = arg("X", "float32", 64), arg("O", "float32", 64)
    i = Var("i")
    k = compile_func(func("vexp", (X, O), loop(i, 64, Store(O, i, call("exp", ld(X, i))), VEC)))
    asm = k.get_source("asm")
    assert "expf" not in asm and "call" not in asm
    out = np.empty_like(x)
    k(x, out)
    close(out, np.exp(x.astype(np.float64)))
