"""einloop: declare tensor operators in Einstein notation, schedule their loops, compile with LLVM.

    from einloop import te, create_schedule, lower, build
"""
from . import te
from .errors import (Error, TEError, ScheduleError, UnsupportedPrimitiveError, BuildError,
                     ArgumentError, KernelRuntimeError, TuningError, TuningLogError, InternalError,
                     EinloopWarning, RegionFallbackWarning, SpinWarning)
from .schedule import create_schedule, lower, Schedule
from .codegen.build import build

__version__ = "0.1.0"

__all__ = ["te", "create_schedule", "lower", "build", "Schedule", "Error", "TEError", "ScheduleError",
           "UnsupportedPrimitiveError", "BuildError", "ArgumentError", "KernelRuntimeError",
           "TuningError", "TuningLogError", "InternalError", "EinloopWarning",
           "RegionFallbackWarning", "SpinWarning"]
