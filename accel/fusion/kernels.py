"""The kernel program: the backend-neutral output of fusion.

A ``KernelProgram`` is a sequence of *steps* over materialised ("manifest")
arrays.  Each loop step is one parallel loop of a known kind; its element
functions are scalar expressions that read manifest arrays only (``Index`` and
``Shape`` of array variables bound earlier, or program parameters):

* ``KGenerate``: ``outs[k][ix] = f(ix)[k]`` for every index of ``shape``
  (several outputs of the same shape share one loop);
* ``KFold``: ``out[ix] = fold f z [src(ix ++ (j,)) | j < n]`` over the innermost
  dimension (``z is None``: fold1), for every ``ix`` of the outer ``shape``;
* ``KScan``: like ``KFold`` but keeping every partial result (``left`` picks the
  direction; with ``z`` the output's inner length is ``n + 1``);
* ``KPermute``: ``out`` starts as ``defaults(ix)`` over ``out_shape``, then for
  every source index ``ix`` of ``shape`` with ``target(ix) = (True, t)``:
  ``out[t] = comb(value(ix), out[t])``.

plus ``KUse`` (a constant), and host-level control flow ``KAcond`` and
``KAwhile`` whose branches/bodies are nested ``KBlock``s.  Shapes are
expressions the host evaluates before the loop.  This is the only thing the
CPU and CUDA backends see; ``evaluate`` in ``accel.backends.fused`` runs it with NumPy.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..ast import nodes as N
from ..ast.types import TupleT
from ..ast.pretty import show as show_node


@dataclass(frozen=True)
class KGenerate:
    outs: tuple  # Avars, one per component of f's result (f returns a Tuple if several)
    shape: N.Exp
    f: N.Lam


@dataclass(frozen=True)
class KFold:
    out: N.Avar
    shape: N.Exp  # outer shape (rank of out)
    n: N.Exp  # inner length (int64)
    f: N.Lam
    z: N.Exp | None
    src: N.Lam  # full index (outer ++ inner) -> element


@dataclass(frozen=True)
class KScan:
    out: N.Avar
    shape: N.Exp
    n: N.Exp
    f: N.Lam
    z: N.Exp | None
    src: N.Lam
    left: bool


@dataclass(frozen=True)
class KPermute:
    out: N.Avar
    out_shape: N.Exp
    defaults: N.Lam  # index of out -> initial element
    shape: N.Exp  # source shape
    target: N.Lam  # source index -> (keep, target index)
    value: N.Lam  # source index -> element
    comb: N.Lam  # (new, old) -> combined
    # the defaults array when it may be updated in place (``inplace``: dead, owned)
    into: N.Avar | None = None


@dataclass(frozen=True, eq=False)
class KUse:
    out: N.Avar
    array: np.ndarray


@dataclass(frozen=True)
class KBlock:
    steps: tuple
    result: tuple  # Avars


@dataclass(frozen=True)
class KAcond:
    outs: tuple
    c: N.Exp
    t: KBlock
    e: KBlock


@dataclass(frozen=True)
class KAwhile:
    outs: tuple
    params: tuple  # Avars bound to the state in cond and body
    cond: KBlock  # result: one rank-0 bool array
    body: KBlock  # result: the next state
    init: tuple  # Avars
    # names of params a permute in the body updates in place (``inplace``): a backend
    # honouring ``KPermute.into`` gives them private copies of their initial values
    owned: tuple = ()


@dataclass(frozen=True)
class KernelProgram:
    params: tuple
    body: KBlock
    result_type: object  # the original program's result type (to rebuild array tuples)


LOOP_STEPS = (KGenerate, KFold, KScan, KPermute)


def step_outs(s) -> tuple:
    return s.outs if hasattr(s, "outs") else (s.out,)


# --------------------------------------------------------------------------- nested blocks
#
# The one walk into host control flow: every pass over a kernel program recurses into
# the blocks of ``KAcond`` (then, else) and ``KAwhile`` (cond, body) through these.


def sub_blocks(s) -> tuple:
    """The blocks nested in step ``s``: ``(t, e)`` of a ``KAcond``, ``(cond, body)`` of a
    ``KAwhile``, none for a loop step or ``KUse``."""
    if isinstance(s, KAcond):
        return (s.t, s.e)
    if isinstance(s, KAwhile):
        return (s.cond, s.body)
    return ()


def map_blocks(s, f, cond=None):
    """Step ``s`` with every nested block ``b`` replaced by ``f(b)`` (in the order of
    ``sub_blocks``), and a ``KAcond``'s condition ``c`` by ``cond(c)`` (first) when
    given; a step without blocks is returned as it is."""
    if isinstance(s, KAcond):
        c = s.c if cond is None else cond(s.c)
        return KAcond(s.outs, c, f(s.t), f(s.e))
    if isinstance(s, KAwhile):
        return replace(s, cond=f(s.cond), body=f(s.body))
    return s


def step_label(s) -> str:
    """A loop step as the kernel program prints its head (``step a12 = generate``)."""
    if isinstance(s, KScan):
        kind = "scanl" if s.left else "scanr"
    else:
        kind = {KGenerate: "generate", KFold: "fold", KPermute: "permute"}[type(s)]
    return f"step {_names(step_outs(s))} = {kind}"


def step_elt(s):
    """The element type of a loop step's array (a tuple of them for several outputs)."""
    elts = tuple(o.type.elt for o in step_outs(s))
    return elts[0] if len(elts) == 1 else TupleT(elts)


