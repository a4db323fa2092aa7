"""XGBTuner: an XGBoost cost model guiding a genetic search (the default tuner).

Each round: fit the model on every measurement so far (rank loss: only the order matters); run a
few generations of a genetic algorithm whose fitness is the model's score, starting from the
best measured configurations plus random ones; measure the best-scored unvisited candidates,
with a share of the best measured configuration's neighbours (one few-choice knob changed) and a
share of random ones for exploration; repeat.  Features come from each candidate's
lowered loop nest (``feature_type="itervar"``) or from its knob values (``"knob"``), and are
cached per configuration.  A model trained on earlier logs can warm-start the search.
"""
from __future__ import annotations

import numpy as np

from ...errors import Error, TuningError
from ..log import record as rec
from ..log.database import by_schedule, typical
from ..model.cost_model import XGBCostModel
from ..model.feature import extract as features
from ..task.create import task_from_record
from .ga import next_generation, random_point
from .tuner import Tuner


#: random draws per plan entry before a plan is left short (a space whose configs repeat a few
#: schedules)
RANDOM_TRIES = 20
#: share of each plan (after the first measurements) given to the best measured config with one
#: of its few-choice knobs changed (:meth:`XGBTuner._neighbours`)
NEIGHBOUR_SHARE = 0.25
#: a knob of at most this many choices is a few-choice knob: a compute location, an inline, a
#: pack, an accumulator's level, an unroll step, a short split; not a long list of tile sizes
NEIGHBOUR_MAX_CHOICES = 8


