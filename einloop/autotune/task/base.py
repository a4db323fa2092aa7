"""What every task is made of: its kind, its workload (what a record is keyed by), and the
checks shared by the front ends (:mod:`.template`, :mod:`.auto`).

The interface the tuning machinery uses is :class:`~.interface.TuningTask`; :mod:`.create`
makes tasks from what a user passes and from log records.
"""
from __future__ import annotations

from dataclasses import dataclass
import enum
import importlib
import json

from ...errors import TuningError
from ...te.dag import ComputeDAG
from ...te.extern import ExternOp
from ...te.tensor import ComputeOp, Tensor


class TaskKind(enum.Enum):
    """The front end of a task; written to records as the task's ``"kind"`` (template records
    carry none).  ``DAG`` names the step-list tasks of einloop 0.1's first logs: such records
    still load, and what they need is said when a task is asked of them."""
    TEMPLATE = "template"
    DAG = "dag"
    AUTO = "auto"


@dataclass(frozen=True)
class Workload:
    """A template name with JSON-native arguments; ``key`` identifies it in logs."""
    template: str
    args: tuple
    kwargs: tuple = ()

    kind = TaskKind.TEMPLATE

    @property
    def key(self):
        return json.dumps([self.template, list(self.args), dict(self.kwargs)], sort_keys=True)

    def __str__(self):
        args = ", ".join([repr(a) for a in self.args] + [f"{k}={v!r}" for k, v in self.kwargs])
        return f"{self.template}({args})"


def _numpy_scalar(value):
    """json.dumps hook: a NumPy scalar (``np.int64(256)``, ``np.float32(0.5)``) as its Python
    number, so it names the same workload as the plain number."""
    item = getattr(value, "item", None)
    if type(value).__module__ == "numpy" and getattr(value, "shape", None) == () and item:
        return item()
    raise TypeError(value)


def _json_native(value, where):
    try:
        return json.loads(json.dumps(value, default=_numpy_scalar))
    except (TypeError, ValueError):
        raise TuningError(f"{where}: argument {value!r} is not JSON-serialisable; template "
                          "arguments must be numbers, strings, booleans or lists of them") from None


def make_workload(name, args, kwargs=None):
    args = tuple(_json_native(a, f"template {name!r}") for a in args)
    args = tuple(tuple(a) if isinstance(a, list) else a for a in args)
    kw = tuple(sorted((k, _json_native(v, f"template {name!r}")) for k, v in (kwargs or {}).items()))
    return Workload(name, args, kw)


def import_module(module, what):
    """Import *module* for *what*; any failure (missing, or raising while it runs) is a
    TuningError naming the module, since its code is the user's."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise TuningError(f"{what}: cannot import {module!r}: {exc}. Run from the folder that "
                          "holds it, or add that folder to PYTHONPATH") from None
    except Exception as exc:                # noqa: BLE001 -- the user's module raised
        raise TuningError(f"{what}: importing {module!r} raised {type(exc).__name__}: "
                          f"{exc}") from exc


def count_flops(outputs):
    """Float operations of the operator (see :meth:`einloop.te.dag.ComputeDAG.flop_count`)."""
    outputs = outputs_of(outputs)
    return ComputeDAG(outputs).flop_count() if outputs else 0


def outputs_of(tensors) -> list:
    """The computed tensors among *tensors* (an operator's arguments: inputs first, outputs
    last), which a schedule is created for: by te.compute, or by an external function."""
    return [t for t in tensors
            if isinstance(t, Tensor) and isinstance(t.op, (ComputeOp, ExternOp))]


