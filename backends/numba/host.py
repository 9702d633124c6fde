"""The host side shared by the numba backends: arrays at the program's boundary, sizes,
and the control-flow steps.

Both backends keep a manifest array as an ``ArrVal``: its shape and one flat buffer per
scalar leaf (NumPy arrays on the CPU, device arrays on a GPU).  Arguments come in
through :func:`read_input` (checked against the parameter's type; never written to),
results go out through :func:`result_layout` and :func:`nest`, and ``KAcond``/``KAwhile``
steps run through :func:`run_control`, which calls back into the backend for their
blocks.  Imports only ``accel`` (ast, errors, fusion.kernels) and ``hosteval``.
"""

from __future__ import annotations

import math

import numpy as np

from accel.ast.types import ArrayT, ATupleT, TupleT, leaves, scalar_of_dtype
from accel.errors import BackendError, ProgramTypeError, ShapeError
from accel.fusion.kernels import KAcond, KAwhile, KBlock, KUse

from .hosteval import HostEval


class ArrVal:
    """A manifest array: its shape and one flat C-contiguous buffer per scalar leaf."""

    __slots__ = ("leaves", "shape")

    def __init__(self, shape: tuple, leaves_: list):
        self.shape = shape
        self.leaves = leaves_

    def __repr__(self) -> str:
        return f"ArrVal({self.shape}, {[b.dtype for b in self.leaves]})"


def size_of(shape) -> int:
    return math.prod(shape)


def shape_of(v, op: str) -> tuple:
    sh = tuple(int(x) for x in (v if isinstance(v, tuple) else (v,)))
    if any(x < 0 for x in sh):
        raise ShapeError(f"{op}: negative size in shape {sh}")
    return sh


def shown(ix: tuple) -> str:
    return f"({ix[0]},)" if len(ix) == 1 else str(tuple(ix))


# --------------------------------------------------------------------------- boundary


def read_input(v, t, what: str) -> ArrVal:
    """A caller's argument as an ``ArrVal`` of type ``t`` (flat views or canonical copies;
    never written to)."""
    if not isinstance(t, ArrayT):
        raise ProgramTypeError(f"{what}: parameter of non-array type {t!r}")
    if type(v) is np.ndarray and v.ndim == t.rank and not isinstance(t.elt, TupleT):
        flags = v.flags
        if v.dtype == t.elt.dtype and flags.c_contiguous and flags.writeable:
            return ArrVal(v.shape, [v.reshape(-1)])  # the common case, in a microsecond
    bufs, shapes = [], []

    def leaf(x, s, path):
        if isinstance(s, TupleT):
            if not isinstance(x, (tuple, list)) or len(x) != len(s.items):
                raise ShapeError(f"{what}: expected a tuple of {len(s.items)} component arrays "
                                 f"for elements of type {s!r}")
            for i, (xi, si) in enumerate(zip(x, s.items)):
                leaf(xi, si, path + (i,))
            return
        arr = np.asarray(x)
        if arr.dtype != s.dtype:
            try:
                scalar_of_dtype(arr.dtype)
                ok = np.can_cast(arr.dtype, s.dtype, "same_kind")
            except KeyError:
                ok = False
            if not ok:
                raise ProgramTypeError(f"{what}: expected an array of {s!r}, got {arr.dtype}")
        if arr.ndim != t.rank:
            raise ShapeError(f"{what}: expected an array of rank {t.rank}, got shape {arr.shape}")
        shapes.append(arr.shape)
        # Kernels never write to their inputs, so a C-contiguous, writeable array of the
        # right dtype is used in place (read-only arrays would make numba compile another
        # specialisation); results that are inputs are copied on the way out.
        buf = np.ascontiguousarray(arr, dtype=s.dtype)
        if not buf.flags.writeable:
            buf = buf.copy()
        bufs.append(buf.reshape(-1))

    leaf(v, t.elt, ())
    if shapes:
        if any(sh != shapes[0] for sh in shapes):
            raise ShapeError(f"{what}: component arrays of different shapes {shapes}")
        shape = tuple(int(x) for x in shapes[0])
    else:
        shape = (0,) * t.rank  # an array of unit elements carries no data
    return ArrVal(shape, bufs)


def result_layout(t, arrays: list):
    """The nesting of the result type ``t`` with its arrays numbered in order (appended
    to ``arrays``), for :func:`nest`."""
    if isinstance(t, ATupleT):
        return tuple(result_layout(x, arrays) for x in t.items)
    if not isinstance(t, ArrayT):
        raise BackendError(f"a program result of type {t!r} (not an array or tuple of arrays)")
    arrays.append(t)
    return len(arrays) - 1


def nest(layout, arrays: list):
    """The caller's (nested tuple of) arrays (a plain function: a recursive closure
    would be a reference cycle keeping the result buffers referenced until the next
    garbage collection, and so out of the buffer pool)."""
    if isinstance(layout, int):
        return arrays[layout]
    return tuple(nest(x, arrays) for x in layout)


def run_control(s, env: dict, block, copy=None) -> None:
    """Run a ``KAcond`` or ``KAwhile`` step, its blocks by ``block(b, env)`` (the cpu and
    cuda hosts share this walk; the loop condition is one element, read back from the
    device on a GPU).  ``copy(array)``: a private copy of a loop's initial state for the
    parameters the body updates in place (``KAwhile.owned``; hosts that ignore
    ``KPermute.into`` pass None)."""
    if isinstance(s, KAcond):
        b = s.t if bool(HostEval(env)(s.c)) else s.e
        block(b, env)
        vals = [env[r.name] for r in b.result]
        for o, v in zip(s.outs, vals):
            env[o.name] = v
        return
    state = [env[a.name] for a in s.init]
    if copy is not None and s.owned:
        state = [copy(v) if p.name in s.owned else v for p, v in zip(s.params, state)]
    while True:
        for p, v in zip(s.params, state):
            env[p.name] = v
        block(s.cond, env)
        if not bool(env[s.cond.result[0].name].leaves[0][0]):
            break
        block(s.body, env)
        state = [env[r.name] for r in s.body.result]
    for o, v in zip(s.outs, state):
        env[o.name] = v


def collect_uses(block: KBlock, uses: dict, backend: str) -> None:
    """Add an ``ArrVal`` per ``KUse`` constant of ``block`` (and its nested blocks) to
    ``uses`` (keyed by the step's id): a fresh C-contiguous copy in the element's dtype,
    so that the caller's array may change afterwards."""
    for s in block.steps:
        if isinstance(s, KUse):
            t = s.out.type
            if not isinstance(t, ArrayT) or len(leaves(t.elt)) != 1:
                raise BackendError(f"{backend} backend: use of type {t!r} is not supported")
            a = np.array(s.array, dtype=leaves(t.elt)[0].dtype, copy=True, order="C")
            uses[id(s)] = ArrVal(tuple(int(x) for x in a.shape), [a.reshape(-1)])
        elif isinstance(s, KAcond):
            collect_uses(s.t, uses, backend)
            collect_uses(s.e, uses, backend)
        elif isinstance(s, KAwhile):
            collect_uses(s.cond, uses, backend)
            collect_uses(s.body, uses, backend)
