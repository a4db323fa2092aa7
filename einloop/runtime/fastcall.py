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
"""
from __future__ import annotations

import ctypes

import numpy as np

from .threads import default_num_threads


def make_fast_call(kernel, params, pairs, temps, cfunc, parallel, data_offset):
    """``call(arrays)`` for *kernel*: runs the code when every array fits, else
    ``kernel._call_general(arrays)``.

    *params* are the kernel's resolved parameters (``pos``, ``dtype``, ``shape``, ``flags``,
    ``nbytes``), *pairs* the (written, other) parameter pairs that must not overlap, *temps*
    whether temporaries are allocated per call, *data_offset* where NumPy keeps an array's
    data pointer in its object (None: ask ``.ctypes.data``).
    """
    n = len(params)
    env = {"nd": np.ndarray, "general": kernel._call_general, "cfunc": cfunc,
           "oom": kernel._out_of_memory, "kernel": kernel, "threads": default_num_threads,
           "at": ctypes.c_void_p.from_address, "off": data_offset, "from_dlpack": np.from_dlpack}
    fits = []
    for p in params:
        i = p.pos
        env[f"d{i}"], env[f"s{i}"], env[f"f{i}"] = p.dtype, p.shape, p.flags
        fits.append(f"a{i}.__class__ is nd and a{i}.dtype is d{i} and a{i}.shape == s{i} "
                    f"and a{i}.flags.num & f{i} == f{i}")
    if data_offset is not None:
        address = "(at(id(a{i}) + off).value or 0)"
    else:
        address = "a{i}.ctypes.data"
    overlap = [f"(p{p.pos} < p{q.pos} + {q.nbytes} and p{q.pos} < p{p.pos} + {p.nbytes})"
               for p, q in pairs if p.nbytes and q.nbytes]
    args = [f"p{p.pos}" for p in params]
    if temps:                   # held in a local: alive until the call returns
        args.append("*[t.ctypes.data for t in temps]")
    args.append("kernel._num_threads or threads()" if parallel else "1")
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
            inner.append("temps = kernel._allocate_temps()")
        inner.append(f"if cfunc({', '.join(args)}):")
        inner.append("    oom()")
        inner.append("return")
        body += ["    " + line for line in inner]
    else:
        body += ["temps = kernel._allocate_temps()"] if temps else []
        body += [f"if cfunc({', '.join(args)}):", "    oom()", "return"]
    lines += ["        " + line for line in body]
    lines.append("    return general(arrays)")
    source = "\n".join(lines) + "\n"
    exec(compile(source, f"<einloop call of kernel {kernel.name}>", "exec"), env)  # noqa: S102
    call = env["call"]
    call.source = source
    return call
