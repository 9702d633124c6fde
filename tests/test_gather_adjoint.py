"""Adjoints of reads through affine indices are gathers and folds (ad/reverse/gather.py).

The classification (which reads are affine), the shape of the emitted program (no
``Permute`` left for affine reads, the scatter kept for the others) and the values:
reverse == forward == finite differences on hand-written and random programs, on every
backend, and the gradients differentiate again.
"""

import inspect

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import accel as A
from accel.ad.reverse.gather import Affine, plan_read
from accel.ast.nodes import Const
from accel.ast.types import int64
from accel.testing.programs import ProgramDesc
from accel.testing.properties import check_gradient, check_second_order


def aff(*coefs, const=None):
    return Affine(tuple(sorted(coefs)), const)


def test_plans_of_affine_forms():
    c = Const(3, int64)
    # projection (matrix product's a[i, k] over (i, j, k)): j folded
    p = plan_read([aff((0, 1)), aff((2, 1))], 3)
    assert p.solvers == [(0,), (2,)] and p.folded == [1]
    # transpose, shift and reversal: nothing folded
    assert plan_read([aff((1, 1)), aff((0, 1))], 2).folded == []
    assert plan_read([aff((0, 1), const=c)], 1).solvers == [(0,)]
    assert plan_read([aff((0, -1), const=c)], 1).solvers == [(0,)]
    # a convolution x[i + k]: two solvers, chosen at run time
    assert plan_read([aff((0, 1), (1, 1))], 2).solvers == [(0, 1)]
    # a rank-0 read or a read at a fixed index: everything folded
    assert plan_read([], 2).folded == [0, 1]
    assert plan_read([aff(const=c), aff()], 2).folded == [0, 1]
    # a fixed row a[0, i]: one dimension fixed
    assert plan_read([aff(const=Const(0, int64)), aff((0, 1))], 2).solvers == [(), (0,)]


@pytest.mark.parametrize("forms", [
    [aff((0, 2))],                          # stride 2: several domain points per target...
    [aff((0, 1)), aff((0, 1))],             # a diagonal a[i, i]
    [aff((0, 1), (1, 1), (2, 1))],          # three coordinates summed
    [aff((0, 1), (1, 1)), aff((1, 1))],     # a coordinate in two dimensions
    [None],                                 # not affine at all
])
def test_other_reads_keep_the_scatter(forms):
    assert plan_read(forms, 3) is None


def _matmul(a, b):
    n, k = a.shape
    _, m = b.shape
    return A.sum(A.generate((n, m, k), lambda ix: a[ix[0], ix[2]] * b[ix[2], ix[1]]))


def _conv(x, w):
    (n,) = x.shape
    (k,) = w.shape
    return A.sum(A.generate((n - k + 1, k), lambda ix: x[ix[0] + ix[1]] * w[ix[1]]))


def _indirect(a, idx):
    (n,) = idx.shape
    return A.generate((n,), lambda i: a[idx[i]] * a[2 * i])


@pytest.mark.parametrize("f, args, scatters", [
    (_matmul, (np.ones((3, 4)), np.ones((4, 2))), 0),
    (_conv, (np.ones(9), np.ones(3)), 0),
    (_indirect, (np.ones(8), np.array([3, 1, 0])), 2),
])
def test_affine_reads_emit_no_permute(f, args, scatters):
    def loss(*xs):
        return A.sum_all(A.map(lambda v: v * v, f(*xs)))
    text = A.compile(A.gradientA(loss, wrt=0), backend="interpreter")
    text(*args)
    assert text.program(*args).count("Permute") == scatters


def _desc(body: str, inputs, diff=True) -> ProgramDesc:
    src = ("def prog(" + ", ".join(f"a{i}" for i in range(len(inputs))) + "):\n"
           + body + "\n\ndef loss(" + ", ".join(f"a{i}" for i in range(len(inputs)))
           + "):\n    return A.sum_all(prog(" + ", ".join(f"a{i}" for i in range(len(inputs)))
           + "))\n")
    types = tuple(("f64", x.ndim) for x in inputs)
    return ProgramDesc(src, tuple(inputs), types, diff)


# read forms over a (n0, n1) domain, into a0 (rank 1, length n0 + n1 + 4) or
# a1 (rank 2, (n0 + 4, n1 + 4)); every read is in bounds
READS1 = ["i0", "i1 + {c}", "i0 + i1", "i0 + i1 + {c}", "a0.shape[0] - 1 - i0",
          "{c} + i1 - 0", "2 * i0"]
READS2 = ["(i0, i1)", "(i1, i0)", "(i0 + {c}, i1)", "(i0, {c})", "(i1, i0 + {c})", "({c}, 1)",
          "(n0 + 3 - i0, i1 + i0 - i0)"]


