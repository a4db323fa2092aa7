"""The tuning loop shared by all tuners, and the two model-free baselines.

A tuner proposes batches of candidates (``next_batch``: configurations of the task's space), the
measurer times them, and the tuner learns from the results (``update``). What a tuner already knows
it will propose next (``peek_next``) is passed to the measurer as lookahead, which builds it while
the current batch is measured. The loop identifies candidates by ``candidate.key`` only (a config's
key is its index), so it serves both kinds of task, and schedules by the task's
``schedule_key``: a candidate that makes a schedule already measured (many configs of a
generated space make the same steps) is marked visited and never measured again, so
``n_trial`` counts distinct schedules, and a space that runs out of them first spends the rest
measuring its schedules again, fastest first (:data:`RECHECK_MEASUREMENTS`).  After the search,
the few best schedules are measured once more (:data:`CONFIRM_TOP`, beyond ``n_trial``) and
every schedule is judged by its typical measurement (:func:`~..log.database.typical`), as
deploying from the log judges it.  The loop
owns what every tuner needs: resuming from the log it writes, the progress bar, the
best-so-far, early stopping, a wall-time budget, a clean stop on Ctrl-C, and a clear error
when every trial failed.
"""
from __future__ import annotations

import random
import sys
import time
import warnings

from tqdm.auto import tqdm

from ...errors import NoValidTrialError, TuningError
from ..log.database import Order, log_to_file, typical
from ..log.record import StaleRecordWarning
from ..measure.common import MeasureResult, measure_option as default_option
from ..measure.open import open_measurer
from ..measure.status import MeasureErrorNo


#: batches in a row whose every candidate repeated a measured schedule, after which the search
#: stops: the tuner's proposals keep landing on schedules it knows (a space whose configs make
#: few distinct schedules), and more proposals would only spend time
MAX_REPEATED_BATCHES = 8
#: schedules measured once more after a search, the fastest first, each then judged by the
#: slower of its two measurements.  The fastest of hundreds of noisy measurements is biased: among
#: many near-equal candidates the one measured at a quiet moment of a shared machine wins, and
#: its time is what no later call gets.  A second measurement, minutes later, of the few that could
#: be the best keeps a lucky one from standing for its schedule; these measurements are a
#: budget of their own, beyond n_trial
CONFIRM_TOP = 3
#: rounds of confirming at most: another round measures the next CONFIRM_TOP while the fastest
#: by typical time is still a schedule measured once.  A shared VM's speed drifts by tens of
#: percent within minutes; when it slows during a search, the confirmed schedules measure slower
#: and a schedule measured once, early, would otherwise stand as the best on its single time
CONFIRM_ROUNDS = 3
#: a search of fewer distinct schedules is not confirmed (a quick job, a test's few trials)
CONFIRM_MIN_TRIALS = 16
#: a space exhausted before n_trial spends the trials left on measuring its schedules again, the
#: fastest first, until each has this many measurements or the trials run out.  In a small space
#: every schedule is a contender, and a search of minutes on a shared machine catches some of
#: them at a disturbed moment (a schedule measured 4x slower than it runs); the median of three
#: outvotes one disturbed measurement, fast or slow.  These measurements count against n_trial
RECHECK_MEASUREMENTS = 3


