"""``te.einsum``: NumPy einsum subscripts turned into an ordinary compute."""
from __future__ import annotations

from functools import reduce as _fold
import operator

from ..errors import TEError
from .compute import compute
from .reduce import sum as _sum
from .tensor import Tensor, reduce_axis


def _parse(subscripts, n_operands):
    s = subscripts.replace(" ", "")
    if "." in s:
        raise TEError(f"einsum {subscripts!r}: ellipsis ('...') is not supported; name every axis")
    if "->" in s:
        lhs, out = s.split("->", 1)
        if "->" in out:
            raise TEError(f"einsum {subscripts!r}: more than one '->'")
    else:
        lhs = s
        counts = {}
        for c in lhs.replace(",", ""):
            counts[c] = counts.get(c, 0) + 1
        out = "".join(sorted(c for c, n in counts.items() if n == 1))
    inputs = lhs.split(",")
    if len(inputs) != n_operands:
        raise TEError(f"einsum {subscripts!r} names {len(inputs)} operand(s) but "
                      f"{n_operands} tensor(s) were given")
    for term in inputs + [out]:
        bad = [c for c in term if not c.isalpha()]
        if bad:
            raise TEError(f"einsum {subscripts!r}: {bad[0]!r} is not an axis letter")
    if len(set(out)) != len(out):
        raise TEError(f"einsum {subscripts!r}: the output {out!r} repeats an index")
    for c in out:
        if c not in lhs:
            raise TEError(f"einsum {subscripts!r}: output index {c!r} appears in no operand")
    return inputs, out


def einsum(subscripts, *tensors, name="einsum") -> Tensor:
    """Declare ``numpy.einsum(subscripts, *tensors)`` as a compute; repeated indices are summed."""
    if not isinstance(subscripts, str):
        raise TEError(f"einsum: the first argument must be the subscripts string, got {subscripts!r}")
    for t in tensors:
        if not isinstance(t, Tensor):
            raise TEError(f"einsum: operands must be einloop tensors, got {t!r}")
    inputs, out = _parse(subscripts, len(tensors))
    sizes, first = {}, {}
    for term, t in zip(inputs, tensors):
        if len(term) != t.ndim:
            raise TEError(f"einsum {subscripts!r}: operand {t.name} has {t.ndim} dimension(s) "
                          f"but its subscript {term!r} names {len(term)}")
        for c, n in zip(term, t.shape):
            first.setdefault(c, t.name)
            if sizes.setdefault(c, n) != n:
                raise TEError(f"einsum {subscripts!r}: index {c!r} has extent {sizes[c]} in "
                              f"{first[c]} but {n} in {t.name}; an index must have one extent")
    dtype = tensors[0].dtype
    for t in tensors:
        if t.dtype != dtype:
            raise TEError(f"einsum {subscripts!r}: operands mix dtypes {dtype} and {t.dtype}; "
                          "cast them to one dtype first")
    summed = [c for c in dict.fromkeys("".join(inputs)) if c not in out]
    raxes = {c: reduce_axis((0, sizes[c]), name=c) for c in summed}
    shape = tuple(sizes[c] for c in out) or (1,)

    def body(*idx):
        env = dict(zip(out, idx))
        env.update({c: raxes[c].var for c in summed})
        prod = _fold(operator.mul, [t[tuple(env[c] for c in term)] for term, t in zip(inputs, tensors)])
        return _sum(prod, axis=[raxes[c] for c in summed]) if summed else prod

    if out:
        fn = _named(body, list(out))
    else:
        fn = lambda _: body()                          # noqa: E731  (a scalar result of shape (1,))
    return compute(shape, fn, name=name)


def _named(body, names):
    """A function with parameters named after the output indices, so loops get those names."""
    src = f"lambda {', '.join(names)}: body({', '.join(names)})"
    return eval(src, {"body": body})                   # noqa: S307  (names are single letters)
