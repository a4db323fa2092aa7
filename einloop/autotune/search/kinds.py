"""The searches a user can ask for by name (``auto_schedule(tuner=...)``, ``einloop tune
--tuner``), and the tuner each name makes."""
from __future__ import annotations

import enum

from ...errors import TuningError
from .ga_tuner import GATuner
from .tuner import GridSearchTuner, RandomTuner
from .xgb_tuner import XGBTuner


class TunerKind(enum.Enum):
    """A search strategy: model-guided genetic search (the default), plain genetic search,
    random sampling, or every config in index order."""
    XGB = "xgb"
    GA = "ga"
    RANDOM = "random"
    GRID = "grid"


TUNERS = {TunerKind.XGB: XGBTuner, TunerKind.GA: GATuner, TunerKind.RANDOM: RandomTuner,
          TunerKind.GRID: GridSearchTuner}


def tuner_kind(tuner, where="auto_schedule") -> TunerKind:
    """*tuner* (a TunerKind or its name) as a TunerKind; TuningError naming the choices."""
    if isinstance(tuner, TunerKind):
        return tuner
    found = next((k for k in TunerKind if k.value == tuner), None)
    if found is None:
        raise TuningError(f"{where}: tuner must be one of "
                          f"{', '.join(repr(k.value) for k in TunerKind)}, got {tuner!r}")
    return found


def make_tuner(kind, task, seed=None):
    """A tuner of *kind* (a TunerKind or its name) for *task*."""
    return TUNERS[tuner_kind(kind)](task, seed=seed)
