"""How a candidate is built, checked and timed: build workers, an isolated runner, or a Dask
cluster.
"""
