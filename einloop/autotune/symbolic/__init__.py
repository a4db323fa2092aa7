"""Tuning operators with symbolic extents: one search per size hint, a cross-size round, tuned
dispatch.
"""
