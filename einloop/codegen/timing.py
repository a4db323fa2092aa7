"""Moved to :mod:`einloop.runtime.timing`; kept so that ``einloop.codegen.timing`` imports work."""
from ..runtime.timing import WARM_BLOCK_BYTES, Timing, time_callable, warm_allocator  # noqa: F401