class XGBTuner(Tuner):
    """Model-guided genetic search.

    Parameters
    ----------
    task : Task
    plan_size : int
        Candidates chosen per model round (the model is refit between rounds).
    feature_type : {"itervar", "knob"}
        Loop-nest features (transfer across shapes) or knob values (cheaper).
    loss : {"rank", "reg"}
    population, generations : int
        Size and length of the genetic search over the model in each round.
    eps_greedy : float
        Share of each plan chosen at random, for exploration.
    seed : int, optional
        Makes the search reproducible (space sampling, GA and XGBoost).
    """

    def __init__(self, task, plan_size=16, feature_type="itervar", loss="rank", population=96,
                 generations=3, eps_greedy=0.1, seed=None, num_threads=None):
        super().__init__(task, seed)
        if feature_type not in ("itervar", "knob"):
            raise TuningError(f"XGBTuner: feature_type must be 'itervar' or 'knob', "
                              f"got {feature_type!r}")
        self.plan_size = plan_size
        self.batch_size = min(8, plan_size)
        self.feature_type = feature_type
        self.population = population
        self.generations = generations
        self.eps_greedy = eps_greedy
        # knob features are one value per knob of this space: the model's schema says so
        names = list(self.space.knobs) if feature_type == "knob" else None
        self.model = XGBCostModel(loss=loss, seed=seed if seed is not None else 0,
                                  feature_names=names,
                                  **({"nthread": num_threads} if num_threads else {}))
        self.plan = []
        self._features = {}
        self.xs, self.ys = [], []
        self._base = None

    # features ---------------------------------------------------------------------------------
    def features(self, index):
        row = self._features.get(index)
        if row is None:
            row = self._compute_features(index)
            self._features[index] = row
        return row

    def _compute_features(self, index):
        if self.feature_type == "knob":
            point = self.space.point_of(index)
            return np.asarray([p / max(1, d - 1) for p, d in zip(point, self.space.dims)],
                              dtype=np.float32)
        try:
            s, args = self.task.instantiate(index)
        except Exception:                 # an invalid candidate: a flagged zero row
            return features.failed_row()
        return features.extract_schedule(s, args)

    # learning ---------------------------------------------------------------------------------
    def update(self, configs, results):
        for c, r in zip(configs, results):
            self.xs.append(self.features(c.index))
            self.ys.append(self.gflops_of(r))

    def load_history(self, logs, min_records=16):
        """Warm-start: train a base model on earlier logs (this task's or other tasks', of
        templates or of step lists: loop-nest features carry over), one example per schedule
        at its typical measurement; returns how many."""
        if self.feature_type != "itervar":
            raise TuningError("load_history needs feature_type='itervar' (knob features do "
                              "not carry over between tasks)")
        xs, ys, tasks = [], [], {}
        for r in _one_per_schedule(r for path in logs for r in rec.load(path)):
            try:
                task = tasks.get(r.workload)
                if task is None:
                    task = tasks[r.workload] = task_from_record(r)
                s, args = task.instantiate(task.candidate_from_json(r.candidate))
            except Error:                   # a template not importable here, or changed since
                continue
            xs.append(features.extract_schedule(s, args))
            ys.append(task.flop / r.mean_cost / 1e9 if r.ok else 0.0)
        if len(xs) < min_records:
            return 0
        self.model.fit_base(np.stack(xs), np.asarray(ys, dtype=np.float64))
        return len(xs)

    # proposing ----------------------------------------------------------------------------------
    def next_batch(self, n):
        if not self.plan:
            self.plan = self._make_plan()
        out = []
        while self.plan and len(out) < n:
            idx = self.plan.pop(0)
            if idx not in self.visited and all(c.index != idx for c in out):
                out.append(self.space.get(idx))
        return out

    def peek_next(self, n):
        """The rest of the current plan (a new plan needs the results being measured)."""
        return self._unvisited(self.plan, n)

    def _make_plan(self):
        """The next plan_size configs: the model's best-scored, the best measured config's
        neighbours (:meth:`_neighbours`), then random ones, each making a schedule not measured
        and not planned yet (the model scores every config of one schedule alike, so without
        this a plan fills with copies of the best one)."""
        if len(self.xs) >= 2:
            self.model.fit(np.stack(self.xs), np.asarray(self.ys, dtype=np.float64))
        candidates = self._search()
        n_random = max(1, int(round(self.plan_size * self.eps_greedy)))
        neighbours = self._neighbours()
        n_near = min(len(neighbours), int(round(self.plan_size * NEIGHBOUR_SHARE)))
        plan, keys = [], set(self.schedules)

        def take(idx) -> None:
            k = self.schedule_key(self.space.get(idx))
            if k in keys:
                self.visited.add(idx)
                self.repeats += 1
            else:
                keys.add(k)
                plan.append(idx)

        def fill(indices, upto) -> None:
            while len(plan) < upto:
                idx = next(indices, None)
                if idx is None:
                    return
                if idx not in plan:
                    take(idx)
        ranked = iter(candidates)             # each candidate is taken or skipped once
        fill(ranked, self.plan_size - n_random - n_near)
        fill(iter(neighbours), self.plan_size - n_random)
        fill(ranked, self.plan_size - n_random)     # slots neighbours left (repeated schedules)
        taken, tries = set(plan) | self.visited, 0
        while len(plan) < self.plan_size and len(taken) < self.space.size \
                and tries < RANDOM_TRIES * self.plan_size:
            tries += 1
            idx = self.rng.randrange(self.space.size)
            if idx not in taken:
                taken.add(idx)
                take(idx)
        return plan

    def _neighbours(self):
        """Unvisited configs one few-choice knob away from the best measured one, in random
        order.  The model judges a choice such as a stage's compute location by the few
        configs that made it, mostly random ones with poor tiles, so a location that suits the
        best tiles may score too low to be planned ever (a convolution's padding computed per
        block of its parallel loop, tried once with poor tiles, was never tried again);
        measuring it with the best's other values settles that choice."""
        best = self.best_config
        if best is None or not hasattr(best, "index"):
            return []
        point = self.space.point_of(best.index)
        out = []
        for k, n in enumerate(self.space.dims):
            if n > NEIGHBOUR_MAX_CHOICES:
                continue
            for v in range(n):
                if v != point[k]:
                    idx = self.space.index_of(point[:k] + [v] + point[k + 1:])
                    if idx not in self.visited:
                        out.append(idx)
        self.rng.shuffle(out)
        return out

    def _score(self, indices):
        x = np.stack([self.features(i) for i in indices])
        return self.model.predict(x)

    def _search(self):
        """Genetic search on the model's scores; returns unvisited indices, best first."""
        dims, space = self.space.dims, self.space
        measured = sorted(zip((c.index for c, _ in self.history), self.ys), key=lambda t: -t[1])
        seeds = [space.point_of(i) for i, y in measured[:self.population // 4] if y > 0]
        population, seen = list(seeds), {space.index_of(p) for p in seeds}
        while len(population) < self.population and len(seen) < space.size:
            p = random_point(dims, self.rng)
            if space.index_of(p) not in seen:
                seen.add(space.index_of(p))
                population.append(p)
        scored = {}
        for _ in range(self.generations):
            idx = [space.index_of(p) for p in population]
            scores = self._score(idx)
            for i, sc in zip(idx, scores):
                scored[i] = float(sc)
            fitness = list(np.exp(scores - scores.max()))
            population = next_generation(population, fitness, dims, self.rng, self.population,
                                         elite=max(1, self.population // 10),
                                         mutation_prob=0.15, index_of=space.index_of)
        idx = [space.index_of(p) for p in population]
        for i, sc in zip(idx, self._score(idx)):
            scored[i] = float(sc)
        ranked = sorted((i for i in scored if i not in self.visited), key=lambda i: -scored[i])
        return ranked


def _one_per_schedule(records):
    """Per workload and schedule of *records*: its typical error-free record, or its first
    record if none is error-free."""
    for group in by_schedule(records).values():
        ok = [r for r in group if r.ok]
        yield typical(ok, key=lambda r: r.mean_cost) if ok else group[0]
