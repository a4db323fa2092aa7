"""A kernel's call for plain NumPy arguments, written out for its signature.

Every call checks each argument's type, dtype, shape and flags, reads its data address, tests
the written arrays for overlap with the others and calls the C function.  As a loop over the
parameters that costs ~3 us for three arguments, mostly loop and attribute bookkeeping; written
out for one signature, with the expected values bound as constants (the way ``dataclasses`` and
``namedtuple`` make their methods), ~1.5 us, next to ~0.7 us for ctypes' own call.

The generated function takes only the common case: ndarrays, and objects NumPy views through
DLPack's versioned protocol without a copy (``np.from_dlpack(a, copy=False)``: PyTorch, JAX,
NumPy itself), checked alike.  Anything else, an argument that does not fit, or arrays that
overlap, go to the general path (``Kernel._call_general``), which also takes the array interface
and legacy DLPack producers and raises the errors; it repeats every check, so the fast path can
only ever decline, never accept what the general path would refuse.

With symbolic variables, the first argument (call order) and dimension that has a variable binds
it (``(v0 := h0[0]) >= 1``, its lower bound checked), every later occurrence is compared
(``a2.shape == (v0, 1024)``), the byte sizes of the overlap test are products of the values
(``v0 * 4096``), and the values go to the native code after the temporaries.  A signature
without variables gets exactly the code it always had.
"""
from __future__ import annotations

import ctypes

import numpy as np

from .threads import team_threads


def _symbolic_fit(p, bound, variables) -> str:
    """The test of symbolic parameter *p*'s shape, binding the variables not in *bound* (which
    it extends) from their first dimension: ``len(h0 := a0.shape) == 2 and (v0 := h0[0]) >= 1
    and h0 == (v0, 1024)``, or ``a2.shape == (v0, 1024)`` when all are bound already."""
    i, terms, fresh = p.pos, [], set()
    for axis, j in p.var_axes:
        if j not in bound:
            bound.add(j)
            fresh.add(axis)
            terms.append(f"(v{j} := h{i}[{axis}]) >= {variables[j].min_value}")
    dims = dict(p.var_axes)
    expected = [f"v{dims[axis]}" if axis in dims else str(d) for axis, d in enumerate(p.shape)]
    tuple_text = f"({', '.join(expected)}{',' if len(expected) == 1 else ''})"
    if not terms:
        return f"a{i}.shape == {tuple_text}"
    terms.insert(0, f"len(h{i} := a{i}.shape) == {len(p.shape)}")
    if len(fresh) < len(p.shape):               # static or repeated dimensions to compare
        terms.append(f"h{i} == {tuple_text}")
    return " and ".join(terms)


def _size(p) -> str:
    """*p*'s byte size as an expression: a constant, or ``v0 * 4096``."""
    if not p.symbolic:
        return str(p.nbytes)
    return " * ".join([f"v{j}" for _, j in p.var_axes] + [str(p.unit)])


def make_fast_call(kernel, params, pairs, temps, cfunc, parallel, data_offset, variables=()):
    """``call(arrays)`` for *kernel*: runs the code when every array fits, else
    ``kernel._call_general(arrays)``.

    *params* are the kernel's resolved parameters (``pos``, ``dtype``, ``shape``, ``flags``,
    ``nbytes``, ``var_axes``, ``unit``), *pairs* the (written, other) parameter pairs that must
    not overlap, *temps* whether calls take a block for temporaries (``kernel._take_temps``),
    *data_offset* where NumPy keeps an array's data pointer in its object (None: ask
    ``.ctypes.data``), *variables* the signature's VarSpecs.
    """
    n = len(params)
    env = {"nd": np.ndarray, "general": kernel._call_general, "cfunc": cfunc,
           "oom": kernel.out_of_memory, "kernel": kernel, "threads": team_threads,
           "at": ctypes.c_void_p.from_address, "off": data_offset, "from_dlpack": np.from_dlpack}
    fits, bound = [], set()
    for p in params:
        i = p.pos
        env[f"d{i}"], env[f"s{i}"], env[f"f{i}"] = p.dtype, p.shape, p.flags
        if p.symbolic:          # dtype and flags first: the shape test binds variables
            shape = _symbolic_fit(p, bound, variables)
            fits.append(f"a{i}.__class__ is nd and a{i}.dtype is d{i} "
                        f"and a{i}.flags.num & f{i} == f{i} and {shape}")
        else:
            fits.append(f"a{i}.__class__ is nd and a{i}.dtype is d{i} and a{i}.shape == s{i} "
                        f"and a{i}.flags.num & f{i} == f{i}")
    if data_offset is not None:
        address = "(at(id(a{i}) + off).value or 0)"
    else:
        address = "a{i}.ctypes.data"
    overlap = [f"(p{p.pos} < p{q.pos} + {_size(q)} and p{q.pos} < p{p.pos} + {_size(p)})"
               for p, q in pairs if p.unit and q.unit]
    values = [f"v{j}" for j in range(len(variables))]
    args = [f"p{p.pos}" for p in params]
    if temps:                   # the block is given back once the call has returned
        args.append("*temps")
    args += values
    args.append("threads(kernel._num_threads)" if parallel else "1")
    allocate = (f"block, temps = kernel._take_temps(({', '.join(values)},))" if values
                else "block, temps = kernel._take_temps()")
    invoke = [f"failed = cfunc({', '.join(args)})"]
    if temps:
        invoke.append("kernel._give_temps(block)")
    invoke += ["if failed:", "    oom()", "return"]
    names = ", ".join(f"a{p.pos}" for p in params) + ("," if n == 1 else "")
    lines = ["def call(arrays):",
             f"    if len(arrays) == {n}:" if n else "    if not arrays:"]
    body = []
    if n:
        body.append(f"{names} = arrays")
        for p in params:              # the views stay alive in these locals during the call
            body += [f"if a{p.pos}.__class__ is not nd:", "    try:",
                     f"        a{p.pos} = from_dlpack(a{p.pos}, copy=False)",
                     "    except Exception:", "        return general(arrays)"]
        body.append("if (" + "\n            and ".join(fits) + "):")
        inner = [f"p{p.pos} = {address.format(i=p.pos)}" for p in params]
        if overlap:
            inner.append("if (" + "\n                or ".join(overlap) + "):")
            inner.append("    return general(arrays)")
        if temps:
            inner.append(allocate)
        inner += invoke
        body += ["    " + line for line in inner]
    else:
        body += [allocate] if temps else []
        body += invoke
    lines += ["        " + line for line in body]
    lines.append("    return general(arrays)")
    source = "\n".join(lines) + "\n"
    exec(compile(source, f"<einloop call of kernel {kernel.name}>", "exec"), env)  # noqa: S102
    call = env["call"]
    call.source = source
    return call
