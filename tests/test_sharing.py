"""Sharing recovery and float-in, checked on the traced AST and by running programs.

A value (``Acc`` or ``Exp``) used twice is bound once (one ``Alet``/``Let``), never
duplicated; a binding used only in one branch of a conditional is moved into that
branch, so the untaken branch computes nothing (``A.cond(i < n, a[i], 0.0)`` never
evaluates ``a[i]`` when ``i >= n``).
"""

from __future__ import annotations

import numpy as np
import pytest

import accel as A
from accel.ast import nodes as N
from accel.ast.traverse import children, free_vars, walk
from accel.ast.types import ArrayT, float64, int64
from accel.frontend import trace_program

F1, F2, F0 = ArrayT(float64, 1), ArrayT(float64, 2), ArrayT(float64, 0)


def run(f, *args):
    return A.run(f, *args, backend="interpreter")


def count(prog, cls, pred=lambda n: True) -> int:
    return sum(1 for n in walk(prog) if isinstance(n, cls) and pred(n))


def is_prim(op):
    return lambda n: n.op == op


def outside_branches(root, cls, pred=lambda n: True) -> int:
    """The number of ``cls`` nodes not inside a branch of a ``Cond``/``Acond``."""
    total = 0
    stack = [root]
    while stack:
        x = stack.pop()
        if isinstance(x, cls) and pred(x):
            total += 1
        if isinstance(x, (N.Cond, N.Acond)):
            stack.append(x.c)  # the condition is always evaluated, the branches are not
            continue
        stack.extend(children(x))
    return total


def find(root, cls) -> list:
    return [n for n in walk(root) if isinstance(n, cls)]


# --------------------------------------------------------------------------- sharing: Acc


def test_acc_used_twice_is_one_alet():
    def prog(a):
        b = A.map(lambda v: A.exp(v), a)
        return A.zip_with(lambda p, q: p + q, b, b)
    p = trace_program(prog, (F1,))
    assert count(p, N.Map) == 1
    (zw,) = find(p, N.ZipWith)
    assert isinstance(zw.a, N.Avar) and zw.a == zw.b  # both arguments are the same variable
    maps = [n for n in walk(p) if isinstance(n, N.Alet) and isinstance(n.bound, N.Map)]
    assert len(maps) == 1 and maps[0].var == zw.a
    x = np.linspace(-1, 1, 5)
    np.testing.assert_allclose(run(prog, x), 2 * np.exp(x))


def test_acc_used_by_many_consumers_and_levels():
    def prog(a):
        b = A.map(lambda v: v * 2.0, a)
        s = A.sum_all(b)  # used at the top level and inside two scalar functions
        c = A.map(lambda v: v + A.the(s), b)
        d = A.map(lambda v: v - A.the(s), b)
        return A.zip_with(lambda p, q: p * q, c, d), s
    p = trace_program(prog, (F1,))
    assert count(p, N.Map) == 3
    assert count(p, N.Fold) == 1
    assert count(p, N.Alet, lambda n: isinstance(n.bound, N.Fold)) == 1
    x = np.arange(4.0)
    b = 2 * x
    got, s = run(prog, x)
    np.testing.assert_allclose(s, b.sum())
    np.testing.assert_allclose(got, (b + b.sum()) * (b - b.sum()))


def test_top_level_scalar_used_in_two_functions_is_computed_once():
    def prog(a):
        c = A.the(A.fold1(lambda p, q: A.max(p, q), a))
        n = a.shape[0]
        x = A.map(lambda v: v - c, a)
        y = A.generate((n,), lambda i: c * A.to_float(i))
        return x, y
    p = trace_program(prog, (F1,))
    assert count(p, N.Fold) == 1
    x = np.array([3.0, 1.0, 2.0])
    got = run(prog, x)
    np.testing.assert_allclose(got[0], x - 3.0)
    np.testing.assert_allclose(got[1], 3.0 * np.arange(3))


