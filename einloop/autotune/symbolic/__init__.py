"""Tuning operators with symbolic extents: size points and their record queries (points), one
search per size hint (tune), a cross-size round (cross_sizes), the size dispatch (dispatch)."""
