"""Genetic operators on configurations seen as knob-index vectors (points of the space)."""
from __future__ import annotations


def crossover(a, b, rng):
    """Single-point crossover of two points."""
    if len(a) < 2:
        return list(a if rng.random() < 0.5 else b)
    cut = rng.randrange(1, len(a))
    return list(a[:cut]) + list(b[cut:])


def mutate(point, dims, prob, rng):
    """Re-draw each knob with probability *prob*."""
    return [rng.randrange(d) if rng.random() < prob else p for p, d in zip(point, dims)]


def random_point(dims, rng):
    return [rng.randrange(d) for d in dims]


def pick_parent(population, weights, rng):
    """Fitness-proportional choice (uniform when every weight is zero)."""
    total = sum(weights)
    if total <= 0:
        return population[rng.randrange(len(population))]
    x = rng.random() * total
    for p, w in zip(population, weights):
        x -= w
        if x <= 0:
            return p
    return population[-1]


def next_generation(population, fitness, dims, rng, size, elite=3, mutation_prob=0.1,
                    exclude=frozenset(), index_of=None, max_tries=None):
    """Elites plus children (crossover, then mutation) not in *exclude*; points as lists."""
    order = sorted(range(len(population)), key=lambda i: -fitness[i])
    out, seen = [], set(exclude)
    for i in order[:elite]:
        key = index_of(population[i])
        if key not in seen:
            out.append(list(population[i]))
            seen.add(key)
    tries = 0
    max_tries = max_tries or 20 * size
    while len(out) < size and tries < max_tries:
        tries += 1
        child = crossover(pick_parent(population, fitness, rng),
                          pick_parent(population, fitness, rng), rng)
        child = mutate(child, dims, mutation_prob, rng)
        key = index_of(child)
        if key not in seen:
            seen.add(key)
            out.append(child)
    return out
