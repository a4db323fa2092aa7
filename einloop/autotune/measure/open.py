"""Choosing the measurer a job's settings ask for."""
from __future__ import annotations

from .cluster.client import ClusterMeasurer
from .common import MeasureOption
from .local import Measurer


def open_measurer(task, option: MeasureOption | None = None):
    """The measurer *option* asks for: a :class:`~.local.Measurer` on this machine, or a
    :class:`~.cluster.client.ClusterMeasurer` when ``option.cluster`` is set."""
    if option is not None and getattr(option, "cluster", None) is not None:
        return ClusterMeasurer(task, option)
    return Measurer(task, option)
