"""What runs a compiled kernel, without the compiler: NumPy, ctypes and the standard library only.

A :class:`Kernel` is native code plus a :class:`Signature` of :class:`BufferSpec` (arguments in
call order, temporaries, written arguments) and :class:`VarSpec` (symbolic extents): it
checks arguments, binds the extents, allocates temporaries, calls the code and times it;
:mod:`.fastcall` writes out its check for NumPy arrays.  :mod:`.threads` and :mod:`.gomp` are
the parallel runtime (how many threads, libgomp and its spin policy).  :mod:`.library` loads
the shared libraries that ``export_library`` writes (:func:`load_module`), :mod:`.header`
writes their C headers.  Code generation (:mod:`einloop.codegen`) produces what this package
runs; nothing here imports llvmlite or the schedule, so a process that only runs kernels never
loads them.
"""
from .kernel import SOURCE_FORMATS, Kernel, SourceFormat
from .header import write_header
from .library import Module, export_library, load_module
from .signature import BufferSpec, Signature, VarSpec
from .threads import default_num_threads
from .allocator import warm_allocator
from .timing import Timing, time_callable, time_settled

__all__ = ["Kernel", "Signature", "BufferSpec", "VarSpec", "SourceFormat", "SOURCE_FORMATS",
           "Timing", "time_callable", "time_settled", "warm_allocator", "default_num_threads",
           "load_module", "export_library", "write_header", "Module"]