class Tuner:
    """Base class.  Subclasses implement ``next_batch(n)`` and may override ``update``."""

    batch_size = 8
    n_seeds = 8                     # heuristic seed configs measured first, if the task has any

    def __init__(self, task, seed=None):
        self.task = task
        self.space = task.config_space
        self.seed = seed
        self.rng = random.Random(seed)
        self.visited = set()              # candidate keys (config indices for a template)
        self.history = []                 # (candidate, result) in measurement order
        self.best_config = None
        self.best_cost = float("inf")
        self.interrupted = False
        self.measured = 0           # trials the last tune() call measured
        self.schedules = set()      # schedule keys measured (task.schedule_key)
        self.confirmed = 0          # measurements the last tune() call spent confirming
        self.rechecked = 0          # measurements the last tune() call spent on an exhausted space
        self._again = 0             # measurements of schedules measured before (log and this job)
        self._costs = {}            # schedule key -> (candidate, [mean cost of each measurement])
        self.repeats = 0            # proposals skipped: their schedule was measured
        self._schedule_keys = {}    # candidate key -> schedule key

    # what subclasses provide ----------------------------------------------------------------
    def next_batch(self, n):
        raise NotImplementedError

    def peek_next(self, n):
        """Up to *n* candidates the next ``next_batch(n)`` will return first, in order, if they
        are known already (a planned tuner knows them; a model-free base knows none).  The loop
        has them built while the current batch is measured; it must not change what is
        proposed, so it consumes no randomness and changes no state."""
        return []

    def update(self, configs, results):
        """Learn from measured candidates (the base class only tracks them)."""

    def has_next(self):
        return len(self.visited) < self.space.size

    def _seeded_batch(self, n):
        """The task's heuristic seed configs first (an auto-scheduling task has some), then the
        tuner's own proposals."""
        if getattr(self, "_seeds", None) is None:
            pick = getattr(self.task, "seed_configs", None)
            self._seeds = [c for c in (pick(self.n_seeds) if pick else ())
                           if c.key not in self.visited]
        out = []
        while self._seeds and len(out) < n:
            c = self._seeds.pop(0)
            if c.key not in self.visited and all(o.key != c.key for o in out):
                out.append(c)
        rest = self.next_batch(n - len(out)) if len(out) < n else []
        return out + [c for c in rest if all(o.key != c.key for o in out)]

    def _peek_seeded(self, n):
        """What the next ``_seeded_batch(n)`` will return first, as far as it is known now."""
        out = []
        for c in getattr(self, "_seeds", None) or ():
            if len(out) < n and c.key not in self.visited and all(o.key != c.key for o in out):
                out.append(c)
        rest = self.peek_next(n - len(out)) if len(out) < n else []
        return out + [c for c in rest if all(o.key != c.key for o in out)]

    # helpers ----------------------------------------------------------------------------------
    def _unvisited(self, indices, n) -> list:
        """Configs of the first *n* distinct unvisited *indices*, in order."""
        out = []
        for idx in indices:
            if len(out) >= n:
                break
            if idx not in self.visited and all(c.index != idx for c in out):
                out.append(self.space.get(idx))
        return out

    def schedule_key(self, candidate):
        """The task's identity of the schedule *candidate* makes (cached per candidate)."""
        found = self._schedule_keys.get(candidate.key)
        if found is None:
            key_of = getattr(self.task, "schedule_key", None)
            found = key_of(candidate) if key_of is not None else candidate.key
            self._schedule_keys[candidate.key] = found
        return found

    def _fresh(self, candidates) -> list:
        """*candidates* but those whose schedule a trial measured or an earlier one of them
        makes; those are marked visited and counted in ``repeats``, never measured."""
        out, keys = [], set()
        for c in candidates:
            k = self.schedule_key(c)
            if k in self.schedules or k in keys:
                self.visited.add(c.key)
                self.repeats += 1
            else:
                keys.add(k)
                out.append(c)
        return out

    @property
    def best_gflops(self):
        return self.task.flop / self.best_cost / 1e9 if self.best_config is not None else 0.0

    def gflops_of(self, result):
        if result.error_no != MeasureErrorNo.NO_ERROR or not result.costs:
            return 0.0
        return self.task.flop / (sum(result.costs) / len(result.costs)) / 1e9

    def _record(self, candidates, results):
        for c, r in zip(candidates, results):
            self.visited.add(c.key)
            key = self.schedule_key(c)
            self.schedules.add(key)
            self.history.append((c, r))
            if r.error_no == MeasureErrorNo.NO_ERROR and r.costs:
                self._measured(key, c, sum(r.costs) / len(r.costs))

    def _measured(self, key, candidate, cost):
        """One more error-free measurement of schedule *key* (made by *candidate*)."""
        first, costs = self._costs.setdefault(key, (candidate, []))
        costs.append(cost)
        if first is self.best_config or typical(costs) < self.best_cost:
            self._rank()

    def _rank(self):
        """The best: the schedule whose typical measurement is the fastest (ties: the first
        measured), as :func:`~..log.database.typical_best` picks it from a log."""
        self.best_cost, self.best_config = float("inf"), None
        for c, costs in self._costs.values():
            t = typical(costs)
            if t < self.best_cost:
                self.best_cost, self.best_config = t, c

    def _resume(self, databases):
        """Feed this task's records from the tuner's own logs (their databases) back in, without
        re-measuring; a schedule's later records (a confirmation) count as its measurements."""
        configs, results, seen = [], [], set(self.visited)
        again = []                          # (candidate, cost) of a schedule read just now
        stale = 0                           # records of a config index that makes other steps
        for db in databases:
            for r in db.query(workload=self.task.workload_key, target=self.task.target,
                              ok_only=False, order=Order.WRITTEN):
                cand = self.task.candidate_from_json(r.candidate)
                if getattr(cand, "index", None) is None:
                    # a step list no config of this space makes now: one measured as steps
                    # has no index; one with an index was written for another space
                    stale += isinstance(r.candidate.get("config_index"), int)
                    continue
                if cand.key in seen:
                    if cand.key not in self.visited:
                        self._again += 1
                        if r.ok:
                            again.append((cand, r.mean_cost))
                    continue
                seen.add(cand.key)
                configs.append(cand)
                results.append(MeasureResult(r.costs, MeasureErrorNo.from_log(r.error_no),
                                             r.error_msg, 0.0, r.timestamp))
        if stale:
            many = stale > 1
            warnings.warn(
                f"{stale} record{'s' if many else ''} of {self.task.workload} in the tuning "
                f"log {'were' if many else 'was'} written for another version of its schedule "
                "space (the config index it holds makes another step list now: the "
                "auto-scheduler's knobs changed); this job does not resume from "
                f"{'them' if many else 'it'} and measures those trials again, while "
                "apply_history_best still deploys the logged step lists unchanged",
                StaleRecordWarning, stacklevel=3)
        if configs:
            self._record(configs, results)
            self.update(configs, results)
        for cand, cost in again:
            self._measured(self.schedule_key(cand), cand, cost)
        return len(configs)

    def _to_recheck(self, n_trial, done) -> list:
        """An exhausted space's schedules to measure again now (see RECHECK_MEASUREMENTS): those
        measured fewer times, the fastest first, at most the trials left."""
        spare = n_trial - done - self._again
        if spare <= 0 or self.has_next():
            return []
        ranked = sorted((typical(cs), n, c) for n, (c, cs) in enumerate(self._costs.values())
                        if len(cs) < RECHECK_MEASUREMENTS)
        return [c for _, _, c in ranked[:spare]]

    def _recheck(self, measurer, callbacks, bar, n_trial, done, batch_size):
        """Measure an exhausted space's schedules again, a round at a time, while trials are left."""
        while True:
            todo = self._to_recheck(n_trial, done)
            if not todo:
                return
            for at in range(0, len(todo), batch_size):
                batch = todo[at:at + batch_size]
                self.rechecked += self._measure_again(measurer, callbacks, batch)
                bar.update(len(batch))

    def _measure_again(self, measurer, callbacks, candidates) -> int:
        """Measure *candidates* (schedules measured before) once more, recorded and logged as
        any trial; returns how many."""
        results = measurer.measure_batch(candidates)
        self._record(candidates, results)
        for cb in callbacks:
            cb(self, candidates, results)
        self._again += len(candidates)
        return len(candidates)

    def _confirm(self, measurer, callbacks, bar, quiet):
        """Measure the CONFIRM_TOP fastest schedules once more, and again the next ones while
        the fastest is one measured once (see CONFIRM_TOP and CONFIRM_ROUNDS)."""
        before = self.best_config
        for _ in range(CONFIRM_ROUNDS):
            ranked = sorted((typical(cs), n, len(cs), c)
                            for n, (c, cs) in enumerate(self._costs.values()))
            if not ranked or ranked[0][2] > 1:
                break
            top = [c for _, _, times, c in ranked if times == 1][:CONFIRM_TOP]
            self.confirmed += self._measure_again(measurer, callbacks, top)
        if self.confirmed and not quiet:
            changed = "" if self.best_config is before else ", another schedule is now the best"
            bar.write(f"measured the {self.confirmed} fastest schedules of {self.task.workload} "
                      f"once more: best {self.best_gflops:.1f} GFLOP/s at their typical "
                      f"time{changed}")

    # the loop ---------------------------------------------------------------------------------
    def tune(self, n_trial, measure_option=None, callbacks=(), early_stopping=None,
             time_budget_s=None, quiet=False, confirm=True):
        """Measure up to *n_trial* configurations in all (records already in the log count); a
        space exhausted before that spends the trials left on measuring its schedules again
        (:data:`RECHECK_MEASUREMENTS`).

        Parameters
        ----------
        n_trial : int
            Total trials of this job; a job resumed from its log measures only the rest.
        measure_option : MeasureOption
            From :func:`measure_option` (number, repeat, timeout, ...).
        callbacks : list
            Called as ``cb(tuner, candidates, results)`` after each batch; :class:`log_to_file`
            also makes the job resume from that log.
        early_stopping : int, optional
            Stop after this many trials without a new best.
        time_budget_s : float, optional
            Start no new batch after this many seconds.
        quiet : bool
            No progress bar.
        confirm : bool
            After a search of CONFIRM_MIN_TRIALS or more schedules, measure the CONFIRM_TOP
            fastest once more (beyond *n_trial*) and judge each by its typical measurement.
        """
        if not isinstance(n_trial, int) or n_trial < 1:
            raise TuningError(f"tune: n_trial must be a positive integer, got {n_trial!r}")
        option = measure_option or default_option()
        done = self._resume([cb.database for cb in callbacks if isinstance(cb, log_to_file)])
        self.measured = 0                   # by this call (the log's earlier trials aside)
        self.confirmed = self.rechecked = 0
        start, last_best_at = time.time(), len(self.history)
        bar = _progress(n_trial, done, self.task, quiet)
        errors = sum(1 for _, r in self.history if r.error_no != MeasureErrorNo.NO_ERROR)
        try:
            if done >= n_trial or not (self.has_next() or self._to_recheck(n_trial, done)):
                if not quiet:
                    bar.write(f"the log already holds {done} trials of {self.task.workload}: "
                              "nothing left to measure")
                return self
            repeated = 0                    # batches in a row that only repeated schedules
            with open_measurer(self.task, option) as measurer:
                # keep every runner busy: a cluster with many runners needs bigger batches
                batch_size = max(self.batch_size, 2 * measurer.n_runners)
                while done < n_trial and self.has_next():
                    if time_budget_s is not None and time.time() - start > time_budget_s:
                        break
                    if early_stopping is not None and len(self.history) - last_best_at >= early_stopping:
                        break
                    configs = self._seeded_batch(min(batch_size, n_trial - done))
                    if not configs:
                        break
                    configs = self._fresh(configs)
                    if not configs:
                        repeated += 1
                        if repeated >= MAX_REPEATED_BATCHES:
                            break
                        continue
                    repeated = 0
                    before = self.best_cost
                    following = min(batch_size, n_trial - done - len(configs))
                    ahead = self._peek_seeded(following) if following > 0 else []
                    results = measurer.measure_batch(configs, lookahead=ahead)
                    self._record(configs, results)
                    self.update(configs, results)
                    for cb in callbacks:
                        cb(self, configs, results)
                    if self.best_cost < before:
                        last_best_at = len(self.history)
                    done += len(configs)
                    self.measured += len(configs)
                    errors += sum(1 for r in results if r.error_no != MeasureErrorNo.NO_ERROR)
                    bar.update(len(configs))
                    bar.set_postfix({"trials": done, "best": f"{self.best_gflops:.1f} GFLOP/s",
                                     "errors": errors, **measurer.progress()})
                self._recheck(measurer, callbacks, bar, n_trial, done, batch_size)
                if confirm and self.measured and len(self.schedules) >= CONFIRM_MIN_TRIALS:
                    self._confirm(measurer, callbacks, bar, quiet)
            if done < n_trial and repeated >= MAX_REPEATED_BATCHES and not quiet:
                bar.total = done
                bar.refresh()
                bar.write(f"the search of {self.task.workload} found no new schedule in its last "
                          f"{MAX_REPEATED_BATCHES} batches: {len(self.schedules)} distinct "
                          f"schedules measured, the space's other configs repeat them "
                          f"({n_trial - done} of n_trial={n_trial} left unused)")
            elif done < n_trial and not self.has_next() and not quiet:
                bar.total = done + self.rechecked    # the bar ends full, not frozen
                bar.refresh()
                again = (f", then {self.rechecked} more measurements of its schedules, the "
                         "fastest first" if self.rechecked else "")
                unused = n_trial - done - self._again
                bar.write(f"the space of {self.task.workload} is exhausted: all {done} of its "
                          f"candidates are measured{again} ({max(unused, 0)} of "
                          f"n_trial={n_trial} left unused)")
        except KeyboardInterrupt:
            self.interrupted = True
            print(f"interrupted after {done} trials; the log keeps every finished trial",
                  file=sys.stderr)
        finally:
            bar.close()
        if self.history and self.best_config is None and not self.interrupted:
            raise NoValidTrialError(_all_failed(self.task, self.history))
        return self


