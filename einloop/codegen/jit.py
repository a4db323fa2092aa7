"""Optimise, JIT-compile and cache kernels.

The module is parsed, verified, optimised with LLVM's O3 pipeline (new pass manager, loop and SLP
vectorizers on) and compiled by MCJIT; the engine lives as long as the :class:`Compiled` that
holds the kernel's address.  Every external symbol the object needs must resolve (compiler-rt
helpers come from :mod:`.compiler_rt`), else building fails instead of calling address 0.
Compiling the same kernel again in one process reuses the first result: the key is a structural
key of the LoweredFunc (every node with its dtype; variables and buffers numbered by first
appearance, not merely named) plus the target.  Across processes, the persistent cache
(:mod:`.cache`, keyed by a hash of the unoptimised LLVM IR and the target) hands back the object
code, which MCJIT loads without running O3 or instruction selection.  :func:`object_code` makes
that object code by the same steps for a kernel that another process will load
(:mod:`.shipped`: the tuner builds candidates in one process and times them in another).
"""
from __future__ import annotations

import time
from typing import NamedTuple

import llvmlite.binding as llvm

from ..errors import BuildError, InternalError
from ..ir import stmt as L
from ..ir.visit import structural_key
from ..runtime import blas, cpu
from .emit import build_module
from . import amx, cache, compiler_rt, extern, workarounds
from .compiled import Compiled
from .kernel import CompiledKernel, CrossCompiledKernel
from .llvm import llvm_lock
from .objfile import undefined_symbols
from .target import Target

_cache: dict = {}


def optimise(mod, tm, loop_vectorize=True):
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pto.loop_vectorization = loop_vectorize
    pto.slp_vectorization = True
    pto.loop_unrolling = True
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)


def _optimised(text, target: Target, loop_vectorize: bool, name: str):
    """Parse, verify and O3-optimise LLVM IR *text* for *target*; the caller holds the lock."""
    try:
        mod = llvm.parse_assembly(text)
        mod.verify()
    except RuntimeError as exc:
        raise InternalError(f"codegen produced invalid LLVM IR for kernel {name}: "
                            f"{exc}\n{text}") from None
    tm = target.target_machine()
    mod.data_layout = str(tm.target_data)
    optimise(mod, tm, loop_vectorize)
    return mod


def emit_optimised(func: L.LoweredFunc, target: Target, timings=None):
    """Emit, verify and O3-optimise *func*.

    Returns ``(llvm module, unoptimised text, symbol, parallel, target)``, where the target is
    the one to generate machine code for: *target*, unless a workaround for an LLVM miscompile
    (:mod:`.workarounds`) had to turn features off.  Nothing is JIT-compiled.  *timings*, a
    dict, gets the seconds of each phase added (``emit``, ``optimise``, ``codegen``).
    """
    clock = PhaseClock(timings)
    text, symbol, parallel, loop_vectorize = emit(func, target)
    clock.lap("emit")
    mod, target = _optimise_for(text, target, loop_vectorize, func.name, clock)
    return mod, text, symbol, parallel, target


#: above this many lines of unoptimised IR, LLVM's loop vectorizer is not run: on a heavily
#: unrolled scalar body (7,580 lines: an 8 x 2 x 16 unrolled GEMM tile that einloop did not
#: vectorize) it took 19 s of O3's 19.4 s, and 0.3 s without it.  einloop's own kernels that
#: vectorize their loops stay far below (GEMM, conv2d, attention, softmax seeds: 240-1,900 lines).
LOOP_VECTORIZER_MAX_LINES = 4000


def emit(func: L.LoweredFunc, target: Target):
    """*func* as unoptimised LLVM IR: ``(text, symbol, parallel, loop_vectorize)``."""
    module, symbol, parallel, loop_vectorize, extra = build_module(func, target)
    text = str(module) + extra
    if loop_vectorize and text.count("\n") > LOOP_VECTORIZER_MAX_LINES:
        loop_vectorize = False
    return text, symbol, parallel, loop_vectorize


def _optimise_for(text, target: Target, loop_vectorize: bool, name: str, clock):
    """O3-optimise *text*: ``(module, target)``, the target without the features a miscompile
    workaround (:mod:`.workarounds`) had to turn off."""
    with llvm_lock:
        mod = _optimised(text, target, loop_vectorize, name)
        clock.lap("optimise")
        risk = workarounds.evex_mask_fold_risk(mod, target)
        clock.lap("codegen")
        if risk:
            target = workarounds.without_mask_features(target)
            mod = _optimised(text, target, loop_vectorize, name)
            clock.lap("optimise")
    return mod, target


