"""The ``fused`` backend: the kernel program evaluated with NumPy (no compiler).

It exists so that fusion is tested end to end without numba: every program runs
through simplify + fuse and this plain kernel-program evaluator.  Each loop step is
evaluated by rebuilding the equivalent AST node over the already-materialised arrays and
handing it to the reference interpreter (``KFold`` is ``Fold f z (Generate (shape ++ n)
src)`` and so on), which keeps the evaluator tiny and independent of every code
generator.
"""

from __future__ import annotations

import math

import numpy as np

from accel.ast import nodes as N
from accel.ast.trees import tree_like
from accel.ast.patterns import scalar_binop
from accel.ast.types import ArrayT, int64, shape_type
from accel.backends import interpreter as I
from accel.backends.contract_numpy import matrix_product
from accel.backends.interpreter_values import ArrayValue, from_input, to_output
from accel.errors import OutOfMemoryError, ShapeError
from accel.fusion.fuse import apply
from accel.fusion.kernels import (LOOP_STEPS, KAcond, KAwhile, KBlock, KernelProgram, KFold,
                                  KGenerate, KPermute, KScan, KUse, count_loops,
                                  show_kernel_program, step_label)
from accel.memory import out_of_memory


def _full_shape(shape: N.Exp, n: N.Exp) -> N.Exp:
    s = N.Var(N.fresh("s"), shape.type)
    return N.Let(s, shape, N.Tuple(tuple(N.Prj(k, s) for k in range(len(shape.type.items)))
                                   + (n,)))


BACKEND = "fused backend"  # as errors name it


def _run_block(block: KBlock, aenv: dict) -> tuple:
    for s in block.steps:
        try:
            _step(s, aenv)
        except OutOfMemoryError as e:  # from the interpreter: name the kernel step
            if not isinstance(s, LOOP_STEPS) or e.backend == BACKEND:
                raise
            raise out_of_memory(BACKEND, step_label(s), e.shape, e.elt, e.detail) from None
    return tuple(aenv[v.name] for v in block.result)


def _step(s, aenv: dict):
    if isinstance(s, KGenerate):
        v = I.eval_array(N.Generate(s.shape, s.f), aenv)
        if len(s.outs) == 1:
            aenv[s.outs[0].name] = v
        else:
            for k, o in enumerate(s.outs):
                aenv[o.name] = ArrayValue(v.shape, v.data[k])
    elif isinstance(s, KFold) and (v := matrix_product(s, aenv)) is not None:
        aenv[s.out.name] = v
    elif isinstance(s, (KFold, KScan)):
        aenv[s.out.name] = _reduction(s, aenv)
    elif isinstance(s, KPermute):
        elt = s.value.type
        d = N.Avar(N.fresh("k"), ArrayT(elt, len(s.out_shape.type.items)))
        v = N.Avar(N.fresh("k"), ArrayT(elt, len(s.shape.type.items)))
        aenv[d.name] = I.eval_array(N.Generate(s.out_shape, s.defaults), aenv)
        aenv[v.name] = I.eval_array(N.Generate(s.shape, s.value), aenv)
        aenv[s.out.name] = I.eval_array(N.Permute(s.comb, d, s.target, v), aenv)
        del aenv[d.name], aenv[v.name]
    elif isinstance(s, KUse):
        aenv[s.out.name] = I.eval_array(N.Use(s.array), aenv)
    elif isinstance(s, KAcond):
        c = I.eval_scalar(s.c, aenv)
        res = _run_block(s.t if bool(c) else s.e, dict(aenv))
        for o, r in zip(s.outs, res):
            aenv[o.name] = r
    elif isinstance(s, KAwhile):
        state = tuple(aenv[v.name] for v in s.init)
        while True:
            env = dict(aenv)
            env.update({p.name: x for p, x in zip(s.params, state)})
            (c,) = _run_block(s.cond, env)
            if not bool(c.data):
                break
            env = dict(aenv)
            env.update({p.name: x for p, x in zip(s.params, state)})
            state = _run_block(s.body, env)
        for o, x in zip(s.outs, state):
            aenv[o.name] = x
    else:
        raise TypeError(type(s).__name__)


#: A fold's or scan's source larger than this (elements) is evaluated a block of rows at
#: a time, whose temporaries stay in the caches.  Corpus gradients at their default
#: sizes on this machine, whole -> blocks of 2^18 elements: pairwise RBF 25 -> 3.0 s,
#: k-means 7.9 -> 1.6 s, 1-D convolution 9.1 -> 1.2 s (2^16 and 2^20 were slower).
BLOCK_ELEMENTS = 1 << 18


