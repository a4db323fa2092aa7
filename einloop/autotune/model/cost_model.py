"""An XGBoost cost model that ranks candidate schedules from their feature vectors.

    model = XGBCostModel(seed=0)            # loss="rank" (rank:pairwise) or loss="reg"
    model.fit(X, y)                          # y: throughput, higher is better, failures 0
    scores = model.predict(X_candidates)     # higher = better; only the order matters

* Labels are normalised by their maximum; non-finite or negative labels count as failures (0).
* Until the model has seen ``min_samples`` measurements with at least two distinct labels,
  ``predict`` returns scores from a base model (if one was given) or random scores from the
  model's own seeded generator: ``trained`` and ``source`` say which.
* Training is from scratch on all the data passed to ``fit`` (refit every plan, as AutoTVM does).
  With ``holdout_min`` samples or more, a seeded ``holdout_frac`` split picks the number of rounds
  by early stopping on the average top-k recall (our own metric: xgboost's ranking metrics reject
  float labels), at least ``min_rounds``; then the model is retrained on everything with that
  many rounds.  With less data a fixed, modest number of rounds (``fixed_rounds``) is used.
* Transfer: ``fit_base(X, y, group=...)`` (or ``XGBCostModel.with_base``) trains a base model on
  earlier records (other shapes or operators; ``group`` normalises labels and ranks per task).
  The model then trains with ``w * base_margin(X)`` as xgboost's ``base_margin``, where
  ``w = 0.5 ** (n / half_life)`` for ``n`` own samples, and ignores the base once ``w`` falls
  below ``base_drop`` (AutoTVM's schedule: 64 and 0.05).
* ``save``/``load`` keep the feature schema (length and a hash of the names) and refuse a file
  whose schema differs from the extractor's (:class:`~einloop.errors.TuningError`).
"""
from __future__ import annotations

import base64
import hashlib
import json
import os
import warnings

import numpy as np

from ...codegen.threads import spin_policy_for_loading
from ...errors import TuningError
from .feature import extract as features

_FORMAT = "einloop-xgb-cost-model"
_VERSION = 1


def _xgb():
    """xgboost, imported with a bounded spin for the libgomp it bundles (its idle threads would
    otherwise spin for milliseconds after each fit, next to the runner timing candidates)."""
    try:
        with spin_policy_for_loading(()):
            import xgboost
    except ImportError as e:   # pragma: no cover -- xgboost is a dependency
        raise TuningError("the cost model needs xgboost: pip install xgboost-cpu") from e
    return xgboost


# ------------------------------------------------------------------------------------------------
# metrics
# ------------------------------------------------------------------------------------------------

def _top(values, k):
    """Indices of the k largest values; ties broken by position (stable)."""
    return np.argsort(-np.asarray(values, np.float64), kind="stable")[:k]


def recall_at_k(scores, y, k) -> float:
    """Fraction of the true top-``k`` (by ``y``) that are in the predicted top-``k`` (by
    ``scores``).  ``k`` is clipped to the number of samples; 0 samples give 0."""
    scores, y = np.asarray(scores), np.asarray(y)
    if scores.shape != y.shape or scores.ndim != 1:
        raise TuningError(f"recall_at_k: scores {scores.shape} and labels {y.shape} must be "
                          "1-D arrays of the same length")
    k = min(int(k), len(y))
    if k <= 0:
        return 0.0
    return len(set(_top(scores, k).tolist()) & set(_top(y, k).tolist())) / k


def average_recall_at_k(scores, y, k) -> float:
    """Mean of ``recall_at_k(scores, y, i)`` for i = 1..k (AutoTVM's ``a-recall``)."""
    scores, y = np.asarray(scores), np.asarray(y)
    k = min(int(k), len(y))
    if k <= 0:
        return 0.0
    pred, true = _top(scores, k), _top(y, k)
    seen_p, seen_t, common, total = set(), set(), 0, 0.0
    for i in range(k):
        a, b = int(pred[i]), int(true[i])
        if a == b:
            common += 1
        else:
            common += (a in seen_t) + (b in seen_p)
        seen_p.add(a)
        seen_t.add(b)
        total += common / (i + 1)
    return total / k


# ------------------------------------------------------------------------------------------------
# schema
# ------------------------------------------------------------------------------------------------

