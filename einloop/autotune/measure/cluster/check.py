"""Checking a ``cluster=`` setting without connecting: Dask's ``distributed`` is optional, so it
is imported only here and in the client, when a cluster is asked for."""
from __future__ import annotations

from ....errors import TuningError

INSTALL_HINT = "pip install einloop[distributed]"


def distributed_module():
    """Dask's ``distributed``, or a TuningError saying how to install it."""
    try:
        import distributed
    except ImportError as exc:
        raise TuningError(f"measure_option(cluster=...) needs Dask's distributed scheduler, "
                          f"which is not installed ({exc}); {INSTALL_HINT}") from None
    return distributed


def check_cluster(cluster):
    """TuningError unless *cluster* is a ``distributed.Client`` or a scheduler address."""
    distributed = distributed_module()
    if isinstance(cluster, str):
        if "://" not in cluster and ":" not in cluster:
            raise TuningError(f"measure_option: cluster={cluster!r} is not a scheduler address; "
                              "expected e.g. 'tcp://scheduler-host:8786'")
        return
    if not isinstance(cluster, distributed.Client):
        raise TuningError(f"measure_option: cluster must be None (measure here), a "
                          f"distributed.Client, or a scheduler address such as "
                          f"'tcp://host:8786'; got {type(cluster).__name__}")
