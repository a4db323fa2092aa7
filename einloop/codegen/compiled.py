"""What compiling one kernel leaves behind: its code's address, the engine that owns the code,
and its sources (the LLVM IR before and after optimisation, assembly on request).

A :class:`Compiled` is the ``owner`` of a runtime Kernel that einloop compiled in this process;
exporting (:mod:`.export`) reads its optimised IR and target.  It is a value of its own, apart
from the JIT that makes it, so that exporting does not import the JIT.
"""
from __future__ import annotations

import llvmlite.binding as llvm

from .llvm import llvm_lock


class Compiled:
    """A compiled kernel: its address, the engine owning the code, and its sources.

    *address* is 0 and *engine* None for a kernel compiled for another machine (it can only be
    exported); *target* is the target its code was generated for.
    """

    def __init__(self, symbol, address, engine, unopt_ir, opt_ir, target, parallel):
        self.symbol, self.address, self.engine = symbol, address, engine
        self.unopt_ir, self.opt_ir, self.target = unopt_ir, opt_ir, target
        self.parallel = parallel
        self._asm = None

    def asm(self) -> str:
        """Assembly of the optimised module (made on first request, from a fresh copy)."""
        with llvm_lock:
            if self._asm is None:
                mod = llvm.parse_assembly(self.opt_ir)
                self._asm = self.target.target_machine().emit_assembly(mod)
            return self._asm
