"""Fixed-length features of a candidate's lowered loop nest, the cost model's input."""
