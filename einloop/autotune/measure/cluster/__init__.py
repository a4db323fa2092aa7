"""Measuring on a Dask cluster: the client side (``client``) and what runs on each worker
(``worker``).
"""
