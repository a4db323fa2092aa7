"""Choosing the measurer a job's settings ask for."""
from __future__ import annotations

from .cluster.client import ClusterMeasurer
from .common import MeasureOption, measure_option
from .local import Measurer
from .session import current_session


def open_measurer(task, option: MeasureOption | None = None):
    """The measurer *option* asks for: a :class:`~.local.Measurer` on this machine (the one of
    the enclosing :func:`~.session.shared_processes` block, set to *task*, if there is one), or
    a :class:`~.cluster.client.ClusterMeasurer` when ``option.cluster`` is set."""
    if option is not None and getattr(option, "cluster", None) is not None:
        return ClusterMeasurer(task, option)
    session = current_session()
    if session is not None:
        return session.lend(task, option if option is not None else measure_option())
    return Measurer(task, option)
