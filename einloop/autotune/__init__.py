"""Auto-tuning: tasks with a schedule space, measured search guided by a cost model, tuning logs.

Map of the parts, bottom first (``tests/test_layering.py`` holds the order):
- ``space/``     what can be searched: candidates (a config or a replayable step list),
                 template knobs (``knobs``), and the space generated from a declaration
                 (``sketch/``: the auto-scheduler's machine model, rules, seeds)
- ``task/``      what is tuned: the ``TuningTask`` interface (``interface``), template tasks
                 (``template``, ``context``: what ``get_config()`` returns), auto-scheduling
                 tasks (``auto``), records' names replayed on other declarations
                 (``step_names``), ``create_task`` and ``task_from_record`` (``create``)
- ``model/``     how a candidate is predicted: loop-nest features (``feature/``) and the
                 XGBoost ranking model (``cost_model``)
- ``measure/``   how a candidate is built, checked and timed: settings and results
                 (``common``), build workers and an isolated runner (``builder``, ``runner``;
                 ``child``, ``lifeline``: processes that never import the user's main module
                 and die with the job), on this machine (``local``) or a Dask cluster (``cluster/``);
                 ``session``: one set of processes for the tasks of a job (``shared_processes``)
- ``log/``       what was measured: JSON Lines records (``record``), their tables
                 (``summary``), the deploy-time lookup (``deploy``: ``apply_history_best``)
- ``search/``    the tuning loop and its strategies: random and grid (``tuner``), genetic
                 (``ga_tuner``), model-guided (``xgb_tuner``, the default)
- ``symbolic/``  operators with symbolic extents: one search per size hint, a cross-size
                 round, the size dispatch of the tuned schedules
- ``api``        ``auto_schedule``: a declaration in, a tuned (or replayed) schedule out
"""
from .space.knobs import ConfigSpace, ConfigEntity
from .task.base import TaskKind
from .task.template import template, Task
from .task.create import create_task
from .space.candidate import StepsCandidate
from .task.auto import AutoTask
from .api import auto_schedule
from .search.kinds import TunerKind
from .task.interface import TuningTask
from .task.context import get_config, FallbackConfigWarning
from .measure.common import CacheFlush, measure_option, MeasureErrorNo, MeasureResult
from .measure.cluster.client import cluster_target
from .measure.session import shared_processes
from .log.record import load as load_log, StaleRecordWarning
from .log.database import Database, log_to_file, pick_best
from .log.deploy import apply_history_best, UntunedScheduleWarning
from .search.tuner import Tuner, RandomTuner, GridSearchTuner
from .search.ga_tuner import GATuner
from .search.xgb_tuner import XGBTuner

__all__ = ["ConfigSpace", "ConfigEntity", "template", "create_task", "Task", "TaskKind",
           "StepsCandidate", "AutoTask", "TuningTask",
           "auto_schedule", "TunerKind", "UntunedScheduleWarning", "StaleRecordWarning",
           "get_config",
           "FallbackConfigWarning", "CacheFlush", "measure_option", "MeasureErrorNo",
           "MeasureResult",
           "cluster_target", "shared_processes", "Database",
           "log_to_file", "load_log", "pick_best", "apply_history_best", "Tuner", "RandomTuner",
           "GridSearchTuner", "GATuner", "XGBTuner"]
