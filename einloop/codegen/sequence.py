"""Several compiled kernels run by one native call.

A model's partition runs a dozen small kernels per forward pass.  Called one by one from
Python, each costs tens of microseconds of interpreter work (building argument lists, allocating
outputs and temporaries, a ctypes call), which is more than a small layer's arithmetic.  A
:class:`KernelSequence` is a short function JIT-compiled for the sequence: it calls each kernel's
entry point in order with its argument addresses, stopping at the first that fails.  An argument
is either one of the sequence's own inputs and outputs (``io``, addresses given per call) or a
fixed offset in an arena (intermediate results and temporaries, placed by
:func:`einloop.runtime.arena.plan_arena`), so a call makes one ctypes call and one allocation.

The driver reads the kernels' entry points from a table instead of holding their addresses, so
its code depends only on the sequence's shape (arguments and offsets): it goes through the
persistent compile cache like a kernel, and a process that deploys a model from the cache
compiles nothing.
"""
from __future__ import annotations

import ctypes
import enum
from typing import NamedTuple

from ..errors import InternalError
from ..runtime.threads import team_threads
from .jit import jit_compile_ir
from .target import Target


class Place(enum.Enum):
    """Where an argument of a step lives."""
    IO = "io"           # the sequence's input or output number ``value``
    ARENA = "arena"     # ``value`` bytes into the arena


class Slot(NamedTuple):
    place: Place
    value: int


class Step(NamedTuple):
    """One kernel call: *kernel* (a :class:`~einloop.runtime.Kernel` without size variables)
    on *args* (one :class:`Slot` per argument, then one per temporary)."""
    kernel: object
    args: tuple


#: the driver's symbol (each driver has an engine of its own)
SYMBOL = "einloop_sequence"


def _call_ir(i: int, step: Step) -> list:
    """The IR lines of step *i*: load or compute its argument addresses, call, check."""
    lines, args = [], []
    for j, slot in enumerate(step.args):
        name = f"%a{i}.{j}"
        if slot.place is Place.IO:
            lines += [f"  {name}.at = getelementptr ptr, ptr %io, i64 {slot.value}",
                      f"  {name} = load ptr, ptr {name}.at"]
        else:
            lines.append(f"  {name} = getelementptr i8, ptr %arena, i64 {slot.value}")
        args.append(f"ptr {name}")
    args.append("i32 %threads" if step.kernel.parallel else "i32 1")
    return lines + [f"  %f{i}.at = getelementptr ptr, ptr %fns, i64 {i}",
                    f"  %f{i} = load ptr, ptr %f{i}.at",
                    f"  %r{i} = call i32 %f{i}({', '.join(args)})",
                    f"  %bad{i} = icmp ne i32 %r{i}, 0",
                    f"  br i1 %bad{i}, label %fail{i}, label %ok{i}",
                    f"fail{i}:", f"  ret i32 {i + 1}", f"ok{i}:"]


class KernelSequence:
    """``seq(io_addresses, arena_address)``: the *steps* run in order by one native call.

    *n_io* addresses are given per call (the sequence's inputs and outputs, in the order the
    slots number them); the arena must hold at least the bytes the slots reach, aligned as
    the plan assumed.  A kernel that fails (a local buffer it could not allocate) raises its
    error; the kernels after it do not run."""

    def __init__(self, steps, n_io: int):
        self.steps = tuple(steps)
        self.n_io = n_io
        for s in self.steps:
            if s.kernel.has_size_variables:
                raise InternalError(f"kernel {s.kernel.name} has size variables: it cannot run "
                                    "in a KernelSequence")
            if len(s.args) != len(s.kernel.signature.args) + len(s.kernel.temp_nbytes):
                raise InternalError(f"kernel {s.kernel.name}: {len(s.args)} slots for "
                                    f"{len(s.kernel.signature.args)} arguments and "
                                    f"{len(s.kernel.temp_nbytes)} temporaries")
            if any(p.place is Place.IO and not 0 <= p.value < n_io for p in s.args):
                raise InternalError(f"kernel {s.kernel.name}: an io slot beyond {n_io}")
        body = [line for i, s in enumerate(self.steps) for line in _call_ir(i, s)]
        ir = "\n".join([f'target triple = "{Target.parse("llvm").triple}"',
                        f"define i32 @{SYMBOL}(ptr %fns, ptr %io, ptr %arena, i32 %threads) {{",
                        "entry:", *body, "  ret i32 0", "}", ""])
        self._engine, address = jit_compile_ir(ir, SYMBOL, "a kernel sequence")
        self._cfunc = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p,
                                       ctypes.c_void_p, ctypes.c_int32)(address)
        self._fns = (ctypes.c_void_p * len(self.steps))(*(s.kernel.address for s in self.steps))
        self._io_type = ctypes.c_void_p * max(n_io, 1)

    def __call__(self, io_addresses, arena_address: int) -> None:
        failed = self._cfunc(self._fns, self._io_type(*io_addresses), arena_address,
                             team_threads())
        if failed:
            self.steps[failed - 1].kernel.out_of_memory()


__all__ = ["KernelSequence", "Place", "Slot", "Step"]
