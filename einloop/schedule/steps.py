"""Print a schedule's steps as readable Python schedule code (what a user would have written)."""


def _axis(name):
    return name


def step_line(st):
    a = st.args
    s = f"s[{st.stage}]"
    if st.kind == "split":
        arg = f"factor={a['factor']}" if a.get("factor") is not None else f"nparts={a['nparts']}"
        return f"{s}.split({_axis(a['axis'])}, {arg})"
    if st.kind == "fuse":
        return f"{s}.fuse({a['outer']}, {a['inner']})"
    if st.kind == "reorder":
        return f"{s}.reorder({', '.join(a['axes'])})"
    if st.kind in ("vectorize", "parallel", "unroll"):
        return f"{s}.{st.kind}({a['axis']})"
    if st.kind == "compute_at":
        return f"{s}.compute_at(s[{a['parent']}], {a['axis']})"
    if st.kind in ("compute_inline", "compute_root"):
        return f"{s}.{st.kind}()"
    if st.kind == "cache_write":
        return f"s.cache_write({st.stage}, {a.get('scope', 'local')!r})"
    if st.kind == "cache_read":
        return f"s.cache_read({st.stage}, {a.get('scope')!r}, [{', '.join(a['readers'])}])"
    return f"# {st}"


def steps_to_code(schedule):
    outs = ", ".join(t.name for t in schedule.outputs)
    lines = [f"s = create_schedule([{outs}])"]
    lines += [step_line(st) for st in schedule.steps]
    return "\n".join(lines)