def resumable_trials(task, db) -> int:
    """The trials of *task* in the record store *db* that a job resumed from it counts toward
    ``n_trial`` (:meth:`Tuner.tune`): its distinct candidates of the space as it is now.  A
    record whose config index makes another step list now (a space of another einloop
    version) is stale: such a job measures it again, so it does not count."""
    getattr(task, "config_space", None)     # loaded: a config index is only read with it
    seen = set()
    for r in db.query(workload=task.workload_key, target=task.target, ok_only=False,
                      order=Order.WRITTEN):
        cand = task.candidate_from_json(r.candidate)
        if getattr(cand, "index", None) is not None:
            seen.add(cand.key)
    return len(seen)


def _progress(total, initial, task, quiet):
    return tqdm(total=total, initial=initial, disable=quiet, unit="trial", dynamic_ncols=True,
                desc=f"tuning {task.workload}")


def _all_failed(task, history):
    kinds = {}
    for _, r in history:
        kinds[r.error_no.name] = kinds.get(r.error_no.name, 0) + 1
    first = "\n\n".join(f"--- {c.label} ({r.error_no.name}):\n{r.error_msg}"
                        for c, r in history[:3])
    return (f"every one of the {len(history)} trials of {task.workload} failed "
            f"({', '.join(f'{k}: {n}' for k, n in kinds.items())}). The first errors:\n{first}")


class RandomTuner(Tuner):
    """Measure configurations drawn uniformly from the unvisited part of the space."""

    def next_batch(self, n):
        out, tries = [], 0
        size = self.space.size
        while len(out) < n and len(self.visited) + len(out) < size and tries < 100 * n + 1000:
            tries += 1
            idx = self.rng.randrange(size)
            if idx not in self.visited and all(c.index != idx for c in out):
                out.append(self.space.get(idx))
        return out


class GridSearchTuner(Tuner):
    """Measure configurations in index order."""

    def __init__(self, task, seed=None):
        super().__init__(task, seed)
        self._next = 0

    def peek_next(self, n):
        out, i = [], self._next
        while len(out) < n and i < self.space.size:
            if i not in self.visited:
                out.append(self.space.get(i))
            i += 1
        return out

    def next_batch(self, n):
        out = []
        while len(out) < n and self._next < self.space.size:
            if self._next not in self.visited:
                out.append(self.space.get(self._next))
            self._next += 1
        return out
