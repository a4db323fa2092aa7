"""A kernel with symbolic extents compiled from several schedules: each call runs the one tuned
nearest its sizes.

Nearest is by distance in log-size (summed over the extents): 300 is nearer 256 than 2048, and 3
nearer 1 than 16, which is how tile and thread choices scale; a tie goes to the larger sizes.  The choice for each set of sizes is
remembered, so a call costs one dictionary lookup over what a kernel call costs.
"""
from __future__ import annotations

import math

from ..errors import ArgumentError, InternalError


class DispatchKernel:
    """*cases*: ``[(sizes, Kernel)]``, *sizes* the values of *names* (in that order) a kernel's
    schedule was tuned at; every kernel takes the same arguments."""

    def __init__(self, name, names, cases):
        if not cases:
            raise InternalError(f"dispatch kernel {name}: no kernels")
        self.name, self.names = name, tuple(names)
        self.cases = [(tuple(int(v) for v in sizes), k) for sizes, k in cases]
        first = self.cases[0][1].signature
        for _, k in self.cases:
            if k.signature.args != first.args:
                raise InternalError(f"dispatch kernel {name}: its kernels take different "
                                    "arguments")
        self.signature = first
        where = {}
        for pos, spec in enumerate(first.args):
            for dim, d in enumerate(spec.shape):
                if isinstance(d, str):
                    where.setdefault(d, (pos, dim))
        missing = [n for n in self.names if n not in where]
        if missing:
            raise InternalError(f"dispatch kernel {name}: no argument has {missing}")
        self._where = tuple(where[n] for n in self.names)
        self._chosen = {}

    @property
    def kernels(self) -> tuple:
        """The distinct kernels, in case order."""
        out = []
        for _, k in self.cases:
            if not any(k is x for x in out):
                out.append(k)
        return tuple(out)

    def sizes_of(self, arrays) -> tuple:
        """The values of the symbolic extents in *arrays* (from the first argument that has
        each), as the kernel would bind them."""
        if len(arrays) != len(self.signature.args):
            return None
        out = []
        for pos, dim in self._where:
            shape = getattr(arrays[pos], "shape", None)
            if shape is None or len(shape) <= dim:
                return None
            out.append(int(shape[dim]))
        return tuple(out)

    def nearest(self, sizes) -> tuple:
        """The sizes (a tuple in ``names`` order) of the case tuned nearest *sizes*."""
        return self._case(tuple(sizes))[0]

    def choose(self, sizes):
        """The kernel tuned nearest *sizes* (a tuple in ``names`` order)."""
        return self._case(sizes)[1]

    def _case(self, sizes):
        case = self._chosen.get(sizes)
        if case is None:
            def distance(c):       # ties go to the larger sizes (more parallel schedules)
                return (sum(abs(math.log2(max(a, 1)) - math.log2(max(b, 1)))
                            for a, b in zip(c[0], sizes)), -sum(c[0]))
            case = min(self.cases, key=distance)
            if len(self._chosen) < 4096:
                self._chosen[sizes] = case
        return case

    @property
    def export_together(self):
        """How ``runtime.export_library`` reaches the compiler (see CompiledKernel)."""
        return getattr(self.cases[0][1], "export_together", None)

    def export_library(self, path, header=False) -> str:
        """Write the kernels and the dispatch table into one shared library;
        ``runtime.load_module(path)[name]`` (or the module itself) is this kernel again."""
        export = self.export_together
        if export is None:
            raise ArgumentError(f"kernel {self.name} was loaded from a library, which holds "
                                "it already")
        return export([self], path, header=header)

    def __call__(self, *arrays):
        sizes = self.sizes_of(arrays)
        if sizes is None:                  # wrong count or no .shape: the kernel says what
            return self.cases[0][1](*arrays)
        return self._case(sizes)[1](*arrays)

    def time(self, *arrays, **kwargs):
        sizes = self.sizes_of(arrays)
        if sizes is None:
            raise ArgumentError(f"kernel {self.name}: cannot read the sizes of its arguments")
        return self.choose(sizes).time(*arrays, **kwargs)

    def __repr__(self):
        tuned = "; ".join(", ".join(f"{n}={v}" for n, v in zip(self.names, s))
                          for s, _ in self.cases)
        return f"<einloop.DispatchKernel {self.name}({self.signature}) tuned at {tuned}>"
