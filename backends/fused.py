"""The ``fused`` backend: the kernel program evaluated with NumPy (no compiler).

It exists so that fusion is tested end to end without numba: every program runs
through simplify + fuse and this plain kernel-program evaluator.  Each loop step is
evaluated by rebuilding the equivalent AST node over the already-materialised arrays and
handing it to the reference interpreter (``KFold`` is ``Fold f z (Generate (shape ++ n)
src)`` and so on), which keeps the evaluator tiny and independent of every code
generator.
"""

from __future__ import annotations

from accel.ast import nodes as N
from accel.ast.trees import tree_like
from accel.ast.types import ArrayT
from accel.backends import interpreter as I
from accel.backends.contract_numpy import matrix_product
from accel.backends.interpreter_values import ArrayValue, from_input, to_output
from accel.errors import OutOfMemoryError, ShapeError
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
        elt = s.src.type
        src_var = N.Avar(N.fresh("k"), ArrayT(elt, len(s.shape.type.items) + 1))
        aenv[src_var.name] = I.eval_array(N.Generate(_full_shape(s.shape, s.n), s.src), aenv)
        if isinstance(s, KFold):
            node = N.Fold(s.f, s.z, src_var)
        else:
            node = N.Scan(s.f, s.z, src_var, s.left)
        aenv[s.out.name] = I.eval_array(node, aenv)
        del aenv[src_var.name]
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
