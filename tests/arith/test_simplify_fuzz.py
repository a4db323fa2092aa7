"""Halide-style fuzzing of the arithmetic core: random integer expressions over a few loop
variables with ranges, evaluated at random points by an evaluator of this file (NumPy scalars, so
every integer dtype wraps around as the machine does).  ``simplify`` must not change the value,
``const_bounds`` must contain it, ``prove`` must agree with it and ``refine`` must keep every
point where the condition holds.

Index (int64) arithmetic is assumed not to overflow (codegen emits it with ``nsw``): points where
an int64 operation overflows are skipped; narrower integers wrap freely.
"""
import random

import numpy as np
import pytest

from einloop.arith import const_bounds, prove, refine, simplify
from einloop.ir import expr as E

INTS = ("int8", "int16", "int32", "int64", "uint8")
OPS = ("+", "-", "*", "//", "%", "tdiv", "tmod", "max", "min")
CMPS = ("<", "<=", ">", ">=", "==", "!=")
N_EXPRS = 3000
N_POINTS = 4


class Overflow(Exception):
    """An int64 operation overflowed at this point: outside the semantics under test."""


# an independent evaluator ----------------------------------------------------------------------

def evaluate(e, env):
    """The value of *e* as a NumPy scalar of its dtype; ``env``: Var -> int."""
    if isinstance(e, E.Const):
        return np.dtype(e.dtype).type(e.value)
    if isinstance(e, E.Var):
        return np.int64(env[e])
    if isinstance(e, E.Select):
        return evaluate(e.true_value if evaluate(e.cond, env) else e.false_value, env)
    if isinstance(e, E.Cast):
        return np.asarray(evaluate(e.value, env)).astype(e.dtype)[()]
    if isinstance(e, E.Not):
        return np.bool_(not evaluate(e.a, env))
    if isinstance(e, E.Logical):
        a = bool(evaluate(e.a, env))
        return np.bool_(a and evaluate(e.b, env) if e.op is E.LogicOp.AND
                        else a or evaluate(e.b, env))
    a, b = evaluate(e.a, env), evaluate(e.b, env)
    if isinstance(e, E.Compare):
        return np.bool_({"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b, "==": a == b,
                         "!=": a != b}[e.op.symbol])
    with np.errstate(all="ignore"):
        v = {"+": lambda: a + b, "-": lambda: a - b, "*": lambda: a * b,
             "//": lambda: a // b, "%": lambda: a % b, "max": lambda: max(a, b),
             "min": lambda: min(a, b), "tmod": lambda: np.fmod(a, b),
             "tdiv": lambda: (a - np.fmod(a, b)) // b}[e.op.symbol]()
    if e.dtype == "int64" and e.op.symbol in ("+", "-", "*", "//", "tdiv"):
        exact = {"+": int(a) + int(b), "-": int(a) - int(b), "*": int(a) * int(b)}.get(e.op.symbol)
        if exact is None and int(b) == -1:
            exact = -int(a)
        if exact is not None and exact != int(v):
            raise Overflow
    return v


# a generator -----------------------------------------------------------------------------------

class Gen:
    def __init__(self, rng, variables):
        self.r = rng
        self.vars = variables

    def const(self, dtype):
        lo, hi = np.iinfo(dtype).min, np.iinfo(dtype).max
        if self.r.random() < 0.3 and dtype != "int64":
            return E.const(self.r.randint(int(lo), int(hi)), dtype)
        if self.r.random() < 0.2:
            return E.const(self.r.choice([0, 1, -1, 2 ** 31 - 1, -2 ** 31, 127, 255, 2 ** 31 - 3]
                                         if dtype == "int64" else [0, 1, int(lo), int(hi)]), dtype)
        return E.const(min(max(self.r.randint(-20, 20), int(lo)), int(hi)), dtype)

    def leaf(self, dtype):
        if self.r.random() < 0.6:
            v = self.r.choice(self.vars)
            return v if dtype == "int64" else E.Cast(dtype, v)
        return self.const(dtype)

    def int_expr(self, dtype, depth):
        r = self.r.random()
        if depth == 0 or r < 0.15:
            return self.leaf(dtype)
        if r < 0.25:
            src = self.r.choice([t for t in INTS if t != dtype] + ["bool"])
            inner = self.cond(depth - 1) if src == "bool" else self.int_expr(src, depth - 1)
            return E.Cast(dtype, inner)
        if r < 0.32:
            return E.Select(self.cond(depth - 1), self.int_expr(dtype, depth - 1),
                            self.int_expr(dtype, depth - 1), dtype)
        if r < 0.4 and dtype == "int64":
            return self.fused_index(depth)
        op = self.r.choice(OPS)
        a = self.int_expr(dtype, depth - 1)
        if op in ("//", "%", "tdiv", "tmod") and self.r.random() < 0.6:
            b = E.const(self.r.choice([1, 2, 3, 7, 16, 56, -1, -3, 0]) if dtype != "uint8"
                        else self.r.choice([1, 2, 3, 7, 16, 56, 0]), dtype)
        else:
            b = self.int_expr(dtype, depth - 1)
        return E.Binary(E.BinOp(op), a, b, dtype)

    def fused_index(self, depth):
        """The div/mod pairs that fuse and split produce, over an int64 expression y."""
        y = self.int_expr("int64", depth - 1)
        a, b = self.r.choice([2, 3, 16, 56]), self.r.choice([2, 4, 56])
        ca, cb, cab = E.const(a), E.const(b), E.const(a * b)
        if self.r.random() < 0.5:
            return (y // ca) * ca + y % ca
        return (y // ca // cb) * cab + ((y // ca) % cb) * ca + y % ca

    def cond(self, depth):
        r = self.r.random()
        if depth > 0 and r < 0.2:
            op = self.r.choice(("and", "or"))
            return E.Logical(E.LogicOp(op), self.cond(depth - 1), self.cond(depth - 1))
        if depth > 0 and r < 0.25:
            return E.Not(self.cond(depth - 1))
        dtype = self.r.choice(INTS)
        d = max(depth - 1, 0)
        op = E.CmpOp(self.r.choice(CMPS))
        return E.Compare(op, self.int_expr(dtype, d), self.int_expr(dtype, d))


def random_ranges(rng, variables):
    out = {}
    for v in variables:
        base = rng.choice([0, -10, 100, 2 ** 31 - 8, -2 ** 31 - 2, 250, 120, 2 ** 40])
        lo = base + rng.randint(-5, 5)
        out[v] = (lo, lo + rng.choice([0, 1, 3, 10, 100]))
    return out


# the checks ------------------------------------------------------------------------------------

def check(e, ranges, rng, stats):
    simple, plain = simplify(e, ranges), simplify(e)
    bounds = [(x, const_bounds(x, ranges)) for x in (e, simple)]
    is_cond = e.dtype == "bool"
    decided = prove(e, ranges) if is_cond else None
    refined = refine(ranges, e) if is_cond else None
    for _ in range(N_POINTS):
        env = {v: rng.randint(lo, hi) for v, (lo, hi) in ranges.items()}
        try:
            want = evaluate(e, env)
            got = [evaluate(x, env) for x in (simple, plain)]
        except Overflow:
            stats["skipped"] += 1
            continue
        stats["checked"] += 1
        assert got[0] == want and got[1] == want, (
            f"simplify changed the value at {env_str(env)}: {e} = {want}, but {simple} = {got[0]}"
            f" and {plain} = {got[1]}")
        for x, b in bounds:
            assert b is None or b[0] <= int(want) <= b[1], (
                f"const_bounds({x}) = {b} misses {want} at {env_str(env)} (ranges {rs(ranges)})")
        if decided is not None:
            assert decided == bool(want), f"prove({e}) = {decided} but it is {want} at {env_str(env)}"
        if is_cond and want:
            assert refined is not None and all(refined[v][0] <= x <= refined[v][1]
                                               for v, x in env.items()), (
                f"refine by {e} dropped {env_str(env)}: {refined and rs(refined)}")


def env_str(env):
    return ", ".join(f"{v.name}={x}" for v, x in env.items())


def rs(ranges):
    return ", ".join(f"{v.name}:{lo}..{hi}" for v, (lo, hi) in ranges.items())


@pytest.mark.parametrize("seed", [0, 1])
def test_simplify_bounds_prove_and_refine_agree_with_evaluation(seed):
    rng = random.Random(seed)
    variables = [E.Var("x"), E.Var("y"), E.Var("z")]
    gen = Gen(rng, variables)
    stats = {"checked": 0, "skipped": 0}
    for n in range(N_EXPRS // 2):
        ranges = random_ranges(rng, variables)
        e = gen.cond(3) if n % 4 == 0 else gen.int_expr(rng.choice(INTS), rng.randint(1, 4))
        check(e, ranges, rng, stats)
    assert stats["checked"] > stats["skipped"] * 4, stats     # the skips are rare
