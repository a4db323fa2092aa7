"""Which configuration a template gets when it calls ``get_config()``.

A template runs under a stack of dispatch contexts: while its space is collected (the context
hands out the ConfigSpace being built), while a tuner instantiates a candidate (a fixed config),
or at deploy time under ``apply_history_best`` (the best logged config of that workload).
With no context, or on a miss, it gets its fallback config, with one warning per workload.
"""
from __future__ import annotations

import contextlib
import threading
import warnings

from ...errors import TuningError
from ..space.knobs import ConfigSpace


class FallbackConfigWarning(UserWarning):
    """A template ran without a tuned configuration (silence with warnings.simplefilter)."""


_state = threading.local()


def _stack(name):
    st = getattr(_state, name, None)
    if st is None:
        st = []
        setattr(_state, name, st)
    return st


@contextlib.contextmanager
def workload_scope(workload):
    """Mark that the template of *workload* is running (set by @template)."""
    stack = _stack("workloads")
    stack.append(workload)
    try:
        yield
    finally:
        stack.pop()


class DispatchContext:
    """Base: ``query(workload)`` returns a config, or None to fall through."""

    def query(self, workload):
        raise NotImplementedError

    def __enter__(self):
        _stack("contexts").append(self)
        return self

    def __exit__(self, *exc):
        _stack("contexts").pop()
        return False


class SpaceContext(DispatchContext):
    """Collect the knobs of a template into *space*."""

    def __init__(self, space):
        self.space = space

    def query(self, workload):
        return self.space


class ConfigContext(DispatchContext):
    """Hand a fixed config to the template (a tuner instantiating a candidate)."""

    def __init__(self, config):
        self.config = config

    def query(self, workload):
        return self.config


_warned = set()


def get_config():
    """The configuration the running template should apply (see module docstring)."""
    workloads = _stack("workloads")
    if not workloads:
        raise TuningError("get_config() must be called inside a function decorated with "
                          "@autotune.template(...)")
    workload = workloads[-1]
    for ctx in reversed(_stack("contexts")):
        cfg = ctx.query(workload)
        if cfg is not None:
            return cfg
    if workload.key not in _warned:
        _warned.add(workload.key)
        warnings.warn(
            f"no tuned configuration for {workload}: using the template's fallback config, "
            f"which may be slow. Tune it (einloop tune ... / autotune.XGBTuner) and deploy with "
            f"autotune.apply_history_best(log)", FallbackConfigWarning, stacklevel=3)
    return ConfigSpace()           # answers with each knob's default as the template defines it


def current_context(kind):
    """The innermost active dispatch context that is an instance of *kind*, or None."""
    return next((c for c in reversed(_stack("contexts")) if isinstance(c, kind)), None)


def warn_once(key, message, category, stacklevel=3):
    """Warn with *message* unless a warning for *key* was given already in this process."""
    if key not in _warned:
        _warned.add(key)
        warnings.warn(message, category, stacklevel=stacklevel)


def reset_fallback_warnings():
    """Forget which workloads were warned about (for tests)."""
    _warned.clear()