def _schema_of(feature_names):
    if feature_names is None:
        return {"length": features.FEATURE_LENGTH, "names_hash": features.SCHEMA_HASH}
    names = [str(n) for n in feature_names]
    return {"length": len(names),
            "names_hash": hashlib.sha256("\n".join(names).encode()).hexdigest()[:16]}


# ------------------------------------------------------------------------------------------------
# the model
# ------------------------------------------------------------------------------------------------

class XGBCostModel:
    """A ranking (or regression) cost model over fixed-length feature vectors."""

    def __init__(self, loss="rank", *, seed=0, nthread=1, max_depth=6, eta=0.25,
                 max_rounds=300, fixed_rounds=60, min_rounds=20, early_stopping_rounds=20,
                 min_samples=8, holdout_min=128, holdout_frac=0.2, recall_k=16, half_life=64.0,
                 base_drop=0.05, feature_names=None):
        if loss not in ("rank", "reg"):
            raise TuningError(f"loss must be 'rank' (rank:pairwise) or 'reg' (squared error), "
                              f"got {loss!r}")
        if not isinstance(nthread, int) or nthread < 1:
            raise TuningError(f"nthread must be a positive int, got {nthread!r}")
        self.loss = loss
        self.seed = int(seed)
        self.nthread = nthread
        self.max_depth = int(max_depth)
        self.eta = float(eta)
        self.max_rounds = int(max_rounds)
        self.fixed_rounds = int(fixed_rounds)
        self.min_rounds = int(min_rounds)
        self.early_stopping_rounds = int(early_stopping_rounds)
        self.min_samples = int(min_samples)
        self.holdout_min = int(holdout_min)
        self.holdout_frac = float(holdout_frac)
        self.recall_k = int(recall_k)
        self.half_life = float(half_life)
        self.base_drop = float(base_drop)
        self.schema = _schema_of(feature_names)
        self._rng = np.random.default_rng(self.seed)
        self._booster = None
        self._base = None
        self._weight = 0.0          # base-margin weight the current booster was trained with
        self.n_samples = 0          # own samples seen by the last fit
        self.n_rounds = 0           # rounds of the current booster
        self.n_base_samples = 0

    # -- properties ----------------------------------------------------------------------------
    @property
    def trained(self) -> bool:
        """True once the model has been fit on enough of its own measurements."""
        return self._booster is not None

    @property
    def has_base(self) -> bool:
        return self._base is not None

    @property
    def source(self) -> str:
        """Where ``predict`` scores come from: ``"model"``, ``"base"`` or ``"random"``."""
        if self._booster is not None:
            return "model"
        return "base" if self._base is not None else "random"

    def base_weight(self, n=None) -> float:
        """Weight of the base model's margin after ``n`` own samples (default: the last fit)."""
        if self._base is None:
            return 0.0
        n = self.n_samples if n is None else n
        w = 0.5 ** (n / self.half_life)
        return w if w >= self.base_drop else 0.0

    # -- data checks ---------------------------------------------------------------------------
    def _check_X(self, X, what="X"):
        X = np.asarray(X, dtype=np.float32)
        if X.ndim == 1 and X.size == self.schema["length"]:
            X = X[None, :]
        if X.ndim != 2 or X.shape[1] != self.schema["length"]:
            raise TuningError(
                f"{what} has shape {X.shape}, but this cost model expects rows of "
                f"{self.schema['length']} features (schema {self.schema['names_hash']}); "
                "extract them with einloop.autotune.model.feature.extract.extract")
        return np.nan_to_num(X, nan=0.0, posinf=0.0, neginf=0.0)

    @staticmethod
    def _check_y(y, n):
        y = np.asarray(y, dtype=np.float64).reshape(-1)
        if y.shape[0] != n:
            raise TuningError(f"got {n} feature rows but {y.shape[0]} labels")
        y = np.where(np.isfinite(y) & (y > 0), y, 0.0)
        return y

    @staticmethod
    def _normalise(y, group):
        out = np.zeros_like(y)
        for g in np.unique(group):
            m = group == g
            top = y[m].max()
            if top > 0:
                out[m] = y[m] / top
        return out

    # -- xgboost -------------------------------------------------------------------------------
    def _params(self):
        p = {"max_depth": self.max_depth, "eta": self.eta, "gamma": 1e-4, "min_child_weight": 1,
             "subsample": 1.0, "lambda": 1.0, "alpha": 0.0, "nthread": self.nthread,
             "seed": self.seed, "verbosity": 0, "tree_method": "hist"}
        if self.loss == "rank":
            p.update({"objective": "rank:pairwise", "disable_default_eval_metric": 1,
                      "lambdarank_pair_method": "topk", "lambdarank_num_pair_per_sample": 32})
        else:
            p.update({"objective": "reg:squarederror", "disable_default_eval_metric": 1})
        return p

    def _dmatrix(self, X, y=None, group=None, margin=None):
        xgb = _xgb()
        kw = {"nthread": self.nthread}
        if y is not None:
            kw["label"] = y
            if self.loss == "rank":
                kw["qid"] = np.zeros(len(y), np.int64) if group is None else group
        if margin is not None:
            kw["base_margin"] = margin
        return xgb.DMatrix(X, **kw)

    def _train(self, X, y, group, margin):
        """Fit a booster; early stopping on a seeded hold-out split when there is enough data."""
        xgb = _xgb()
        params = self._params()
        n = len(y)
        rounds = self.fixed_rounds
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if n >= self.holdout_min and self.holdout_frac > 0:
                rng = np.random.default_rng(self.seed + 7919)
                perm = rng.permutation(n)
                n_val = max(8, int(round(n * self.holdout_frac)))
                val, tr = np.sort(perm[:n_val]), np.sort(perm[n_val:])
                if len(np.unique(y[val])) > 1 and len(np.unique(y[tr])) > 1:
                    rounds = self._pick_rounds(xgb, params, X, y, group, margin, tr, val)
            dtrain = self._dmatrix(X, y, group, margin)
            booster = xgb.train(params, dtrain, num_boost_round=rounds, verbose_eval=False)
        return booster, rounds

    def _pick_rounds(self, xgb, params, X, y, group, margin, tr, val):
        k = self.recall_k

        def sub(idx):
            g = None if group is None else group[idx]
            if g is not None:                      # qid must stay sorted
                o = np.argsort(g, kind="stable")
                idx = idx[o]
                g = g[o]
            return self._dmatrix(X[idx], y[idx], g, None if margin is None else margin[idx]), idx

        dtr, _ = sub(tr)
        dval, val_idx = sub(val)
        yval = y[val_idx]

        def metric(predt, dmat):
            return "a-recall", average_recall_at_k(predt, yval, k)

        ev = {}
        booster = xgb.train(params, dtr, num_boost_round=self.max_rounds,
                            evals=[(dval, "holdout")], custom_metric=metric, maximize=True,
                            early_stopping_rounds=self.early_stopping_rounds,
                            evals_result=ev, verbose_eval=False)
        best = getattr(booster, "best_iteration", None)
        best = self.max_rounds - 1 if best is None else int(best)
        return max(self.min_rounds, best + 1)

    def _base_margin(self, X):
        return self._base.predict(self._dmatrix(X), output_margin=True)

    # -- public API ----------------------------------------------------------------------------
    def fit(self, X, y):
        """Fit on all measurements so far: ``X`` feature rows, ``y`` throughput (0 = failed).

        Returns self.  With fewer than ``min_samples`` samples, or labels all equal, the model
        stays untrained (``predict`` falls back to the base model or random scores).
        """
        X = self._check_X(X)
        y = self._check_y(y, X.shape[0])
        self.n_samples = X.shape[0]
        self._booster, self._weight, self.n_rounds = None, 0.0, 0
        if X.shape[0] < self.min_samples or y.max() <= 0 or len(np.unique(y)) < 2:
            return self
        y = y / y.max()
        w = self.base_weight(X.shape[0])
        margin = w * self._base_margin(X) if w > 0 else None
        self._booster, self.n_rounds = self._train(X, y, None, margin)
        self._weight = w
        return self

    def fit_base(self, X, y, group=None):
        """Train the base (transfer) model on earlier records.

        ``group`` (optional, one label per row, e.g. a workload key) normalises labels within
        each task and ranks only within a task, so throughputs of different operators are never
        compared.  Returns self.
        """
        X = self._check_X(X, "base records")
        y = self._check_y(y, X.shape[0])
        if group is None:
            g = np.zeros(len(y), np.int64)
        else:
            _, g = np.unique(np.asarray(group).reshape(-1), return_inverse=True)
            if len(g) != len(y):
                raise TuningError(f"got {len(y)} base records but {len(g)} group labels")
            o = np.argsort(g, kind="stable")
            X, y, g = X[o], y[o], g[o]
        y = self._normalise(y, g)
        if X.shape[0] < self.min_samples or len(np.unique(y)) < 2:
            raise TuningError(f"the base model needs at least {self.min_samples} records with "
                              f"distinct throughputs, got {X.shape[0]}")
        self._base, _ = self._train(X, y, g.astype(np.int64), None)
        self.n_base_samples = X.shape[0]
        return self

    @classmethod
    def with_base(cls, records_X, records_y, group=None, **kwargs):
        """A new model warm-started from a base model trained on ``records_X, records_y``."""
        return cls(**kwargs).fit_base(records_X, records_y, group)

    def predict(self, X) -> np.ndarray:
        """Scores for the rows of ``X`` (higher = better; only the order is meaningful)."""
        X = self._check_X(X)
        if self._booster is not None:
            margin = self._weight * self._base_margin(X) if self._weight > 0 else None
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return self._booster.predict(self._dmatrix(X, margin=margin)).astype(np.float64)
        if self._base is not None:
            return self._base_margin(X).astype(np.float64)
        return self._rng.random(X.shape[0])

    # -- persistence ---------------------------------------------------------------------------
    def _params_state(self):
        return {k: getattr(self, k) for k in (
            "loss", "seed", "nthread", "max_depth", "eta", "max_rounds", "fixed_rounds",
            "min_rounds", "early_stopping_rounds", "min_samples", "holdout_min", "holdout_frac",
            "recall_k", "half_life", "base_drop")}

    def save(self, path):
        """Write the model (boosters, parameters, feature schema) to one JSON file."""
        def raw(b):
            return None if b is None else base64.b64encode(bytes(b.save_raw("ubj"))).decode()
        doc = {"format": _FORMAT, "version": _VERSION, "xgboost": _xgb().__version__,
               "schema": self.schema, "params": self._params_state(),
               "n_samples": self.n_samples, "n_rounds": self.n_rounds,
               "n_base_samples": self.n_base_samples, "weight": self._weight,
               "booster": raw(self._booster), "base": raw(self._base)}
        tmp = f"{path}.tmp{os.getpid()}"
        with open(tmp, "w") as fh:
            json.dump(doc, fh)
        os.replace(tmp, path)

    @classmethod
    def load(cls, path, feature_names=None):
        """Read a model written by ``save``; its feature schema must match the extractor's
        (or ``feature_names``), else :class:`TuningError`."""
        try:
            with open(path) as fh:
                doc = json.load(fh)
        except (OSError, ValueError) as e:
            raise TuningError(f"cannot read cost model {path}: {e}") from e
        if not isinstance(doc, dict) or doc.get("format") != _FORMAT:
            raise TuningError(f"{path} is not an einloop cost model file")
        if doc.get("version") != _VERSION:
            raise TuningError(f"cost model {path} has format version {doc.get('version')}; this "
                              f"einloop reads version {_VERSION}: retrain the model")
        want = _schema_of(feature_names)
        got = doc.get("schema") or {}
        if got.get("length") != want["length"] or got.get("names_hash") != want["names_hash"]:
            raise TuningError(
                f"cost model {path} was trained on {got.get('length')} features (schema "
                f"{got.get('names_hash')}), but the feature extractor now produces "
                f"{want['length']} (schema {want['names_hash']}); the model cannot be used with "
                "these features: retrain it (or delete the file)")
        try:
            m = cls(**doc["params"], feature_names=feature_names)
            xgb = _xgb()

            def booster(s):
                if s is None:
                    return None
                b = xgb.Booster(params={"nthread": m.nthread, "verbosity": 0})
                b.load_model(bytearray(base64.b64decode(s)))
                return b
            m._booster = booster(doc.get("booster"))
            m._base = booster(doc.get("base"))
            m.n_samples = int(doc.get("n_samples", 0))
            m.n_rounds = int(doc.get("n_rounds", 0))
            m.n_base_samples = int(doc.get("n_base_samples", 0))
            m._weight = float(doc.get("weight", 0.0))
        except TuningError:
            raise
        except Exception as e:  # noqa: BLE001 -- a corrupt file is the user's to fix
            raise TuningError(f"cost model {path} is corrupt: {e}") from e
        return m
