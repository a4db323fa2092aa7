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
from ..runtime import BufferSpec, Kernel, Signature  # noqa: F401  (BufferSpec: re-exported)
from .compiled import Compiled
from .jit import PhaseClock, emit_optimised, link
from .llvm import llvm_lock
from .kernel import kernel_options, signature_of
from .target import Target


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
    vars: tuple = ()          # VarSpec of each symbolic extent, in the order the kernel takes

    @property
    def signature(self) -> Signature:
        """What the runtime needs to check and call the kernel."""
        return Signature(self.args, self.temps, self.outputs, self.vars)

    @property
    def inputs(self) -> tuple:
        """Specs of the arguments the kernel only reads."""
        return self.signature.inputs

    def __repr__(self):
        sig = ", ".join(a.describe() for a in self.args)
        return (f"PortableKernel({self.name}({sig}), outputs={list(self.outputs)}, "
                f"parallel={self.parallel}, {len(self.llvm_ir)} chars of IR)")


def make_portable(func: L.LoweredFunc, target="llvm", timings=None) -> PortableKernel:
    """Emit, verify and optimise *func* for *target*; nothing is JIT-compiled.

    *timings*: see :func:`~einloop.codegen.jit.emit_optimised` (the benchmark's phase times).
    """
    target = Target.parse(target)
    mod, text, symbol, parallel, target = emit_optimised(func, target, timings)
    clock = PhaseClock(timings)
    llvm_ir = str(mod)
    clock.lap("codegen")
    sig = signature_of(func)
    return PortableKernel(name=func.name, symbol=symbol, llvm_ir=llvm_ir, args=sig.args,
                          temps=sig.temps, outputs=sig.outputs, parallel=bool(parallel),
                          target=str(target), loop_ir=str(func), unopt_ir=text,
                          vars=sig.vars)


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
    with llvm_lock:
        try:
            mod = llvm.parse_assembly(pk.llvm_ir)
            mod.verify()
        except RuntimeError as exc:
            raise InternalError(f"portable kernel {pk.name}: its LLVM IR does not parse: "
                                f"{exc}") from None
        engine, address = link(mod, target, pk.symbol, pk.name)
    compiled = Compiled(pk.symbol, address, engine, pk.unopt_ir or pk.llvm_ir, pk.llvm_ir,
                        target, pk.parallel)
    return Kernel(pk.name, pk.signature, address, compiled, **kernel_options(compiled, pk.loop_ir))