def _reduction(s, aenv: dict):
    """A ``KFold``/``KScan``: its source materialised (by blocks of rows when large: the
    rows are independent) and folded or scanned along its last dimension."""
    shape = tuple(int(x[0]) for x in I.eval_scalar(s.shape, aenv))
    n = int(I.eval_scalar(s.n, aenv)[0])
    per_row = math.prod(shape[1:]) * n
    if not shape or shape[0] < 2 or shape[0] * per_row <= BLOCK_ELEMENTS:
        return _reduce_rows(s, aenv, s.shape, s.src)
    step = max(1, BLOCK_ELEMENTS // max(per_row, 1))
    p = s.src.params[0]
    parts = []
    for r0 in range(0, shape[0], step):
        r1 = min(shape[0], r0 + step)
        q = N.Var(N.fresh("i"), p.type)
        moved = N.Tuple((N.PrimApp("add", (N.Prj(0, q), N.Const(r0, int64))),)
                        + tuple(N.Prj(k, q) for k in range(1, len(p.type.items))))
        sub = N.Tuple(tuple(N.Const(x, int64) for x in (r1 - r0,) + shape[1:]))
        parts.append(_reduce_rows(s, aenv, sub, N.Lam((q,), N.Let(p, moved, s.src.body))))
    return ArrayValue((shape[0],) + parts[0].shape[1:], _concat([v.data for v in parts]))


def _reduce_rows(s, aenv: dict, shape: N.Exp, src: N.Lam):
    elt = s.src.type
    src_var = N.Avar(N.fresh("k"), ArrayT(elt, len(s.shape.type.items) + 1))
    aenv[src_var.name] = I.eval_array(N.Generate(_full_shape(shape, s.n), src), aenv)
    try:
        if isinstance(s, KFold):
            return I.eval_array(N.Fold(s.f, s.z, src_var), aenv)
        n = aenv[src_var.name].shape[-1]
        if n + (s.z is not None) >= SCAN_DOUBLING_MIN and scalar_binop(s.f, _ONE_UFUNC) is None:
            return scan_by_doubling(s, src_var, aenv)
        return I.eval_array(N.Scan(s.f, s.z, src_var, s.left), aenv)
    finally:
        del aenv[src_var.name]


#: Rows from this length scan by doubling (``scan_by_doubling``) when the combination is
#: not one NumPy ufunc: the interpreter's scan then steps along the rows one element at a
#: time, each step a vectorised evaluation of the combination paying its Python overhead
#: (the reverse scan of a cumulative sum's gradient, over 10^6 pairs: about a minute).
SCAN_DOUBLING_MIN = 64
_ONE_UFUNC = ("add", "mul", "max", "min")  # combinations the interpreter scans at once


def scan_by_doubling(s: KScan, src: N.Avar, aenv: dict):
    """The scan of the materialised source ``src`` (rows along its last dimension) in
    ``ceil(log2 L)`` vectorised steps over whole rows (Hillis and Steele): step ``d``
    combines each element with the one ``d`` before it (``d`` after, scanning right),
    so after it each holds the combination of up to ``2d`` elements.  The combination is
    associative (the language's contract for scans), so the result is the sequential
    scan's up to floating-point reassociation, as the compiled kernels' chunked scans
    are.  The seed, when there is one, is the first element (last, scanning right)."""
    v = aenv[src.name]
    rank = len(v.shape)
    n = v.shape[-1]
    length = n + (s.z is not None)
    shape = N.Tuple(tuple(N.Const(x, int64) for x in v.shape[:-1] + (length,)))
    ix = N.Var(N.fresh("i"), shape_type(rank))

    def at(a: N.Avar, shift: int):
        last = N.Prj(rank - 1, ix)
        if shift:
            last = N.PrimApp("add", (last, N.Const(shift, int64)))
        return N.Index(a, N.Tuple(tuple(N.Prj(k, ix) for k in range(rank - 1)) + (last,)))

    def last_is(op: str, bound: int):
        return N.PrimApp(op, (N.Prj(rank - 1, ix), N.Const(bound, int64)))

    cur = N.Avar(N.fresh("k"), src.type)
    if s.z is None:
        aenv[cur.name] = v
    elif s.left:  # [z] ++ row
        aenv[cur.name] = I.eval_array(N.Generate(shape, N.Lam((ix,), N.Cond(
            last_is("eq", 0), s.z, at(src, -1)))), aenv)
    else:  # row ++ [z]
        aenv[cur.name] = I.eval_array(N.Generate(shape, N.Lam((ix,), N.Cond(
            last_is("eq", n), s.z, at(src, 0)))), aenv)
    try:
        d = 1
        while d < length:
            if s.left:
                step = N.Cond(last_is("ge", d), apply(s.f, (at(cur, -d), at(cur, 0))), at(cur, 0))
            else:
                step = N.Cond(last_is("lt", length - d), apply(s.f, (at(cur, 0), at(cur, d))),
                              at(cur, 0))
            aenv[cur.name] = I.eval_array(N.Generate(shape, N.Lam((ix,), step)), aenv)
            d *= 2
        return aenv[cur.name]
    finally:
        del aenv[cur.name]


def _concat(parts: list):
    if isinstance(parts[0], tuple):  # an array of tuples: one array per component
        return tuple(_concat([p[k] for p in parts]) for k in range(len(parts[0])))
    return np.concatenate(parts, axis=0)


def evaluate(kp: KernelProgram, args) -> object:
    """Run a kernel program on NumPy arrays (same conventions as the interpreter)."""
    args = list(args)
    if len(args) != len(kp.params):
        raise ShapeError(f"program takes {len(kp.params)} arguments, got {len(args)}")
    with I.deep_recursion():
        aenv = {p.name: from_input(x, p.type, f"argument {i} ({p.name})")
                for i, (p, x) in enumerate(zip(kp.params, args))}
        res = _run_block(kp.body, aenv)
        return tree_like(kp.result_type, map(to_output, res))


class Runner:
    def __init__(self, kp: KernelProgram):
        self.kp = kp

    def __call__(self, args):
        return evaluate(self.kp, args)

    def stats(self) -> dict:
        return {"kernels": count_loops(self.kp.body)}

    def show(self) -> str:
        return show_kernel_program(self.kp)


def prepare_kernels(kp: KernelProgram, check_bounds: bool = False) -> Runner:
    """The backend entry point (bounds are always checked by the evaluator)."""
    return Runner(kp)