def test_array_tuple_result_of_acond_and_awhile_is_bound_once():
    def prog(a, s):
        neg = A.map(lambda v: -v, a)
        x, y = A.acond(A.the(s) > 0, (a, neg), (neg, a))
        u, w = A.awhile(lambda st: A.unit(A.the(st[1]) < 3),
                        lambda st: (A.map(lambda v: v + 1.0, st[0]),
                                    A.map(lambda k: k + 1, st[1])),
                        (x, A.unit(0)))
        return A.zip_with(lambda p, q: p + q, x, y), u, w
    p = trace_program(prog, (F1, F0))
    assert count(p, N.Acond) == 1
    assert count(p, N.Awhile) == 1
    x = np.arange(3.0)
    got = run(prog, x, np.float64(1.0))
    np.testing.assert_allclose(got[0], 0 * x)
    np.testing.assert_allclose(got[1], x + 3)
    assert got[2] == 3


# --------------------------------------------------------------------------- sharing: Exp


def test_exp_used_twice_is_one_let():
    def prog(a):
        def f(v):
            y = A.exp(v) * 3.0
            return y + y * y
        return A.map(f, a)
    p = trace_program(prog, (F1,))
    assert count(p, N.PrimApp, is_prim("exp")) == 1
    assert count(p, N.PrimApp, is_prim("mul")) == 2  # exp*3 once, y*y once
    (add,) = [n for n in walk(p) if isinstance(n, N.PrimApp) and n.op == "add"]
    y_var = add.args[0]
    assert isinstance(y_var, N.Var)
    lets = [n for n in walk(p) if isinstance(n, N.Let) and n.var == y_var]
    assert len(lets) == 1  # y is bound once and referenced by name
    x = np.linspace(-1, 1, 4)
    y = np.exp(x) * 3.0
    np.testing.assert_allclose(run(prog, x), y + y * y)


def test_exp_sharing_in_tuples_while_and_index():
    def prog(a):
        def f(i):
            v = a[i]  # one Index, used three times
            s = A.while_(lambda st: st[0] < 10.0, lambda st: (st[0] * 2.0 + v, st[1] + 1),
                         (v + 1.0, 0))
            return s[0] + v, s[1]
        return A.generate(a.shape, f)
    p = trace_program(prog, (F1,))
    assert count(p, N.Index) == 1
    assert count(p, N.While) == 1
    x = np.array([0.5, 2.0, 20.0])
    got = run(prog, x)
    for k, v in enumerate(x):
        s, n = v + 1.0, 0
        while s < 10.0:
            s, n = s * 2.0 + v, n + 1
        assert got[0][k] == s + v and got[1][k] == n


def binder_names(prog) -> list:
    out = []
    for n in walk(prog):
        if isinstance(n, (N.Let, N.Alet)):
            out.append(n.var.name)
        elif isinstance(n, N.Lam):
            out.extend(p.name for p in n.params)
        elif isinstance(n, N.ALam):
            out.append(n.param.name)
    return out


def test_top_level_exp_used_twice_in_a_function_is_one_let():
    def prog(a, s):
        k = A.while_(lambda t: t < 100.0, lambda t: t * 2.0, A.exp(A.the(s)) * 2.0)
        return A.map(lambda v: v * k + k, a), A.map(lambda v: v - k, a)
    p = trace_program(prog, (F1, F0))
    maps = find(p, N.Map)
    assert len(maps) == 2
    # once per function that uses it (never twice inside one function)
    assert [count(m, N.While) for m in maps] == [1, 1]
    assert [count(m, N.PrimApp, is_prim("exp")) for m in maps] == [1, 1]
    x = np.arange(3.0)
    k = np.exp(0.5) * 2.0
    while k < 100.0:
        k *= 2.0
    got = run(prog, x, np.float64(0.5))
    np.testing.assert_allclose(got[0], x * k + k)
    np.testing.assert_allclose(got[1], x - k)


