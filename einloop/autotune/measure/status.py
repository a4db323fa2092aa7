"""Measurement outcomes, one enum shared by the builder, the runner, the measurer and the logs.

A build worker and the runner report a :class:`MeasureErrorNo` directly, so no status travels as
a string and no table translates one kind of status into another.  The numbers are written to
tuning logs (``error_no``) and never change meaning.
"""
from __future__ import annotations

import enum


class MeasureErrorNo(enum.IntEnum):
    NO_ERROR = 0
    INSTANTIATION_ERROR = 1
    COMPILE_ERROR = 2
    RUNTIME_ERROR = 3
    WRONG_ANSWER = 4
    TIMEOUT = 5
    UNKNOWN_ERROR = 6
    COMPILE_TIMEOUT = 7

    @classmethod
    def from_log(cls, code) -> "MeasureErrorNo":
        """The status of a logged code; one this version does not know is UNKNOWN_ERROR."""
        try:
            return cls(code)
        except ValueError:
            return cls.UNKNOWN_ERROR
