"""Kernels compiled in one process and run in another: object code that travels.

``ship(func, target)`` compiles a lowered kernel to object code exactly as ``build`` does
(:func:`einloop.codegen.jit.object_code`: the same unoptimised IR, O3 pipeline, target machine
and MCJIT code generation, or the persistent compile cache's entry if it has one) and returns a
:class:`ShippedKernel`: a picklable value holding that object, the cache key it belongs under,
and what the :class:`Kernel` wrapper needs to check and call it (the argument and temp buffer
specs, the written outputs, the symbolic extents).  ``load(sk)`` loads the object into an
execution engine of the current process, compiling nothing, and returns an ordinary
:class:`Kernel` with the usual argument checks, ``get_source`` and ``time()``.
``seed_cache(sk)`` stores the object in the persistent cache, where ``build`` of the same
kernel finds it.

The auto-tuner builds candidates in worker processes and times them in another one; only the
shipped kernels travel between them.  A kernel of an operator with constant inputs travels
split (:func:`ship_split`): its main function, and the prologue that computes what depends on
the constants alone, which the runner runs once before checking and timing the main function.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..ir import stmt as L
from ..runtime import Kernel, Signature
from ..schedule.passes.split_prologue import split_prologue
from . import amx, cache, extern
from .compiled import Compiled
from .jit import load_object, object_code
from .kernel import kernel_options, signature_of
from .llvm import llvm_lock
from .parallel import gomp_available
from .target import Target


@dataclass(frozen=True)
class ShippedKernel:
    """A kernel's object code, ready to load in another process, and the specs of its buffers."""
    name: str                 # the LoweredFunc's name
    key: str                  # the persistent compile cache's key for this code
    entry: cache.CacheEntry = field(repr=False)   # object code, symbol, threads, target, O3 IR
    args: tuple               # BufferSpec of each argument, in call order
    temps: tuple              # BufferSpec of each temp buffer (the Kernel allocates them)
    outputs: tuple            # names of the arguments the kernel writes
    vars: tuple = ()          # VarSpec of each symbolic extent, in the order the kernel takes
    loop_ir: str = field(default="", repr=False)    # the loop IR (``get_source("ir")``)
    unopt_ir: str = field(default="", repr=False)   # the LLVM IR before optimisation
    externs: tuple = ()       # (symbol, library) of each external function it calls
    #: a split kernel's prologue (see :func:`ship_split`): it reads the arguments at positions
    #: ``sources`` and writes the last ``len(prologue.outputs)`` arguments of this kernel
    prologue: ShippedKernel | None = None
    sources: tuple = ()

    @property
    def signature(self) -> Signature:
        """What the runtime needs to check and call the kernel."""
        return Signature(self.args, self.temps, self.outputs, self.vars)

    @property
    def inputs(self) -> tuple:
        """Specs of the arguments the kernel only reads."""
        return self.signature.inputs

    @property
    def parallel(self) -> bool:
        """Does it launch libgomp thread teams?"""
        return self.entry.parallel

    @property
    def target(self) -> Target:
        """The target its code was generated for."""
        return self.entry.target

    def __repr__(self):
        sig = ", ".join(a.describe() for a in self.args)
        return (f"ShippedKernel({self.name}({sig}), outputs={list(self.outputs)}, "
                f"parallel={self.parallel}, {len(self.entry.obj)} bytes of object code)")


def ship(func: L.LoweredFunc, target="llvm", timings=None) -> ShippedKernel:
    """Compile *func* for *target* to object code (see the module docstring); BuildError for a
    target this process cannot run (its code can only be exported).

    *timings*: see :func:`~einloop.codegen.jit.object_code` (the benchmark's phase times).
    """
    code = object_code(func, Target.parse(target), timings)
    sig = signature_of(func)
    return ShippedKernel(name=func.name, key=code.key, entry=code.entry, args=sig.args,
                         temps=sig.temps, outputs=sig.outputs, vars=sig.vars,
                         loop_ir=str(func), unopt_ir=code.unopt_ir,
                         externs=extern.externs_of(func))


def ship_split(func: L.LoweredFunc, constant, target="llvm", timings=None) -> ShippedKernel:
    """*func* shipped with the work on its *constant* arguments (positions) split off into a
    prologue (:func:`~einloop.schedule.passes.split_prologue.split_prologue`): the main
    function takes *func*'s arguments and then the prologue's outputs.  Without such work,
    *func* shipped whole."""
    split = split_prologue(func, constant) if constant else None
    if split is None:
        return ship(func, target, timings)
    return replace(ship(split.main, target, timings), prologue=ship(split.prologue, target),
                   sources=split.sources)


def load(sk: ShippedKernel) -> Kernel:
    """Load *sk*'s object code into this process and wrap it in a :class:`Kernel`.

    Every call makes a new execution engine, which lives as long as the returned Kernel; no
    LLVM optimisation or code generation runs.
    """
    if not isinstance(sk, ShippedKernel):
        raise TypeError(f"load() takes a ShippedKernel, got {type(sk).__name__}")
    e = sk.entry
    if e.parallel:
        gomp_available()                  # GOMP_parallel must resolve when the engine links
    extern.bind(sk.externs, sk.name)      # so must the external functions it calls
    amx.require(sk.unopt_ir, sk.name)     # and AMX code needs Linux's permission first
    with llvm_lock:
        engine, address = load_object(e.obj, e.target, e.symbol, sk.name)
    compiled = Compiled(e.symbol, address, engine, sk.unopt_ir, e.opt_ir, e.target, e.parallel)
    return Kernel(sk.name, sk.signature, address, compiled, **kernel_options(compiled, sk.loop_ir))


def seed_cache(sk: ShippedKernel) -> bool:
    """Store *sk*'s object code in the persistent compile cache under the key ``build`` of the
    same kernel (same lowered function, same target) looks up; whether it was stored (not when
    the cache is off or cannot be written)."""
    stored = cache.store(sk.key, sk.entry) is not None
    if sk.prologue is not None:
        seed_cache(sk.prologue)
    return stored