class PhaseClock:
    """Adds the seconds since the last lap to ``timings[phase]`` (nothing when timings is None);
    the clock is ``timings.clock`` if it has one (a benchmark may count CPU time), else wall."""

    def __init__(self, timings):
        self.timings = timings
        self.clock = getattr(timings, "clock", time.perf_counter)
        self.t = self.clock()

    def lap(self, phase):
        if self.timings is not None:
            now = self.clock()
            self.timings[phase] = self.timings.get(phase, 0.0) + now - self.t
            self.t = now


def link(mod, target: Target, symbol: str, name: str, objects=None):
    """MCJIT-compile *mod*: ``(engine, address of symbol)``; the caller holds the JIT lock.

    The object code emitted is appended to the list *objects* when one is given.  Raises
    BuildError when the object needs a symbol that nothing in this process defines.
    """
    _check_native(target, name)
    compiler_rt.install()
    engine = llvm.create_mcjit_compiler(mod, target.new_target_machine())   # the engine owns it
    objects = [] if objects is None else objects
    engine.set_object_cache(lambda _module, obj: objects.append(obj))
    engine.finalize_object()
    _check_resolved(objects, target, name)
    return engine, _address(engine, symbol, name)


def load_object(obj: bytes, target: Target, symbol: str, name: str):
    """Load the object code *obj* (made by :func:`link`) into a new MCJIT engine, with no
    optimisation or code generation: ``(engine, address of symbol)``; the caller holds the lock.
    """
    _check_native(target, name)
    compiler_rt.install()
    _check_resolved([obj], target, name)
    empty = llvm.parse_assembly("")
    empty.triple = target.triple
    engine = llvm.create_mcjit_compiler(empty, target.new_target_machine())
    engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
    engine.finalize_object()
    return engine, _address(engine, symbol, name)


def _check_native(target: Target, name: str):
    """BuildError unless code for *target* runs in this process: MCJIT would load another
    architecture's code, and calling it would crash the process."""
    if not target.is_native:
        raise BuildError(f"kernel {name} is compiled for {target.triple}, which this process "
                         f"({llvm.get_process_triple()}) cannot run; export it (export_object, "
                         "export_library) and run it on such a machine, or build for 'llvm'")


def _check_resolved(objects, target: Target, name: str):
    """Raise BuildError unless every symbol *objects* need is defined in this process."""
    missing = sorted({sym for obj in objects for sym in undefined_symbols(obj) or ()
                      if not llvm.address_of_symbol(sym)})
    if missing:
        raise BuildError(f"kernel {name} for target {target}: the compiled code calls "
                         f"{', '.join(missing)}, which no library loaded in this process "
                         "defines; build for another target (-mcpu=...) or load a library that "
                         "defines it (llvmlite.binding.load_library_permanently)")


def _address(engine, symbol: str, name: str) -> int:
    address = engine.get_function_address(symbol)
    if not address:
        raise InternalError(f"JIT: symbol {symbol} of kernel {name} was not found")
    return address


def jit_compile(func: L.LoweredFunc, target: Target) -> Compiled:
    """Compile *func*, or load its object code from the persistent cache (:mod:`.cache`).
    The external functions it calls are bound first (:func:`.extern.bind`)."""
    extern.bind(extern.externs_of(func), func.name)
    text, symbol, parallel, loop_vectorize = emit(func, target)
    amx.require(text, func.name)
    key = cache.entry_key(text, target, loop_vectorize)
    with llvm_lock:
        entry = cache.load(key)
        if entry is not None:
            engine, address = load_object(entry.obj, entry.target, entry.symbol, func.name)
            return Compiled(entry.symbol, address, engine, text, entry.opt_ir, entry.target,
                            entry.parallel)
    engine, address, entry = _compile(text, target, symbol, parallel, loop_vectorize,
                                      func.name, PhaseClock(None))
    cache.store(key, entry)
    return Compiled(symbol, address, engine, text, entry.opt_ir, entry.target, parallel)