def test_binders_are_unique_when_top_level_scalars_are_copied():
    def prog(a, s):
        k = A.while_(lambda t: t < 10.0, lambda t: t + 1.0, A.the(s))
        c = A.cond(A.the(s) > 0.0, k, -k)
        b = A.map(lambda v: v + c, a)
        d = A.generate(a.shape, lambda i: A.while_(lambda t: t < c, lambda t: t + k, a[i]))
        return A.zip_with(lambda p, q: p * q + c, b, d)
    p = trace_program(prog, (F1, F0))
    names = binder_names(p)
    assert len(names) == len(set(names)), sorted(names)
    x = np.array([1.0, 5.0])
    got = run(prog, x, np.float64(2.0))
    want_d = []
    for v in x:
        while v < 10.0:
            v += 10.0
        want_d.append(v)
    np.testing.assert_allclose(got, (x + 10.0) * np.array(want_d) + 10.0)


def test_top_level_guarded_value_floats_into_the_branch():
    def prog(a):
        last = a[a.shape[0] - 1]  # out of bounds for an empty array
        n = a.shape[0]
        return A.generate((3,), lambda i: A.cond(n > 0, last + A.to_float(i), -1.0))
    p = trace_program(prog, (F1,))
    assert outside_branches(p, N.Index) == 0
    np.testing.assert_allclose(run(prog, np.zeros(0)), [-1.0, -1.0, -1.0])
    np.testing.assert_allclose(run(prog, np.array([1.0, 4.0])), [4.0, 5.0, 6.0])


def test_show_prints_bindings_once():
    def prog(a):
        b = A.map(lambda v: A.sqrt(v), a)
        return A.zip_with(lambda p, q: p * q, b, b)
    text = A.show(prog, np.zeros(3))
    assert text.count("Map") == 1 and text.count("ZipWith") == 1
    assert "sqrt" in text and text.count("sqrt") == 1


# --------------------------------------------------------------------------- float-in: Exp


def test_cond_guarded_index_is_moved_into_the_branch():
    def prog(a):
        n = a.shape[0]
        return A.generate((n + 3,), lambda i: A.cond(i < n, a[i] * 2.0, 0.0) + 1.0)
    p = trace_program(prog, (F1,))
    assert count(p, N.Index) == 1
    assert outside_branches(p, N.Index) == 0
    (c,) = find(p, N.Cond)
    assert count(c.t, N.Index) == 1 and count(c.e, N.Index) == 0
    assert count(p, N.PrimApp, is_prim("mul")) == outside_branches(
        c.t, N.PrimApp, is_prim("mul")) == 1
    x = np.array([1.0, 2.0])
    # the interpreter bounds-checks every evaluated index: i = 2, 3, 4 would fail
    np.testing.assert_allclose(run(prog, x), [3.0, 5.0, 1.0, 1.0, 1.0])


@pytest.mark.parametrize("n", [0, 1, 4])
def test_guarded_index_never_evaluated_out_of_bounds(n):
    x = np.arange(float(n))

    def prog(a):
        return A.generate((n + 5,), lambda i: A.cond(i < n, a[i], 0.0))

    def prog_else(a):  # guard in the else branch, index with a shared offset
        def f(i):
            j = i - 2
            return A.cond(j < 0, -1.0, A.cond(j < n, a[j] + a[j], 0.0))
        return A.generate((n + 5,), f)
    np.testing.assert_allclose(run(prog, x), np.concatenate([x, np.zeros(5)]))
    want = np.concatenate([[-1.0, -1.0], 2 * x, np.zeros(3)])
    np.testing.assert_allclose(run(prog_else, x), want)
    p = trace_program(prog_else, (F1,))
    assert outside_branches(p, N.Index) == 0


def test_nested_guards_rank2():
    x = np.arange(6.0).reshape(2, 3)

    def prog(a):
        n, m = a.shape

        def f(ix):
            i, j = ix
            return A.cond(i < n, A.cond(j < m, a[i, j], -1.0), -2.0)
        return A.generate((n + 1, m + 2), f)
    want = np.full((3, 5), -2.0)
    want[:2, :] = -1.0
    want[:2, :3] = x
    np.testing.assert_allclose(run(prog, x), want)
    p = trace_program(prog, (F2,))
    assert outside_branches(p, N.Index) == 0


