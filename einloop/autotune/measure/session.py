"""One set of measuring processes for every task of a job.

A :class:`~.local.Measurer` starts a pool of build workers and a runner process, and builds the
task's reference kernel; that takes a second or two, as long as measuring a dozen candidates.
A job that tunes several tasks one after another (an operator at several sizes and the round
that compares them, a model's tasks in rounds of a few trials each, a custom operator's forward
and gradient kernels) would pay it for each.  Inside ``shared_processes()`` the measurer opened
for one task is lent to the next (:meth:`~.local.Measurer.retask`), as long as it is measured
with the same options::

    with shared_processes():
        for task in tasks:
            make_tuner(task).tune(16, measure_option=option)    # processes started once

Leaving the block stops the processes.  A cluster measurer is never shared (its workers are
the cluster's), nor is one across different measure options.
"""
from __future__ import annotations

import contextlib
import contextvars

from .common import MeasureOption
from .local import Measurer

_current: contextvars.ContextVar[_Session | None] = contextvars.ContextVar(
    "einloop_measure_session", default=None)


class _Session:
    """The measurer lent to the tasks of one ``shared_processes`` block."""

    def __init__(self):
        self.measurer: Measurer | None = None

    def lend(self, task, option: MeasureOption) -> Measurer:
        m = self.measurer
        if m is not None and not m.closed and m.option == option:
            m.retask(task)                 # closes it if the task's reference fails
            return m
        self.close()
        m = Measurer(task, option)
        m.shared = True
        self.measurer = m
        return m

    def close(self):
        m, self.measurer = self.measurer, None
        if m is not None:
            m.close()


def current_session() -> _Session | None:
    """The session of the innermost ``shared_processes`` block, if any."""
    return _current.get()


@contextlib.contextmanager
def shared_processes():
    """Within the block, measurers of local jobs share one set of processes (see the module
    docstring).  A nested block uses the outer one's."""
    if _current.get() is not None:
        yield
        return
    session = _Session()
    token = _current.set(session)
    try:
        yield
    finally:
        _current.reset(token)
        session.close()