def jit_compile_ir(text: str, symbol: str, name: str):
    """Compile a small module of einloop's own (*text*, for this machine: a kernel sequence's
    driver), or load its object code from the persistent cache as kernels are: ``(engine,
    address of symbol)``.  A process that finds it in the cache runs no LLVM pass on it."""
    target = Target.parse("llvm")
    key = cache.entry_key(text, target, "ir")
    with llvm_lock:
        entry = cache.load(key)
        if entry is not None:
            return load_object(entry.obj, entry.target, entry.symbol, name)
    engine, address, entry = _compile(text, target, symbol, False, False, name,
                                      PhaseClock(None))
    cache.store(key, entry)
    return engine, address


def _compile(text, target: Target, symbol, parallel, loop_vectorize, name, clock):
    """O3-optimise and MCJIT-compile the unoptimised IR *text*: ``(engine, address, entry)``,
    where *entry* (a :class:`~.cache.CacheEntry`) holds the object code MCJIT emitted."""
    mod, target = _optimise_for(text, target, loop_vectorize, name, clock)
    opt_text = str(mod)
    objects = []
    with llvm_lock:
        engine, address = link(mod, target, symbol, name, objects)
    clock.lap("codegen")
    if len(objects) != 1:
        raise InternalError(f"JIT: MCJIT emitted {len(objects)} object files for kernel {name}, "
                            "expected one")
    return engine, address, cache.CacheEntry(objects[0], symbol, bool(parallel), target, opt_text)


class ObjectCode(NamedTuple):
    """A kernel's object code, made as :func:`jit_compile` makes it, and what names it."""
    key: str                    # the persistent cache's key for it (:func:`.cache.entry_key`)
    entry: cache.CacheEntry     # the object and what loading it needs
    unopt_ir: str               # the unoptimised LLVM IR it was compiled from


def object_code(func: L.LoweredFunc, target: Target, timings=None) -> ObjectCode:
    """*func*'s object code for *target*: from the persistent cache if it holds it, else made
    here by the very steps :func:`jit_compile` takes (emit, O3 with the target's machine, MCJIT
    code generation), so that :func:`load_object` in another process runs the same code that
    ``build`` would.  Nothing is stored in the cache and the engine that compiled it is dropped.

    *timings*, a dict, gets the seconds of each phase added (``emit``, ``optimise``,
    ``codegen``; see :class:`PhaseClock`).
    """
    clock = PhaseClock(timings)
    if target.is_native:        # a missing external function fails here, as build would
        extern.bind(extern.externs_of(func), func.name)
    text, symbol, parallel, loop_vectorize = emit(func, target)
    key = cache.entry_key(text, target, loop_vectorize)
    clock.lap("emit")
    entry = cache.load(key)
    if entry is None:
        _, _, entry = _compile(text, target, symbol, parallel, loop_vectorize, func.name, clock)
    return ObjectCode(key, entry, text)


def cross_compile(func: L.LoweredFunc, target: Target) -> Compiled:
    """Emit and optimise *func* for a target this process cannot run (another architecture):
    a Compiled with no engine and no address, whose optimised IR :mod:`.export` turns into an
    object file for that machine."""
    mod, text, symbol, parallel, target = emit_optimised(func, target)
    return Compiled(symbol, 0, None, text, str(mod), target, parallel)


def compile_func(func: L.LoweredFunc, target="llvm"):
    """Compile a lowered kernel to a callable :class:`Kernel` (cached per process), or for a
    target of another machine to a :class:`CrossCompiledKernel`, which can only be exported."""
    target = Target.parse(target)
    runs = runs_here(target)
    key = (cache_key(func), str(target))
    with llvm_lock:
        compiled = _cache.get(key)
        if compiled is None:
            make = jit_compile if runs else cross_compile
            compiled = _cache[key] = make(func, target)
            if compiled.parallel and runs:
                blas.share_blas_threads()   # an OpenBLAS loaded since the last one joins the pool
    return (CompiledKernel if runs else CrossCompiledKernel)(func, compiled)


def runs_here(target: Target) -> bool:
    """Can this process run code for *target*: its architecture, and no CPU feature it may use
    that this CPU is known to lack (AVX-512 code on an AVX2 CPU would die of SIGILL at its
    first such instruction; it can still be compiled and exported for a machine that has
    them)."""
    return target.is_native and not cpu.missing_features(target.full_features())


def clear_cache():
    """Forget compiled kernels (existing Kernel objects keep theirs)."""
    with llvm_lock:
        _cache.clear()


# structural key --------------------------------------------------------------------------------

def cache_key(func: L.LoweredFunc) -> str:
    """An unambiguous text of everything that affects the generated code: the IR's structural
    key, variables and buffers numbered by first appearance."""
    return repr(structural_key(func, numbering={}))
