"""Schedules: Halide/TVM-style loop transformations of a compute, and lowering to loop IR."""
from .schedule import Schedule, Step, create_schedule
from .stage import Stage
from .lower import lower
from ..ir.stmt import LoweredFunc, ForKind

__all__ = ["Schedule", "Step", "Stage", "create_schedule", "lower", "LoweredFunc", "ForKind"]
