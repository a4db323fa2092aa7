"""GATuner: a genetic algorithm that measures every individual (no cost model)."""
from __future__ import annotations

from .ga import next_generation, random_point
from .tuner import Tuner


class GATuner(Tuner):
    """Population of configurations; each generation keeps elites and breeds the rest.

    Fitness is measured throughput; parents are chosen in proportion to it; children come from
    single-point crossover of knob vectors and per-knob mutation.
    """

    def __init__(self, task, pop_size=32, elite_num=3, mutation_prob=0.1, seed=None):
        super().__init__(task, seed)
        self.pop_size = max(2, min(pop_size, self.space.size))
        self.elite_num = min(elite_num, self.pop_size)
        self.mutation_prob = mutation_prob
        self.batch_size = min(8, self.pop_size)
        self.pending = []
        self.fitness = {}                 # index -> GFLOP/s (0 for failures)

    def update(self, configs, results):
        for c, r in zip(configs, results):
            self.fitness[c.index] = self.gflops_of(r)

    def _breed(self):
        dims = self.space.dims
        if not self.fitness:
            first, seen = [], set()
            while len(first) < self.pop_size and len(seen) < self.space.size:
                idx = self.space.index_of(random_point(dims, self.rng))
                if idx not in seen:
                    seen.add(idx)
                    first.append(idx)
            return [idx for idx in first if idx not in self.visited]
        ranked = sorted(self.fitness.items(), key=lambda kv: -kv[1])[:self.pop_size]
        population = [self.space.point_of(i) for i, _ in ranked]
        fitness = [f for _, f in ranked]
        children = next_generation(population, fitness, dims, self.rng, self.pop_size,
                                   self.elite_num, self.mutation_prob, exclude=self.visited,
                                   index_of=self.space.index_of)
        return [self.space.index_of(p) for p in children]

    def peek_next(self, n):
        """The bred but unmeasured part of the generation (breeding needs its results)."""
        return self._unvisited(self.pending, n)

    def next_batch(self, n):
        out = []
        for _ in range(3):
            while self.pending and len(out) < n:
                idx = self.pending.pop(0)
                if idx not in self.visited and all(c.index != idx for c in out):
                    out.append(self.space.get(idx))
            if len(out) >= n:
                break
            self.pending = self._breed()
            if not self.pending:
                break
        if len(out) < n:                  # the population has converged: explore at random
            while len(out) < n and len(self.visited) + len(out) < self.space.size:
                idx = self.rng.randrange(self.space.size)
                if idx not in self.visited and all(c.index != idx for c in out):
                    out.append(self.space.get(idx))
        return out
