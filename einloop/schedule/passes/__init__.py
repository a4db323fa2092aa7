"""Lowering passes: each a plain function from loop IR to loop IR (or te bodies to te bodies)."""
