"""Who proposes the next candidates: the tuning loop and its strategies (random, grid, genetic,
model-guided).
"""