def test_binding_used_by_both_branches_is_copied_condition_stays_outside():
    def prog(a):
        def f(i):
            y = a[i] * 3.0  # used by both branches only
            c = A.sin(a[0]) > 0.0  # used by the condition only
            return A.cond(c, y + 1.0, y - 1.0)
        return A.generate(a.shape, f)
    p = trace_program(prog, (F1,))
    (c,) = find(p, N.Cond)
    assert outside_branches(p, N.PrimApp, is_prim("sin")) == 1
    assert count(c.t, N.PrimApp, is_prim("mul")) == 1
    assert count(c.e, N.PrimApp, is_prim("mul")) == 1
    assert outside_branches(p, N.PrimApp, is_prim("mul")) == 0
    x = np.array([1.0, -2.0, 3.0])
    np.testing.assert_allclose(run(prog, x), x * 3.0 + 1.0)


def test_binding_used_after_the_cond_is_not_moved():
    def prog(a):
        def f(v):
            y = v * 3.0
            return A.cond(v > 0.0, y, 0.0) + y
        return A.map(f, a)
    p = trace_program(prog, (F1,))
    assert outside_branches(p, N.PrimApp, is_prim("mul")) == 1
    x = np.array([1.0, -2.0])
    np.testing.assert_allclose(run(prog, x), [6.0, -6.0])


def test_while_only_runs_in_the_branch_that_needs_it():
    def prog(a):
        def f(v):
            loop = A.while_(lambda s: s < 100.0, lambda s: s * 2.0, v)  # diverges for v <= 0
            return A.cond(v > 0.0, loop, -1.0)
        return A.map(f, a)
    p = trace_program(prog, (F1,))
    assert outside_branches(p, N.While) == 0
    np.testing.assert_allclose(run(prog, np.array([1.0, -1.0, 0.0, 30.0])),
                               [128.0, -1.0, -1.0, 120.0])


def test_unused_bindings_are_dropped():
    def prog(a):
        A.map(lambda v: v * 7.0, a)  # dead
        A.generate((3,), lambda i: a[i + 1000])  # dead, and would be out of bounds

        def f(v):
            _ = A.exp(v)  # dead
            return v + 1.0
        return A.map(f, a)
    p = trace_program(prog, (F1,))
    assert count(p, N.Map) == 1 and count(p, N.Generate) == 0
    assert count(p, N.PrimApp, is_prim("exp")) == 0
    np.testing.assert_allclose(run(prog, np.arange(2.0)), [1.0, 2.0])


# --------------------------------------------------------------------------- float-in: Acc


def test_acond_branch_bindings_are_moved_into_the_branch():
    def prog(a, s):
        t = A.sum_all(a)
        m = A.map(lambda v: v + A.the(t), a)
        bad = A.generate((2,), lambda i: a[i + 100])
        return A.acond(A.the(s) > 0.0, m, bad)
    p = trace_program(prog, (F1, F0))
    (ac,) = find(p, N.Acond)
    for cls in (N.Fold, N.Map, N.Generate):
        assert outside_branches(p, cls) == 0, cls
    assert count(ac.t, N.Fold) == 1 and count(ac.t, N.Map) == 1
    assert count(ac.e, N.Generate) == 1
    x = np.arange(3.0)
    np.testing.assert_allclose(run(prog, x, np.float64(1.0)), x + 3.0)
    with pytest.raises(A.OutOfBoundsError):
        run(prog, x, np.float64(-1.0))


def test_acond_condition_inputs_stay_outside_and_free_vars_are_closed():
    def prog(a):
        s = A.sum_all(a)
        big = A.map(lambda v: v * 10.0, a)
        return A.acond(A.the(s) > 1.0, big, A.map(lambda v: v - A.the(s), a))
    p = trace_program(prog, (F1,))
    assert outside_branches(p, N.Fold) == 1
    assert outside_branches(p, N.Map) == 0
    assert free_vars(p) == frozenset()
    np.testing.assert_allclose(run(prog, np.array([1.0, 2.0])), [10.0, 20.0])
    np.testing.assert_allclose(run(prog, np.array([0.25, 0.5])), [-0.5, -0.25])


def test_index_types_of_generate_are_int64():
    p = trace_program(lambda a: A.generate((2, 3), lambda ix: ix[0] * 3 + ix[1]), (F1,))
    (g,) = find(p, N.Generate)
    assert g.type == ArrayT(int64, 2)
