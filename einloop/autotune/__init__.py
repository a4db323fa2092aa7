"""Auto-tuning: templates with knobs, measured search guided by a cost model, tuning logs.

Map of the parts (one module each, AutoTVM's seams):
- ``space``       knobs (split, reorder, annotate, other) and configurations with stable indices
- ``task``        ``@template`` registration, ``create_task``: a workload, its space and flops;
                  ``dag_task``: an operator declared by a plain function, tuned as step lists;
                  ``auto_task``: an operator tuned in the space generated from its DAG
                  (``auto/``), records keyed by the DAG's structural hash (``step_names``:
                  replaying them on other names)
- ``api``         ``auto_schedule``: declaration in, tuned (or replayed) schedule out
- ``candidate``   what is measured: a template config or a replayable step list
- ``status``      measurement statuses (``MeasureErrorNo``)
- ``dispatcher``  what ``get_config()`` returns: while collecting a space, tuning, or deploying
- ``measure``     building candidates in worker processes, timing them in an isolated runner
                  (``builder``, ``runner``; ``child``: how they start, never from the
                  user's ``__main__``; ``lifeline``: children die with the job);
                  ``cluster``: the same on a Dask cluster (``cluster_worker``: the worker side)
- ``features``    fixed-length features of a candidate's lowered loop nest
- ``cost_model``  the XGBoost ranking model
- ``tuner``       the tuning loop, ``RandomTuner``, ``GridSearchTuner``; ``ga_tuner``: ``GATuner``;
                  ``xgb_tuner``: ``XGBTuner`` (model-guided genetic search, the default)
- ``record``      tuning logs (JSON Lines) and ``log_to_file``; ``summary``: log tables;
                  ``schedule_code``: a config as runnable schedule code
- ``deploy``      ``apply_history_best``: the best logged config or step list at deploy time
"""
from .space.knobs import ConfigSpace, ConfigEntity
from .task.base import template, create_task, Task, TaskKind
from .space.candidate import StepsCandidate
from .task.dag import DagTask
from .task.auto import AutoTask
from .api import auto_schedule, TunerKind
from .task.context import get_config, FallbackConfigWarning
from .measure.local import measure_option, MeasureErrorNo, MeasureResult
from .measure.cluster.client import cluster_target
from .log.record import load as load_log
from .log.database import Database, log_to_file, pick_best
from .log.deploy import apply_history_best, UntunedScheduleWarning
from .search.tuner import Tuner, RandomTuner, GridSearchTuner
from .search.ga_tuner import GATuner
from .search.xgb_tuner import XGBTuner

__all__ = ["ConfigSpace", "ConfigEntity", "template", "create_task", "Task", "TaskKind", "StepsCandidate", "DagTask", "AutoTask",
           "auto_schedule", "TunerKind", "UntunedScheduleWarning", "get_config",
           "FallbackConfigWarning", "measure_option", "MeasureErrorNo", "MeasureResult",
           "cluster_target", "Database",
           "log_to_file", "load_log", "pick_best", "apply_history_best", "Tuner", "RandomTuner",
           "GridSearchTuner", "GATuner", "XGBTuner"]