def count_kernels(block: KBlock) -> int:
    """Parallel loops in a block (both branches of conditionals, loop bodies once)."""
    n = 0
    for s in block.steps:
        if isinstance(s, LOOP_STEPS):
            n += 2 if isinstance(s, KPermute) else 1
        n += sum(count_kernels(b) for b in sub_blocks(s))
    return n


def count_loops(block: KBlock) -> int:
    """Steps that are parallel loops (a permute counts once)."""
    n = 0
    for s in block.steps:
        if isinstance(s, LOOP_STEPS):
            n += 1
        n += sum(count_loops(b) for b in sub_blocks(s))
    return n


# --------------------------------------------------------------------------- printing


def _names(vs) -> str:
    return ", ".join(v.name for v in vs)


def show_block(block: KBlock, indent: str = "") -> str:
    lines = []
    for s in block.steps:
        lines.append(show_step(s, indent))
    lines.append(f"{indent}return ({_names(block.result)})")
    return "\n".join(lines)


def show_step(s, indent: str = "") -> str:
    i2 = indent + "    "
    if isinstance(s, KGenerate):
        return (f"{indent}{_names(s.outs)} = generate {show_node(s.shape)}\n"
                f"{i2}{show_node(s.f)}")
    if isinstance(s, (KFold, KScan)):
        kind = "fold" if isinstance(s, KFold) else ("scanl" if s.left else "scanr")
        z = "" if s.z is None else f" z={show_node(s.z)}"
        return (f"{indent}{s.out.name} = {kind} over {show_node(s.shape)} inner {show_node(s.n)}"
                f"{z}\n{i2}f   {show_node(s.f)}\n{i2}src {show_node(s.src)}")
    if isinstance(s, KPermute):
        return (f"{indent}{s.out.name} = permute into {show_node(s.out_shape)} from "
                f"{show_node(s.shape)}\n{i2}defaults {show_node(s.defaults)}\n"
                f"{i2}target   {show_node(s.target)}\n{i2}value    {show_node(s.value)}\n"
                f"{i2}comb     {show_node(s.comb)}")
    if isinstance(s, KUse):
        return f"{indent}{s.out.name} = use <{s.array.dtype} {s.array.shape}>"
    if isinstance(s, KAcond):
        return (f"{indent}{_names(s.outs)} = if {show_node(s.c)}\n{indent}  then\n"
                f"{show_block(s.t, i2)}\n{indent}  else\n{show_block(s.e, i2)}")
    if isinstance(s, KAwhile):
        return (f"{indent}{_names(s.outs)} = while ({_names(s.params)}) from "
                f"({_names(s.init)})\n{indent}  cond\n{show_block(s.cond, i2)}\n"
                f"{indent}  body\n{show_block(s.body, i2)}")
    raise TypeError(type(s).__name__)


def show_kernel_program(kp: KernelProgram) -> str:
    head = ", ".join(f"{p.name} :: {p.type!r}" for p in kp.params)
    return f"kernels \\{head} ->\n{show_block(kp.body, '  ')}"