@st.composite
def affine_programs(draw):
    n0, n1 = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 16)))
    a0 = rng.standard_normal(n0 + n1 + 4)
    a1 = rng.standard_normal((n0 + 4, n1 + 4))
    terms = []
    for _ in range(draw(st.integers(1, 3))):
        c = draw(st.integers(0, 3))
        if draw(st.booleans()):
            r = draw(st.sampled_from(READS1)).format(c=c)
            terms.append(f"a0[{r}]")
        else:
            r = draw(st.sampled_from(READS2)).format(c=c)
            terms.append(f"a1[{r}]")
    cond = draw(st.booleans())
    expr = " * ".join(f"A.sin({t})" if k % 2 else t for k, t in enumerate(terms))
    if cond:
        expr = f"A.cond(i0 > i1, {expr}, {terms[0]} * 0.5)"
    body = (f"    n0 = a1.shape[0] - 4\n"
            f"    n1 = a1.shape[1] - 4\n"
            f"    def f(ix):\n"
            f"        i0, i1 = ix\n"
            f"        return {expr}\n"
            f"    return A.generate((n0, n1), f)")
    return _desc(body, (a0, a1))


@settings(max_examples=25, deadline=None, derandomize=True)
@given(affine_programs())
def test_random_affine_reads(desc):
    assert check_gradient(desc, backends=["interpreter", "fused"]) == "ok"


@pytest.mark.parametrize("f, shapes", [(_matmul, [(3, 4), (4, 2)]), (_conv, [(9,), (3,)]),
                                       (_conv, [(3,), (2,)])])
def test_gathers_on_cpu_and_second_order(f, shapes):
    rng = np.random.default_rng(1)
    args = tuple(rng.standard_normal(s) for s in shapes)
    names = ", ".join(f"a{i}" for i in range(len(args)))
    desc = _desc(f"    return A.map(lambda v: A.tanh(v), {f.__name__}({names}))", args)
    desc = ProgramDesc(inspect.getsource(f) + "\n\n" + desc.source, desc.inputs,
                       desc.param_types, True)
    assert check_gradient(desc, backends=["cpu"]) == "ok"
    assert check_second_order(desc, backends=["interpreter"]) == "ok"


BACKPERMUTES = {
    "stencil": ("    h, w = a0.shape[0] - 2, a0.shape[1] - 2\n"
                "    def s(di, dj):\n"
                "        return A.backpermute((h, w), lambda ix: (ix[0] + 1 + di, ix[1] + 1 + dj),"
                " a0)\n"
                "    n = A.zip_with(lambda a, b: a + b, s(-1, 0), s(0, 1))\n"
                "    return A.zip_with(lambda a, b: A.sin(a) * b, n, s(0, 0))",
                [(5, 4)]),
    "transpose_reverse": ("    n, m = a0.shape\n"
                          "    t = A.backpermute((m, n), lambda ix: (ix[1], m - 1 - ix[0]), a0)\n"
                          "    return A.map(lambda v: v * v * v, t)", [(3, 5)]),
    "window": ("    (n,) = a0.shape\n"
               "    w = A.backpermute((n - 2, 3), lambda ix: ix[0] + ix[1], a0)\n"
               "    return A.sum(A.map(A.tanh, w))", [(7,)]),
    "broadcast_row": ("    n, m = a0.shape\n"
                      "    b = A.backpermute((4, n, m), lambda ix: (ix[1], ix[2]), a0)\n"
                      "    r = A.backpermute((m,), lambda j: (0, j), a0)\n"
                      "    return A.zip_with(lambda x, y: x * y, A.sum(A.sum(b)), r)",
                      [(3, 3)]),
}


@pytest.mark.parametrize("name", sorted(BACKPERMUTES))
def test_backpermute_adjoints_are_gathers(name):
    body, shapes = BACKPERMUTES[name]
    rng = np.random.default_rng(2)
    desc = _desc(body, tuple(rng.standard_normal(s) for s in shapes))
    assert check_gradient(desc, backends=["fused", "cpu"]) == "ok"
    _, loss = desc.build()
    g = A.compile(A.gradientA(loss, wrt=0), backend="interpreter")
    g(*desc.args())
    assert "Permute" not in g.program(*desc.args())


def test_reads_at_invariant_indices_in_maps_are_sums():
    """A scalar kept in an array and read in a map (logsumexp's shift, a learning rate):
    its adjoint is a sum over the map's domain, not atomic adds into one element."""
    body = ("    m = A.maximum(a0)\n"
            "    s = A.sum(A.map(lambda v: A.exp(v - A.the(m)), a0))\n"
            "    z = A.zip_with(lambda v, w: A.log(A.the(s)) + A.the(m) + v * w * a1[1],\n"
            "                   a0, a0)\n"
            "    return A.map(lambda v: v * a1[0], z)")
    rng = np.random.default_rng(3)
    desc = _desc(body, (rng.standard_normal(6), rng.standard_normal(2)))
    assert check_gradient(desc, backends=["fused", "cpu"]) == "ok"
    _, loss = desc.build()
    g = A.compile(A.gradientA(loss, wrt=(0, 1)), backend="interpreter")
    g(*desc.args())
    assert "Permute" not in g.program(*desc.args())
