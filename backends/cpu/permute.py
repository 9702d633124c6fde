"""Permute steps (``KPermute``: defaults, then every kept source element combined into
its target with ``comb``): the kernels and their launch rule.

Phase ``d`` writes the defaults in parallel; phase ``p`` scatters.  For ``+``/``*``/
``max``/``min`` on a number and a large source the scatter runs in parallel into 2 to
``PERMUTE_CHUNKS`` private buffers (as many as the shapes make worth it:
:func:`permute_chunks`, a function of the shapes only, so results do not depend on the
thread count), merged in chunk order by phase ``m``; a projection (``\new old -> new``,
a scatter in which the last source in row-major order wins) runs in parallel in two
passes (:func:`emit_projection`); any other combination scatters serially.
"""

from __future__ import annotations

import numpy as np

from accel.ast.patterns import projection_side
from accel.ast.types import leaves
from accel.backends.numba.host import shape_of, size_of
from accel.backends.numba.kernelgen import at, fast_comb, out_names, store_at
from accel.backends.numba.trees import flat, rebuild
from accel.fusion.kernels import KPermute

from .emitter import KernelGen, increment
from .plan import Launch, dtypes, num_threads

PERMUTE_CHUNKS = 16  # most private buffers of the parallel scatter
PERMUTE_PAR_MIN_SRC = 16384  # smaller sources scatter serially
PERMUTE_PAR_MAX_PRIV = 1 << 24  # elements of private buffers at most


def emit(s: KPermute, check: bool):
    """Phase ``d``: the defaults (parallel over targets).  Phase ``p``: the scatter of the
    sources ``[lo, hi)``.  For a recognised combination (+, *, max, min on a number) it
    writes into ``priv[c * size + target]``: the host passes the output as ``priv`` with
    ``c == 0`` to scatter serially, or ``mode`` private buffers (initialised to the
    identity) scattered in parallel, chunk c of the sources into buffer c, and phase
    ``m`` then combines, for every target, its chunks' values in chunk order.  Any other
    combination scatters serially into the output."""
    if projection_side(s.comb) is not None:
        return emit_projection(s, check)
    g = KernelGen(check)
    elt = s.out.type.elt
    ts = leaves(elt)
    trank = len(s.out_shape.type.items)
    srank = len(s.shape.type.items)
    tn, nch = g.slot(("size",)), g.slot(("mode",))
    tdims = [g.slot(("out", d)) for d in range(trank)]
    sdims = [g.slot(("src", d)) for d in range(srank)]
    outs = out_names(0, s.out.type)
    fast = fast_comb(s.comb)
    g.work = outs + (["priv"] if fast else [])
    g.begin("d")
    k = g.fresh("k")
    g.loop(k, "range(lo, hi)")
    ix = g.unravel(k, tdims)
    g.store(outs, k, g.apply(s.defaults, (tuple(ix),)))
    g.begin("p", parallel=fast is not None)
    bufs = ["priv"] if fast else outs
    base = g.fresh("pb")
    g.emit(f"{base} = c * {tn}" if fast else f"{base} = 0")
    # the source's multi-index is carried from element to element (divisions by the
    # dimensions, once per element, were most of a scatter's time)
    ix = [g.fresh("i") for _ in sdims]
    for v, a in zip(ix, g.unravel("lo", sdims)):
        g.emit(f"{v} = {a}")
    k = g.fresh("k")
    g.loop(k, "range(lo, hi)")
    body = g.ind
    tix = g.scatter_target(s.target, ix, tdims)
    if check and tix:
        g.ind -= 1
        g.emit("else:")
        g.ind += 1
    lin = g.offset(tix, tdims)
    pos = g.fresh("pos")
    g.emit(f"{pos} = {base} + {lin}")
    v = g.apply(s.value, (tuple(ix),))
    old = rebuild(elt, iter(at(b, pos) for b in bufs))
    new = flat(g.apply(s.comb, (v, old)))
    for b, a in zip(bufs, new):
        g.emit(store_at(b, pos, a))
    g.ind = body
    increment(g, ix, sdims)
    if fast:
        g.begin("m")
        k, c, acc = g.fresh("k"), g.fresh("c"), g.fresh("acc")
        g.loop(k, "range(lo, hi)")
        g.emit(f"{acc} = {at(outs[0], k)}")
        g.loop(c, f"range({nch})")
        g.update([acc], ts, g.apply(s.comb, (at("priv", f"{c} * {tn} + {k}"), acc)))
        g.ind -= 1
        g.emit(store_at(outs[0], k, acc))
    return g, {"fast": fast}


