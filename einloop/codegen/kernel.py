"""Kernels JIT-compiled in this process, as the runtime's :class:`~einloop.runtime.Kernel`.

The runtime knows a kernel by its :class:`~einloop.runtime.Signature` and native address; this
module derives both from a LoweredFunc and a :class:`~.compiled.Compiled`, and hands over the
sources (LLVM IR, assembly made on request, the loop IR) as text.  A kernel compiled for another
machine has no address here: :class:`CrossCompiledKernel` only exports it.
"""
from __future__ import annotations

import functools
from types import MappingProxyType

import llvmlite.binding as llvm

from ..errors import BuildError
from ..ir import stmt as L
from ..ir.expr import ShapeVar
from ..runtime import BufferSpec, Kernel, Signature, SourceFormat, VarSpec, cpu
from .export import export_library, export_object


def buffer_spec(buf: L.Buffer) -> BufferSpec:
    """Its name, dtype and shape; a symbolic extent by its name."""
    return BufferSpec(buf.name, str(buf.dtype),
                      tuple(d.name if isinstance(d, ShapeVar) else int(d) for d in buf.shape))


def signature_of(func: L.LoweredFunc) -> Signature:
    """*func*'s buffers; the written arguments are ``attrs["outputs"]``, else the last one."""
    outputs = func.attrs.get("outputs")
    if outputs is None:
        outputs = [func.args[-1].name] if func.args else []
    return Signature(tuple(buffer_spec(b) for b in func.args),
                     tuple(buffer_spec(b) for b in func.temps), tuple(outputs),
                     tuple(VarSpec(v.name, v.min_value) for v in func.vars))


def sources_of(compiled, loop_ir) -> dict:
    """What ``Kernel.get_source`` shows for *compiled*; *loop_ir* is text or makes it."""
    return {SourceFormat.LLVM: compiled.opt_ir, SourceFormat.LLVM_UNOPT: compiled.unopt_ir,
            SourceFormat.ASM: compiled.asm, SourceFormat.IR: loop_ir}


def kernel_options(compiled, loop_ir) -> dict:
    """The Kernel keywords for *compiled*'s code: threads, sources, the target it was built for."""
    return {"parallel": compiled.parallel, "sources": sources_of(compiled, loop_ir),
            "metadata": {"target": str(compiled.target)}}


class _Exports:
    """Writing the kernel's code out, for a kernel compiled in this process (``self.owner``)."""

    def export_library(self, path, header=False) -> str:
        """Write this kernel as a shared library (and a C header if *header*); see
        :func:`einloop.codegen.export.export_library`."""
        return export_library([self], path, header=header)

    def export_object(self, path) -> str:
        """Write this kernel as an object file (metadata included); needs no C compiler."""
        return export_object([self], path)

    @staticmethod
    def export_together(kernels, path, header=False) -> str:
        """What ``einloop.runtime.export_library`` calls: the runtime cannot import codegen."""
        return export_library(kernels, path, header=header)


class CompiledKernel(_Exports, Kernel):
    """A Kernel compiled from ``func`` in this process (``func`` is kept for debugging)."""

    def __init__(self, func: L.LoweredFunc, compiled):
        super().__init__(func.name, signature_of(func), compiled.address, compiled,
                         **kernel_options(compiled, functools.partial(str, func)))
        self.func = func


class CrossCompiledKernel(_Exports):
    """A kernel compiled for another machine (a ``-mtriple`` this process cannot run, such as
    ``aarch64-linux-gnu`` on x86-64, or a CPU with features this one lacks, such as
    ``-mcpu=sapphirerapids`` on an AVX2 CPU): its code exists only as optimised LLVM IR, which
    ``export_object`` writes as that machine's object file (and ``export_library`` links with
    that machine's C compiler).  Calling it raises BuildError."""

    def __init__(self, func: L.LoweredFunc, compiled):
        self.name, self.func, self.owner = func.name, func, compiled
        self.signature = signature_of(func)
        self.parallel = bool(compiled.parallel)
        self.metadata = MappingProxyType({"target": str(compiled.target)})
        self._sources = sources_of(compiled, functools.partial(str, func))

    def __call__(self, *arrays):
        self._cannot_run()

    def time(self, *arrays, **options):
        """Timing needs the kernel's machine: raises BuildError here."""
        self._cannot_run()

    def _cannot_run(self):
        target = self.owner.target
        missing = cpu.missing_features(target.full_features()) if target.is_native else ()
        what = (f"target {target}, whose CPU features {', '.join(missing)} this CPU lacks"
                if missing else f"{target.triple}, which this process "
                f"({llvm.get_process_triple()}) cannot run")
        raise BuildError(f"kernel {self.name} was compiled for {what}; write it out with "
                         "export_object(path) or export_library(path) and call it on such a "
                         "machine, or build it for target 'llvm' to run it here")

    def get_source(self, fmt="llvm") -> str:
        """The kernel as ``llvm``, ``llvm-unopt``, ``asm`` (for its target) or ``ir``."""
        try:
            text = self._sources[SourceFormat(fmt)]
        except ValueError:
            raise BuildError(f"unknown source format {fmt!r}; valid formats: "
                             f"{', '.join(f.value for f in SourceFormat)}") from None
        return text() if callable(text) else text

    def __repr__(self):
        sig = ", ".join(a.describe() for a in self.signature.args)
        return f"<einloop.CrossCompiledKernel {self.name}({sig}) for {self.owner.target.triple}>"
