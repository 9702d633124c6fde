"""Scan steps (``KScan``: scanl/scanr over the innermost dimension, with a seed ``z`` or
the 1-forms): the kernels and their launch rule.

Parallel over rows, each row scanned sequentially (phase ``s``).  A single long row
(:func:`scan_chunked`) is scanned in three phases: ``t`` (the totals of
``SCAN_CHUNKS`` chunks, in parallel), ``carry`` (the carry into each chunk, in scan
order) and ``s`` (every chunk rescanned from its carry).  Only associativity is
assumed; the chunk count is fixed, so results do not depend on the thread count.
"""

from __future__ import annotations

from accel.backends.numba.host import shape_of, size_of
from accel.backends.numba.kernelgen import at, out_names
from accel.backends.numba.trees import rebuild
from accel.fusion.kernels import KScan

from .emitter import KernelGen, chunk_task, row_counter, work_bufs
from .plan import Launch, dtypes, inner_length

SCAN_CHUNKS = 64  # chunks of a long single-row scan (three phases)
SCAN_CHUNK_MIN_N = 16384


def scan_chunked(s: KScan) -> bool:
    """Whether the scan has the chunked (three-phase) path: only for scans of a single
    row (outer rank 0), where rows give no parallelism (it costs compile time)."""
    return len(s.shape.type.items) == 0


def emit(s: KScan, check: bool):
    """Phase ``s`` scans (row, chunk) tasks, ``mode`` chunks per row.  With one chunk per
    row every task scans a row.  With ``mode`` chunks (single-row scans only) the host
    first runs phase ``t`` (the totals of the chunks, in parallel) and ``carry`` (the
    carry into each chunk, sequentially in scan order); then every chunk is scanned from
    its carry (the first chunk in scan order from z or its first element)."""
    g = KernelGen(check, hoist=True)
    elt, ts, (m, n, nch, kout), dims = g.rows(s, ("mode",), ("kout",))
    outs = out_names(0, s.out.type)
    hz, left = s.z is not None, s.left
    chunked = scan_chunked(s)
    tots, cars = work_bufs("tot", s.out.type), work_bufs("car", s.out.type)
    g.work = outs + (tots + cars if chunked else [])
    # Left scans with z store element j's partial result at j + 1 (the seed at 0); right
    # scans with z store it at j (the seed at n); the 1-forms store it at j.
    off = 1 if (hz and left) else 0
    first_c = "0" if left else f"({nch} - 1)"
    last_c = f"({nch} - 1)" if left else "0"

    def combine(acc, x):  # f in the scan's order: f(acc, x) left, f(x, acc) right
        a = rebuild(elt, iter(acc))
        g.update(acc, ts, g.apply(s.f, (a, x) if left else (x, a)))

    if chunked:
        g.begin("t")
        tk = g.fresh("tk")
        counter = row_counter(g, dims)
        g.loop(tk, "range(lo, hi)")
        r, c, lo, hi, ix = chunk_task(g, tk, n, nch, dims, counter)
        g.emit(f"if {c} != {last_c}:")
        g.ind += 1
        acc = [g.fresh("acc") for _ in ts]
        g.set_vars(acc, ts, g.apply(s.src, (tuple(ix + [lo if left else f"{hi} - 1"]),)))
        j = g.fresh("j")
        g.loop(j, f"range({lo} + 1, {hi})" if left else f"range({hi} - 2, {lo} - 1, -1)")
        combine(acc, g.apply(s.src, (tuple(ix + [j]),)))
        g.ind -= 1
        g.store(tots, tk, tuple(acc))
        g.begin("carry", ranged=False)
        r, c = g.fresh("r"), g.fresh("c")
        g.loop(r, f"range({m})")
        acc = [g.fresh("acc") for _ in ts]
        if hz:
            g.set_vars(acc, ts, g.exp(s.z))
            g.store(cars, f"{r} * {nch} + {first_c}", tuple(acc))
        order = f"range(1, {nch})" if left else f"range({nch} - 2, -1, -1)"
        prev = f"{r} * {nch} + {c} - 1" if left else f"{r} * {nch} + {c} + 1"
        g.loop(c, order)
        tv = rebuild(elt, iter(at(p, prev) for p in tots))
        if hz:
            combine(acc, tv)
        else:
            start = "1" if left else f"{nch} - 2"
            g.emit(f"if {c} == {start}:")
            g.ind += 1
            g.set_vars(acc, ts, tv)
            g.ind -= 1
            g.emit("else:")
            g.ind += 1
            combine(acc, tv)
            g.ind -= 1
        g.store(cars, f"{r} * {nch} + {c}", tuple(acc))
    g.begin("s")
    tk = g.fresh("tk")
    counter = row_counter(g, dims)
    g.loop(tk, "range(lo, hi)")
    r, c, lo, hi, ix = chunk_task(g, tk, n, nch, dims, counter)
    base = g.fresh("base")
    g.emit(f"{base} = {r} * {kout}")
    if not hz:
        g.emit(f"if {lo} < {hi}:")
        g.ind += 1
    acc = [g.fresh("acc") for _ in ts]
    st = g.fresh("st")  # left: first j of the loop; right: the first (highest) j
    if chunked:
        g.emit(f"if {c} == {first_c}:")
        g.ind += 1
    if hz:
        g.set_vars(acc, ts, g.exp(s.z))
        g.store(outs, base if left else f"{base} + {n}", tuple(acc))
        g.emit(f"{st} = {lo}" if left else f"{st} = {hi} - 1")
    else:
        f0 = g.fresh("f")
        g.emit(f"{f0} = {lo}" if left else f"{f0} = {hi} - 1")
        g.set_vars(acc, ts, g.apply(s.src, (tuple(ix + [f0]),)))
        g.store(outs, f"{base} + {f0}", tuple(acc))
        g.emit(f"{st} = {lo} + 1" if left else f"{st} = {hi} - 2")
    if chunked:
        g.ind -= 1
        g.emit("else:")
        g.ind += 1
        g.set_vars(acc, ts, tuple(at(p, tk) for p in cars))
        g.emit(f"{st} = {lo}" if left else f"{st} = {hi} - 1")
        g.ind -= 1
    j = g.fresh("j")
    g.loop(j, f"range({st}, {hi})" if left else f"range({st}, {lo} - 1, -1)")
    combine(acc, g.apply(s.src, (tuple(ix + [j]),)))
    g.store(outs, f"{base} + {j} + {off}", tuple(acc))
    return g, {"chunked": chunked}


def launch(s: KScan, plan, ev) -> Launch:
    """The three-phase path for a single row of at least ``SCAN_CHUNK_MIN_N`` elements
    (when the step has it: ``plan.chunked``), else one task per row."""
    shape = shape_of(ev(s.shape), "scan")
    n = inner_length(ev(s.n), "scan")
    size = size_of(shape)
    kout = n + 1 if s.z is not None else n
    nch = SCAN_CHUNKS if (plan.chunked and n >= SCAN_CHUNK_MIN_N) else 1
    vals = {("n",): n, ("mode",): nch, ("kout",): kout}
    phases = []
    outs = [(shape + (kout,), size * kout, dtypes(s.out.type))]
    work = [("o", k) for k in range(sum(len(o[2]) for o in outs))]
    if plan.chunked:
        k = size * nch if nch > 1 else 0
        for _ in range(2):  # totals, carries
            work += [("b", k, dt) for dt in dtypes(s.out.type)]
    if nch > 1:
        phases += [("t", size * nch, size * n), ("carry", None, 0)]
    phases.append(("s", size * nch, size * n))
    return Launch(shape, size, outs, work, phases, vals)