def emit_projection(s: KPermute, check: bool):
    """A permute whose combination is a projection (``\\new old -> new``: the write from
    the last source in row-major order wins; ``\\new old -> old``), in parallel and
    deterministic, O(n) with no sorting or atomics.  Phase ``d``: the defaults.  Phase
    ``p``: chunk ``c`` of the sources records, in ``priv[c * size + target]``
    (initialised to -1), the last source index of the chunk writing each target.
    Phase ``m``, parallel over targets: the last chunk that wrote a target holds its
    winner, whose value is computed there and combined once.  Phase ``s`` instead, when
    one chunk would do: the sources in order, each combined into its target at once
    (the last wins), O(sources) with no winners buffer: a loop writing one row a step
    into a large array updated in place (the loop tape) then costs O(row) a step."""

    g = KernelGen(check)
    elt = s.out.type.elt
    trank = len(s.out_shape.type.items)
    srank = len(s.shape.type.items)
    tn, nch = g.slot(("size",)), g.slot(("mode",))
    tdims = [g.slot(("out", d)) for d in range(trank)]
    sdims = [g.slot(("src", d)) for d in range(srank)]
    outs = out_names(0, s.out.type)
    g.work = outs + ["priv"]
    g.begin("d")
    k = g.fresh("k")
    g.loop(k, "range(lo, hi)")
    g.store(outs, k, g.apply(s.defaults, (tuple(g.unravel(k, tdims)),)))
    g.begin("p")
    base = g.fresh("pb")
    g.emit(f"{base} = c * {tn}")
    k = g.fresh("k")
    g.loop(k, "range(lo, hi)")
    tix = g.scatter_target(s.target, g.unravel(k, sdims), tdims)
    if check and tix:
        g.ind -= 1
        g.emit("else:")
        g.ind += 1
    g.emit(store_at("priv", f"{base} + {g.offset(tix, tdims)}", k))
    g.begin("m")
    k, c, w = g.fresh("k"), g.fresh("c"), g.fresh("w")
    g.loop(k, "range(lo, hi)")
    g.emit(f"{w} = -1")
    g.loop(c, f"range({nch} - 1, -1, -1)")
    g.emit(f"{w} = {at('priv', f'{c} * {tn} + {k}')}")
    g.emit(f"if {w} >= 0:")
    g.emit("    break")
    g.ind -= 1
    g.emit(f"if {w} >= 0:")
    g.ind += 1
    v = g.apply(s.value, (tuple(g.unravel(w, sdims)),))
    old = rebuild(elt, iter(at(b, k) for b in outs))
    g.store(outs, k, g.apply(s.comb, (v, old)))
    g.begin("s", parallel=False)
    k = g.fresh("k")
    g.loop(k, "range(lo, hi)")
    six = tuple(g.unravel(k, sdims))
    tix = g.scatter_target(s.target, list(six), tdims)
    if check and tix:
        g.ind -= 1
        g.emit("else:")
        g.ind += 1
    pos = g.fresh("pos")
    g.emit(f"{pos} = {g.offset(tix, tdims)}")
    v = g.apply(s.value, (six,))
    old = rebuild(elt, iter(at(b, pos) for b in outs))
    g.store(outs, pos, g.apply(s.comb, (v, old)))
    return g, {"fast": "winner"}


def permute_chunks(size: int, ssize: int) -> int:
    """Private buffers of a parallel scatter of ``ssize`` sources into ``size`` targets:
    the most (``PERMUTE_CHUNKS``, 8, 4 or 2) whose initialisation and merge cost at most
    two scatters' worth of elements (a scatter's element costs several times a merge's:
    its index and value are computed), or 0 (serial).  A function of the shapes only,
    so the combination order, and the result, does not depend on the thread count."""
    if ssize < PERMUTE_PAR_MIN_SRC:
        return 0
    nch = PERMUTE_CHUNKS
    while nch >= 2 and (nch * size > 2 * ssize or nch * size > PERMUTE_PAR_MAX_PRIV):
        nch //= 2
    return nch if nch >= 2 else 0


def identity(op: str, dtype) -> object:
    """The identity element of a recognised permute combination on ``dtype``."""
    dtype = np.dtype(dtype)
    if op == "add":
        return dtype.type(-0.0) if dtype.kind == "f" else dtype.type(0)
    if op == "mul":
        return dtype.type(1)
    if dtype.kind == "f":
        return dtype.type(-np.inf if op == "max" else np.inf)
    info = np.iinfo(dtype)
    return info.min if op == "max" else info.max


def launch(s: KPermute, plan, ev) -> Launch:
    """Defaults, then the private-buffer scatter and merge when :func:`permute_chunks`
    says so (recognised combinations only), else a serial scatter into the output."""
    shape = shape_of(ev(s.out_shape), "permute")
    sshape = shape_of(ev(s.shape), "permute")
    size, ssize = size_of(shape), size_of(sshape)
    vals = {("src", d): x for d, x in enumerate(sshape)}
    outs = [(shape, size, dtypes(s.out.type))]
    work = [("o", k) for k in range(sum(len(o[2]) for o in outs))]
    phases = [("d", size, size)]
    nch = 0
    if plan.fast == "winner":  # a projection: the winners' indices, -1 for none
        # the winner does not depend on the chunking: one chunk per thread
        nch = max(1, min(permute_chunks(size, ssize), num_threads()))
        if nch > 1:
            work.append(("f", nch * size, np.dtype(np.int64), -1))
            phases += [("p", ssize, -nch), ("m", size, size * nch)]
        else:  # serially, in source order: no winners buffer (``s``)
            work.append(("f", 1, np.dtype(np.int64), -1))
            phases.append(("s", ssize, 0))
    elif plan.fast is not None:
        nch = permute_chunks(size, ssize)
        priv = nch * size
        if nch:
            dt = dtypes(s.out.type)[0]
            work.append(("f", priv, dt, identity(plan.fast, dt)))
            phases += [("p", ssize, -nch), ("m", size, size * nch)]
        else:
            work.append(work[0])  # scatter straight into the output
            phases.append(("p", ssize, 0))
    else:
        phases.append(("p", ssize, 0))
    vals[("mode",)] = nch
    return Launch(shape, size, outs, work, phases, vals)
