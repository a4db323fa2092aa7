"""Kernels that cross a process boundary: compiled to optimised LLVM IR here, JIT-ed elsewhere.

``make_portable(func, target)`` emits, verifies and O3-optimises a lowered kernel (the same steps
as :func:`einloop.codegen.jit.jit_compile`, without the JIT) and returns a :class:`PortableKernel`:
a small picklable value holding the optimised IR text and what the :class:`Kernel` wrapper needs
to check and call it (the argument and temp buffer specs, the written outputs, whether it
launches thread teams).  ``load(pk)`` JIT-compiles it in the current process and returns an
ordinary :class:`Kernel`, with the usual argument checks, ``get_source`` and ``time()``.

The auto-tuner builds candidates in worker processes and runs them in another one; only IR text
and specs travel between them.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import llvmlite.binding as llvm

from ..errors import InternalError
from ..ir import stmt as L
from .jit import Compiled, _lock, emit_optimised, link
from .kernel import Kernel
from .target import Target


@dataclass(frozen=True)
class BufferSpec:
    """Name, dtype and shape of a kernel argument or temp buffer."""
    name: str
    dtype: str
    shape: tuple

    def describe(self):
        return f"{self.name}: {self.dtype}[{', '.join(map(str, self.shape))}]"


@dataclass(frozen=True)
class PortableKernel:
    """A compiled-but-not-JIT-ed kernel: optimised LLVM IR plus the specs of its buffers."""
    name: str                 # the LoweredFunc's name
    symbol: str               # the kernel's function in the IR
    llvm_ir: str              # optimised (O3) LLVM IR, with the target's data layout
    args: tuple               # BufferSpec of each argument, in call order
    temps: tuple              # BufferSpec of each temp buffer (the Kernel allocates them)
    outputs: tuple            # names of the arguments the kernel writes
    parallel: bool            # does it launch libgomp thread teams?
    target: str               # str(Target): round-trips through Target.parse
    loop_ir: str = ""         # the loop IR, for debugging (``Kernel.get_source("ir")``)
    unopt_ir: str = field(default="", repr=False)   # the IR before optimisation

    @property
    def inputs(self) -> tuple:
        """Specs of the arguments the kernel only reads."""
        return tuple(a for a in self.args if a.name not in self.outputs)

    def __repr__(self):
        sig = ", ".join(a.describe() for a in self.args)
        return (f"PortableKernel({self.name}({sig}), outputs={list(self.outputs)}, "
                f"parallel={self.parallel}, {len(self.llvm_ir)} chars of IR)")


def _spec(buf) -> BufferSpec:
    return BufferSpec(buf.name, str(buf.dtype), tuple(int(d) for d in buf.shape))


def make_portable(func: L.LoweredFunc, target="llvm") -> PortableKernel:
    """Emit, verify and optimise *func* for *target*; nothing is JIT-compiled."""
    target = Target.parse(target)
    mod, text, symbol, parallel, target = emit_optimised(func, target)
    opt_text = str(mod)
    outputs = func.attrs.get("outputs")
    if outputs is None:
        outputs = [func.args[-1].name] if func.args else []
    return PortableKernel(name=func.name, symbol=symbol, llvm_ir=opt_text,
                          args=tuple(_spec(b) for b in func.args),
                          temps=tuple(_spec(b) for b in func.temps),
                          outputs=tuple(outputs), parallel=bool(parallel), target=str(target),
                          loop_ir=str(func), unopt_ir=text)


@dataclass(frozen=True, eq=False, repr=False)
class _LoadedFunc(L.LoweredFunc):
    """A LoweredFunc rebuilt from specs: buffers and attrs are real, the body is not.

    ``str()`` gives the original loop IR text, so ``Kernel.get_source("ir")`` still works.
    """
    text: str = ""

    def __str__(self):
        return self.text

    def __repr__(self):
        return f"<loaded LoweredFunc {self.name}>"


def _func_of(pk: PortableKernel) -> _LoadedFunc:
    args = tuple(L.Buffer(s.name, s.dtype, tuple(s.shape), L.Scope.ARG) for s in pk.args)
    temps = tuple(L.Buffer(s.name, s.dtype, tuple(s.shape), L.Scope.TEMP) for s in pk.temps)
    return _LoadedFunc(pk.name, args, temps, L.Seq(()), {"outputs": tuple(pk.outputs)},
                       text=pk.loop_ir)


def load(pk: PortableKernel) -> Kernel:
    """JIT-compile *pk* in this process and wrap it in a :class:`Kernel`.

    Every call makes a new execution engine (with a fresh target machine, which the engine owns);
    the engine lives as long as the returned Kernel.
    """
    if not isinstance(pk, PortableKernel):
        raise TypeError(f"load() takes a PortableKernel, got {type(pk).__name__}")
    target = Target.parse(pk.target)
    if pk.parallel:
        from .parallel import gomp_available
        gomp_available()                  # GOMP_parallel must resolve when the engine links
    with _lock:
        try:
            mod = llvm.parse_assembly(pk.llvm_ir)
            mod.verify()
        except RuntimeError as exc:
            raise InternalError(f"portable kernel {pk.name}: its LLVM IR does not parse: "
                                f"{exc}") from None
        engine, address = link(mod, target, pk.symbol, pk.name)
    compiled = Compiled(pk.symbol, address, engine, pk.unopt_ir or pk.llvm_ir, pk.llvm_ir,
                        target, pk.parallel)
    return Kernel(_func_of(pk), compiled)
