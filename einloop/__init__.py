"""einloop: declare tensor operators in Einstein notation, schedule their loops, compile with LLVM.

    from einloop import te, create_schedule, lower, build

Importing ``einloop`` loads only the error classes; the layers load on first use, so a process
that only runs kernels (``einloop.runtime``) never imports the compiler or llvmlite.
"""
import importlib

from .errors import (Error, TEError, ScheduleError, UnsupportedPrimitiveError, BuildError,
                     ArgumentError, KernelRuntimeError, IndexRangeError, LibraryError, ToolchainError, TuningError,
                     TuningLogError, NoValidTrialError, CustomOpError, InternalError,
                     EinloopWarning, RegionFallbackWarning, VectorizeWarning,
                     ParallelWarning)

from .version import __version__  # noqa: E402,F401

#: name -> (module, attribute or None for the module itself), imported on first access
_LAZY = {
    "te": ("einloop.te", None),
    "ir": ("einloop.ir", None),
    "runtime": ("einloop.runtime", None),
    "autotune": ("einloop.autotune", None),
    "create_schedule": ("einloop.schedule", "create_schedule"),
    "lower": ("einloop.schedule", "lower"),
    "Schedule": ("einloop.schedule", "Schedule"),
    "build": ("einloop.codegen.build", "build"),
}


def __getattr__(name):
    try:
        module, attr = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'einloop' has no attribute {name!r}") from None
    value = importlib.import_module(module)
    if attr is not None:
        value = getattr(value, attr)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))


__all__ = ["te", "create_schedule", "lower", "build", "Schedule", "Error", "TEError", "ScheduleError",
           "UnsupportedPrimitiveError", "BuildError", "ArgumentError", "KernelRuntimeError",
           "IndexRangeError", "LibraryError", "ToolchainError",
           "TuningError", "TuningLogError", "NoValidTrialError", "CustomOpError", "InternalError",
           "EinloopWarning",
           "RegionFallbackWarning", "VectorizeWarning", "ParallelWarning"]
