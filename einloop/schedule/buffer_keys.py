"""How a lowering finds the buffer of an operation's output."""


def buffer_key(op, value_index=0):
    """The key of output *value_index* of *op* in the buffers dict: ``id(op)`` for the first
    (so single-output code needs no index), ``(id(op), n)`` for output n of a multi-output
    compute."""
    return id(op) if value_index == 0 else (id(op), value_index)
