"""The cpu host's replay of the plans of steps inside loops (``backends/cpu/runtime.py``:
``_block``, ``_fast``, ``_loop``) and the dead loop state pass (``fusion/deadstate.py``).

A step inside an ``awhile`` body replays its last plan while its guards hold: the
arrays its host expressions read keep their shapes and the elements read keep their
values.  Each test runs a loop whose plans must *not* be replayed blindly (a state that
changes shape, a size read from an element of the state, nested loops, a conditional
choosing arrays of other sizes) and compares the cpu backend with the interpreter,
for several calls of one compiled program (plans are kept across calls too)."""

from __future__ import annotations

import numpy as np
import pytest

import accel as A
from compiled_helpers import runner_of as _runner, same_as_interpreter as _same
from accel.errors import OutOfBoundsError
from accel.fusion.deadstate import drop_dead_state
from accel.ast.types import leaves
from accel.fusion.kernels import KAwhile, KGenerate


def _shrinking(x):
    """Each iteration maps s of length n to length n - 1 while size s > 2."""
    def body(s):
        return A.generate((A.size(s) - 1,), lambda i: s[i] * A.sin(s[i + 1]) + 1.0)
    return A.awhile(lambda s: A.unit(A.size(s) > 2), body, x)


def test_state_changing_shape_every_iteration():
    prog = A.compile(_shrinking, backend="cpu")
    for n in (7, 7, 3, 12, 2, 7):
        _same(prog, _shrinking, np.linspace(0.1, 1.0, n))


def test_gradient_of_a_state_changing_shape():
    """Its counting loop sums the states' sizes: it carries the state's dimensions
    (rank-0 arrays), never its elements (``fusion/deadstate.py``)."""
    def f(x):
        return A.sum(A.map(lambda v: v * v, _shrinking(x)))
    g = A.gradientA(f)
    prog = A.compile(g, backend="cpu")
    for n in (6, 6, 9, 2):
        _same(prog, g, np.linspace(0.2, 0.9, n))
    counting = next(_loops(_runner(prog).kp.body))
    assert all(p.type.rank == 0 for p in counting.params), counting.params


def _read_sizes(x):
    """The body's sizes are elements of the state: ``n = s[0]`` sets the length of a
    generate (a shape) and of a sum (a fold's inner length), and grows each step."""
    def body(st):
        s, acc = st
        n = A.to_int(s[0])
        ys = A.generate((n,), lambda i: A.to_float(i) * s[1])
        grown = A.generate((A.size(s),), lambda i: A.cond(i == 0, s[0] + 1.0, s[i] * 0.5))
        return grown, A.unit(A.the(acc) + A.the(A.sum_all(ys)) + A.to_float(A.size(ys)))
    return A.awhile(lambda st: A.unit(st[0][0] < 9.0), body, (x, A.unit(0.0)))


def test_sizes_read_from_elements_of_the_state():
    prog = A.compile(_read_sizes, backend="cpu")
    for first in (1.0, 1.0, 4.0, 8.0, 2.0):
        _same(prog, _read_sizes, np.array([first, 0.5, 0.25]))
    # the generate's plan depends on s[0]: planned again at each of its new values ...
    runner = _runner(prog)
    before = runner.stats()["planned_steps"]
    _same(prog, _read_sizes, np.array([0.5, 3.0, 1.0]))
    assert runner.stats()["planned_steps"] - before >= 8
    # ... and a value seen before replays its plan (``Runner._variant``)
    before = runner.stats()["planned_steps"]
    _same(prog, _read_sizes, np.array([0.5, 2.0, 7.0]))
    assert runner.stats()["planned_steps"] == before


def _sizes_from_an_outer_array(m, x):
    """Iteration ``t`` sums a generate of length ``m[t]``: its plan reads an element of
    an array bound outside the loop, at an offset that changes every iteration."""
    def body(st):
        t, acc = st
        ys = A.generate((A.to_int(m[A.the(t)]),), lambda i: A.to_float(i) * x[0] + 1.0)
        return A.unit(A.the(t) + 1), A.unit(A.the(acc) + A.the(A.sum_all(ys)))
    return A.awhile(lambda st: A.unit(A.the(st[0]) < m.shape[0]), body,
                    (A.unit(0), A.unit(0.0)))[1]


def test_replayed_iterations_check_the_outer_elements_their_plans_read():
    """Learned iterations are replayed (the second call) but not when an element of the
    outer array they read differs (third call, same shapes): the interpreter's results."""
    prog = A.compile(_sizes_from_an_outer_array, backend="cpu")
    x = np.array([0.5, 2.0])
    m = np.array([1.0, 2.0, 3.0, 4.0, 2.0])
    _same(prog, _sizes_from_an_outer_array, m, x)
    runner = _runner(prog)
    before = runner.stats()["replayed_iterations"]
    _same(prog, _sizes_from_an_outer_array, m, x * 3.0)
    assert runner.stats()["replayed_iterations"] - before >= 4
    for changed in ([1.0, 2.0, 7.0, 4.0, 2.0], [1.0, 2.0, 3.0, 4.0, 0.0], list(m)):
        _same(prog, _sizes_from_an_outer_array, np.array(changed), x)


def test_plans_of_a_counter_read_on_the_host_are_kept_across_calls():
    """A matrix-vector product with row ``t`` of ``xs`` (its offset is computed on the
    host) and a tape read at ``t``: the first call plans those steps at every iteration,
    a second call with arguments of the same shapes plans nothing; other values of the
    arguments still give the interpreter's results."""
    def f(w, xs, h0):
        def body(st):
            t, h = st
            xt = A.slice(xs, (A.the(t), A.All))
            pre = A.sum(A.zip_with(lambda a, b: a * b, w,
                                   A.replicate((A.size(h), A.All), xt)))
            return (A.unit(A.the(t) + 1), A.zip_with(lambda a, b: A.tanh(a + b), h, pre))
        return A.sum(A.map(lambda v: v * v, A.awhile(
            lambda st: A.unit(A.the(st[0]) < xs.shape[0]), body, (A.unit(0), h0))[1]))
    g = A.gradientA(f, wrt=(0, 2))
    prog = A.compile(g, backend="cpu")
    rng = np.random.default_rng(5)
    w, xs, h0 = rng.standard_normal((6, 4)), rng.standard_normal((12, 4)), rng.standard_normal(6)
    _same(prog, g, w, xs, h0)
    runner = _runner(prog)
    first = runner.stats()["planned_steps"]
    assert first >= 12  # a plan per iteration for the steps reading t
    _same(prog, g, w * 0.5, xs + 1.0, h0)
    assert runner.stats()["planned_steps"] == first
    _same(prog, g, w, rng.standard_normal((7, 4)), h0)  # fewer steps: new shapes


def test_fixed_shapes_plan_each_step_once():
    """A loop of fixed shapes plans its steps in the first iteration only, and a later
    call with arguments of the same shapes plans nothing."""
    def f(x):
        def body(st):
            t, h = st
            return (A.unit(A.the(t) + 1), A.map(lambda v: A.tanh(v) + 0.5, h))
        return A.awhile(lambda st: A.unit(A.the(st[0]) < 50), body, (A.unit(0), x))[1]
    prog = A.compile(f, backend="cpu")
    x = np.linspace(-1.0, 1.0, 5000)
    _same(prog, f, x)
    runner = _runner(prog)
    assert runner.stats()["planned_steps"] < 10
    before = runner.stats()["planned_steps"]
    _same(prog, f, x + 1.0)
    assert runner.stats()["planned_steps"] == before


def _nested(x):
    """An inner loop whose trip count and state size depend on the outer counter."""
    def outer_body(st):
        k, y = st

        def inner_body(ist):
            j, z = ist
            return (A.unit(A.the(j) + 1),
                    A.generate((A.size(z) + 1,),
                               lambda i: A.cond(i < A.size(z), z[A.min(i, A.size(z) - 1)] * 0.9,
                                                A.to_float(A.the(j)))))
        _, z = A.awhile(lambda ist: A.unit(A.the(ist[0]) < A.the(k)), inner_body,
                        (A.unit(0), y))
        total = A.sum_all(z)
        return (A.unit(A.the(k) + 1),
                A.generate((A.size(y),), lambda i: A.the(total) * 0.01 + y[i]))
    return A.awhile(lambda st: A.unit(A.the(st[0]) < 5), outer_body, (A.unit(0), x))[1]


def test_nested_loops():
    prog = A.compile(_nested, backend="cpu")
    for n in (4, 4, 6):
        _same(prog, _nested, np.linspace(0.0, 1.0, n))


def _cond_in_loop(x):
    """An ``acond`` in the body picks arrays of other sizes on odd iterations."""
    def body(st):
        t, s = st
        odd = A.the(t) % 2 == 1
        longer = A.generate((A.size(s) + 2,), lambda i: s[A.min(i, A.size(s) - 1)] + 1.0)
        shorter = A.generate((A.size(s) - 1,), lambda i: s[i] * 2.0)
        return (A.unit(A.the(t) + 1), A.acond(odd, shorter, longer))
    return A.awhile(lambda st: A.unit(A.the(st[0]) < 7), body, (A.unit(0), x))[1]


def test_conditional_in_a_loop():
    prog = A.compile(_cond_in_loop, backend="cpu")
    for n in (3, 3, 10):
        _same(prog, _cond_in_loop, np.linspace(1.0, 2.0, n))


def _swap(x):
    """The body returns its parameter as another component: a buffer of an earlier
    iteration stays in the state (it must not go back to the buffer pool)."""
    def body(st):
        t, a, b = st
        return (A.unit(A.the(t) + 1), b, A.map(lambda v: v + 1.0, a))
    init = (A.unit(0), x, A.map(lambda v: v * 2.0, x))
    return A.awhile(lambda st: A.unit(A.the(st[0]) < 9), body, init)


def test_state_passed_through_keeps_its_buffer():
    prog = A.compile(_swap, backend="cpu")
    x = np.linspace(0.0, 1.0, 10_000)  # large enough for pooled buffers
    for _ in range(3):
        _same(prog, _swap, x)
    kept = prog(x)
    again = prog(x + 5.0)  # the first call's results are not overwritten
    _same(prog, _swap, x)
    np.testing.assert_allclose(kept[1], A.run(_swap, x, backend="interpreter")[1])
    assert not np.allclose(again[1], kept[1])


def test_bounds_error_inside_a_replayed_loop_body():
    def f(x, k):
        def body(st):
            t, s = st
            return (A.unit(A.the(t) + 1),
                    A.generate((A.size(s),), lambda i: s[A.min(i + A.the(t) // A.to_int(k[0]),
                                                               A.size(s) + 3)]))
        return A.awhile(lambda st: A.unit(A.the(st[0]) < 8), body, (A.unit(0), x))[1]
    prog = A.compile(f, backend="cpu", check_bounds=True)
    x = np.arange(6.0)
    _same(prog, f, x, np.array([100.0]))
    with pytest.raises(OutOfBoundsError):
        prog(x, np.array([1.0]))
    _same(prog, f, x, np.array([100.0]))


# --------------------------------------------------------------------------- dead state


def _with_dead(x, w):
    """State (t, h, d, e): d is never read; e only feeds d; h is the result."""
    def body(st):
        t, h, d, e = st
        return (A.unit(A.the(t) + 1), A.map(lambda v: v * 0.5 + 1.0, h),
                A.zip_with(lambda a, b: a * b + A.sin(a), d, e), A.map(lambda v: v * 2.0, e))
    out = A.awhile(lambda st: A.unit(A.the(st[0]) < 4), body, (A.unit(0), x, w, w))
    return out[1]


def _loops(block):
    for s in block.steps:
        if isinstance(s, KAwhile):
            yield s
            yield from _loops(s.body)


@pytest.mark.parametrize("backend", ["interpreter", "fused", "cpu"])
def test_dead_state_loop_results(backend):
    x, w = np.linspace(0.0, 1.0, 5), np.linspace(1.0, 2.0, 5)
    prog = A.compile(_with_dead, backend=backend)
    got = prog(x, w)
    np.testing.assert_allclose(got, A.run(_with_dead, x, w, backend="interpreter"))
    if backend != "cpu":  # (the cpu case inspects the program it ran, compiled once)
        return
    (loop,) = _loops(_runner(prog).kp.body)
    assert len(loop.params) == 2  # t and h
    assert drop_dead_state(_runner(prog).kp).body == _runner(prog).kp.body


def test_dead_state_keeps_what_a_live_component_reads():
    def f(x, w):
        def body(st):
            t, h, d = st
            return (A.unit(A.the(t) + 1), A.zip_with(lambda a, b: a + b, h, d),
                    A.map(lambda v: v * 0.5, d))
        return A.awhile(lambda st: A.unit(A.the(st[0]) < 3), body, (A.unit(0), x, w))[1]
    x, w = np.linspace(0.0, 1.0, 5), np.linspace(1.0, 2.0, 5)
    prog = A.compile(f, backend="cpu")
    np.testing.assert_allclose(prog(x, w), A.run(f, x, w, backend="interpreter"))
    (loop,) = _loops(_runner(prog).kp.body)
    assert len(loop.params) == 3


def test_rnn_gradient_counts_without_the_hidden_state():
    """Reverse mode's counting loop of an RNN keeps only the counters."""
    T, m = 6, 50

    def loss(W, h0, xs):
        def body(st):
            t, h = st
            return (A.unit(A.the(t) + 1),
                    A.generate((A.size(h),), lambda i: A.tanh(W[i] * h[i] + xs[A.the(t), i])))
        h = A.awhile(lambda st: A.unit(A.the(st[0]) < T), body, (A.unit(0), h0))[1]
        return A.sum(A.map(lambda v: v * v, h))
    rng = np.random.default_rng(1)
    args = (rng.normal(size=m), rng.normal(size=m), rng.normal(size=(T, m)))
    g = A.gradientA(loss, wrt=(0, 1))
    prog = A.compile(g, backend="cpu")
    _same(prog, g, *args)
    counting = next(_loops(_runner(prog).kp.body))
    assert all(p.type.rank == 0 for p in counting.params)


def test_counting_a_matrix_rnn_whose_length_is_a_min_of_sizes():
    """``h <- tanh (W h + x_t)``: the next state's length is ``min`` of ``W``'s and
    ``h0``'s, not provably ``h``'s own, so reverse mode counts sizes; the count runs
    without the matrix-vector product (its shape term reads only sizes)."""
    T, m = 5, 7

    def loss(W, h0, xs):
        def body(st):
            t, h = st
            wh = A.sum(A.zip_with(lambda a, b: a * b, W, A.replicate((m, A.All), h)))
            xt = A.slice(xs, (A.the(t), A.All))
            return (A.unit(A.the(t) + 1), A.zip_with(lambda a, b: A.tanh(a + b), wh, xt))
        h = A.awhile(lambda st: A.unit(A.the(st[0]) < T), body, (A.unit(0), h0))[1]
        return A.sum(A.map(lambda v: v * v, h))
    rng = np.random.default_rng(4)
    args = (rng.normal(size=(m, m)) / 3, rng.normal(size=m), rng.normal(size=(T, m)))
    g = A.gradientA(loss, wrt=(0, 1))
    want = A.run(g, *args, backend="interpreter")
    prog = A.compile(g, backend="cpu")  # compiled once: checked, then inspected
    for got in (A.run(g, *args, backend="fused"), prog(*args)):
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
    counting = next(_loops(_runner(prog).kp.body))
    assert all(p.type.rank == 0 for p in counting.params), counting.params


def _sized(x, k):
    """A loop whose condition tests the state's size and whose result is its counter:
    the state's elements are never needed; with ``by_value`` its next length reads an
    element the body computes (then the elements are needed after all)."""
    def body(st):
        t, s = st
        n = A.size(s) - A.to_int(k[0])
        return (A.unit(A.the(t) + 1), A.generate((n,), lambda i: s[i] * A.sin(s[i + 1])))
    return A.awhile(lambda st: A.unit(A.size(st[1]) > 3), body, (A.unit(0), x))[0]


def _sized_by_value(x, k):
    def body(st):
        t, s = st
        m = A.the(A.sum(A.map(lambda v: A.to_int(v * 0.0), s)))  # 0, read from elements
        n = A.size(s) - A.to_int(k[0]) + m
        return (A.unit(A.the(t) + 1), A.generate((n,), lambda i: s[i] * A.sin(s[i + 1])))
    return A.awhile(lambda st: A.unit(A.size(st[1]) > 3), body, (A.unit(0), x))[0]


@pytest.mark.parametrize("f, ranks", [(_sized, [0, 0]), (_sized_by_value, [0, 1])])
@pytest.mark.parametrize("backend", ["fused", "cpu"])
def test_a_state_read_only_for_its_size_is_carried_as_its_dimensions(f, ranks, backend):
    """Kept whole when its next shape reads an element the body computes."""
    prog = A.compile(f, backend=backend)
    for n, k in ((12, 1.0), (12, 4.0), (3, 1.0), (5, 2.0)):
        x, k = np.linspace(0.1, 1.0, n), np.array([k])
        np.testing.assert_array_equal(prog(x, k), A.run(f, x, k, backend="interpreter"))
    if backend != "cpu":  # (the cpu case inspects the program it ran, compiled once)
        return
    (loop,) = _loops(_runner(prog).kp.body)
    assert sorted(p.type.rank for p in loop.params) == ranks


# --------------------------------------------------------------------------- pruned leaves


def _newton(T):
    def loss(a, b, x0):
        def body(st):
            t, x = st
            def step(i):
                return x[i] - (x[i] * x[i] * x[i] + a[i] * x[i] - b[i]) / (3.0 * x[i] * x[i] + a[i])
            return (A.unit(A.the(t) + 1), A.generate((A.size(x),), step))
        x = A.awhile(lambda st: A.unit(A.the(st[0]) < T), body, (A.unit(0), x0))[1]
        return A.sum(x)
    return loss


def _generates(block):
    for s in block.steps:
        if isinstance(s, KAwhile):
            yield from _generates(s.cond)
            yield from _generates(s.body)
        elif isinstance(s, KGenerate):
            yield s


@pytest.mark.parametrize("backend", ["interpreter", "fused", "cpu"])
def test_reverse_loop_bodies_store_no_constant_or_index_leaves(backend):
    """The reverse body of a Newton step stores its adjoint contributions, not the
    ``(value, target, True)`` triples (``fusion/leafprune.py``); the gradient is the
    interpreter's."""
    g = A.gradientA(_newton(5), wrt=(0, 1, 2))
    rng = np.random.default_rng(2)
    args = (rng.uniform(1, 2, size=40), rng.normal(size=40), rng.normal(size=40))
    prog = A.compile(g, backend=backend)  # compiled once: checked, then inspected (cpu)
    got, want = prog(*args), A.run(g, *args, backend="interpreter")
    for x, y in zip(got, want):
        np.testing.assert_allclose(x, y, rtol=1e-9, atol=1e-12)  # (fma on cpu)
    if backend == "cpu":
        for s in _generates(_runner(prog).kp.body):
            for o in s.outs:
                assert len(leaves(o.type.elt)) <= 9, s


def test_pruned_array_read_at_other_indices_and_shape():
    """A materialised tuple array with a constant leaf and an index leaf read at shifted
    indices, through ``shape`` and inside a loop body."""
    def f(x):
        pairs = A.generate((A.size(x),), lambda i: (A.sin(x[i]) * 2.0, i[0], 7.5, A.cos(x[i])))

        def body(st):
            t, acc = st
            n = A.size(pairs)
            k = A.the(t)
            return (A.unit(k + 1), A.generate((A.size(acc),), lambda i: acc[i] + pairs[
                (i[0] + k) % n][0] * A.to_float(pairs[(i[0] + 1) % n][1]) + pairs[i][2]
                + pairs[i][3]))
        out = A.awhile(lambda st: A.unit(A.the(st[0]) < 3), body, (A.unit(0), x))[1]
        return out, A.map(lambda p: p[0] + p[3], pairs)
    prog = A.compile(f, backend="cpu", check_bounds=True)
    for n in (5, 8):
        _same(prog, f, np.linspace(0.0, 1.0, n))
    assert not any(len(leaves(o.type.elt)) == 4
                   for s in _generates(_runner(prog).kp.body) for o in s.outs)
    np.testing.assert_allclose(A.run(f, np.linspace(0.0, 1.0, 6), backend="fused")[0],
                               A.run(f, np.linspace(0.0, 1.0, 6), backend="interpreter")[0])


def test_constant_and_index_outputs_of_a_generate_are_not_stored():
    """A generate of several outputs, one a constant and one an index component, each
    read at shifted indices and through ``shape``: those two are values, not arrays
    (``leafprune._plan_outs``); as in the stencil's gradient written with ``generate``,
    whose all-``True`` mask was stored beside its adjoint and read five times."""
    from accel.ast import nodes as N
    from accel.ast.types import ArrayT, bool_, float64, int64, shape_type
    from accel.backends import fused
    from accel.backends.cpu import prepare_kernels
    from accel.fusion.kernels import KBlock, KernelProgram
    from accel.fusion.leafprune import prune_leaves
    x = N.Avar(N.fresh("x"), ArrayT(float64, 1))
    v, m, k = (N.Avar(N.fresh("a"), ArrayT(t, 1)) for t in (float64, bool_, int64))
    i = N.Var(N.fresh("i"), shape_type(1))
    gen = KGenerate((v, m, k), N.Shape(x), N.Lam((i,), N.Tuple((
        N.PrimApp("sin", (N.Index(x, i),)), N.Const(True, bool_), N.Prj(0, i)))))
    j = N.Var(N.fresh("j"), shape_type(1))

    def at(a, shift):  # a[(j + shift) mod n]
        n = N.Prj(0, N.Shape(a))
        return N.Index(a, N.Tuple((N.PrimApp("mod", (N.PrimApp("add", (
            N.Prj(0, j), N.Const(shift, int64))), n)),)))
    read = N.Lam((j,), N.Cond(at(m, 1), N.PrimApp("add", (
        at(v, 2), N.PrimApp("to_float64", (at(k, 3),)))), N.Const(0.0, float64)))
    out = N.Avar(N.fresh("o"), ArrayT(float64, 1))
    use = KGenerate((out,), N.Shape(k), read)
    kp = KernelProgram((x,), KBlock((gen, use), (out,)), out.type)
    pruned = prune_leaves(kp)
    assert [len(s.outs) for s in pruned.body.steps] == [1, 1]
    xs = np.linspace(0.0, 1.0, 7)
    n = np.arange(7)
    want = np.sin(xs)[(n + 2) % 7] + (n + 3) % 7
    np.testing.assert_allclose(fused.evaluate(pruned, [xs]), want, rtol=1e-15)
    np.testing.assert_allclose(fused.evaluate(kp, [xs]), want, rtol=1e-15)
    np.testing.assert_allclose(prepare_kernels(pruned)([xs]), want, rtol=1e-15)


@pytest.mark.parametrize("tupled", [False, True])
def test_a_negated_leaf_is_read_back_as_the_negation(tupled):
    """``(v, -v)``, as reverse mode pairs an adjoint with its negation, stores ``v``
    only, as one output of two or as a tuple element; reads get ``-v``."""
    from accel.ast import nodes as N
    from accel.ast.types import ArrayT, TupleT, float64, shape_type
    from accel.backends import fused
    from accel.backends.cpu import prepare_kernels
    from accel.fusion.kernels import KBlock, KernelProgram
    from accel.fusion.leafprune import prune_leaves
    x = N.Avar(N.fresh("x"), ArrayT(float64, 1))
    i = N.Var(N.fresh("i"), shape_type(1))
    v = N.Var(N.fresh("v"), float64)
    pair = N.Let(v, N.PrimApp("sin", (N.Index(x, i),)),
                 N.Tuple((v, N.PrimApp("neg", (v,)))))
    j = N.Var(N.fresh("j"), shape_type(1))
    if tupled:
        p = N.Avar(N.fresh("p"), ArrayT(TupleT((float64, float64)), 1))
        gen = KGenerate((p,), N.Shape(x), N.Lam((i,), pair))
        a, b = N.Prj(0, N.Index(p, j)), N.Prj(1, N.Index(p, j))
    else:
        p, q = (N.Avar(N.fresh("a"), ArrayT(float64, 1)) for _ in range(2))
        gen = KGenerate((p, q), N.Shape(x), N.Lam((i,), pair))
        a, b = N.Index(p, j), N.Index(q, j)
    out = N.Avar(N.fresh("o"), ArrayT(float64, 1))
    use = KGenerate((out,), N.Shape(x), N.Lam((j,), N.PrimApp("add", (
        N.PrimApp("mul", (N.Const(3.0, float64), a)), b))))
    kp = KernelProgram((x,), KBlock((gen, use), (out,)), out.type)
    pruned = prune_leaves(kp)
    (g, _) = pruned.body.steps
    assert [o.type.elt for o in g.outs] == [float64]
    xs = np.linspace(0.0, 1.0, 9)
    want = 2.0 * np.sin(xs)
    for run in (lambda k: fused.evaluate(k, [xs]), lambda k: prepare_kernels(k)([xs])):
        np.testing.assert_allclose(run(pruned), want, rtol=1e-15)
        np.testing.assert_allclose(run(kp), want, rtol=1e-15)


def test_leaves_projected_from_a_conditionals_tuple_are_pruned_too():
    """Reverse mode writes a branch's contributions as ``t.k`` of a let-bound
    conditional ``t`` (BA's rotation, exact at zero angle) beside contributions of its
    own, ``(value, (i.0, 3), True)``: the element's leaves are projections of ``t``
    (``leafprune._var_path``; before, no leaf of such an element was pruned), the
    constant and index leaves of the others are not stored, and the branch's own
    contributions ``(v, (k, 5), True)`` / ``(0.0, (0, 0), False)`` store their values,
    the test and ``k`` once (``_branch_leaves``).  Both branches are taken; the values
    are the unpruned program's on NumPy and compiled."""
    from accel.ast import nodes as N
    from accel.ast.types import ArrayT, bool_, float64, int64, shape_type
    from accel.backends import fused
    from accel.backends.cpu import prepare_kernels
    from accel.fusion.kernels import KBlock, KernelProgram
    from accel.fusion.leafprune import prune_leaves
    x = N.Avar(N.fresh("x"), ArrayT(float64, 1))
    i = N.Var(N.fresh("i"), shape_type(1))
    xi = N.Index(x, i)
    i0 = N.Prj(0, i)

    def const(v, t=int64):
        return N.Const(v, t)

    def contribution(value, target, col, keep=True):  # (value, (target, col), keep)
        return N.Tuple((value, N.Tuple((target, const(col))), const(keep, bool_)))
    k = N.Var(N.fresh("k"), int64)  # k = 3 i.0, in the element's scope
    zero = contribution(const(0.0, float64), const(0), 0, False)
    # t = if x[i] > 0 then ((sin x[i], 2 i.0), x[i], (2 sin x[i], (k, 5), True),
    #                       (x[i]^2, (k, 6), True))
    #     else ((cos x[i], i.0 + 1), 0.5, zero, zero)
    then = N.Tuple((N.Tuple((N.PrimApp("sin", (xi,)), N.PrimApp("mul", (const(2), i0)))), xi,
                    contribution(N.PrimApp("mul", (const(2.0, float64), N.PrimApp(
                        "sin", (xi,)))), k, 5),
                    contribution(N.PrimApp("mul", (xi, xi)), k, 6)))
    other = N.Tuple((N.Tuple((N.PrimApp("cos", (xi,)), N.PrimApp("add", (i0, const(1))))),
                     const(0.5, float64), zero, zero))
    t = N.Var(N.fresh("t"), then.type)
    body = N.Let(k, N.PrimApp("mul", (const(3), i0)), N.Let(
        t, N.Cond(N.PrimApp("gt", (xi, const(0.0, float64))), then, other),
        N.Tuple((N.Prj(0, t), N.Prj(1, t), contribution(N.PrimApp("exp", (xi,)), i0, 3),
                 N.Prj(2, t), N.Prj(3, t)))))
    g = N.Avar(N.fresh("a"), ArrayT(body.type, 1))
    gen = KGenerate((g,), N.Shape(x), N.Lam((i,), body))
    j = N.Var(N.fresh("j"), shape_type(1))
    e = N.Var(N.fresh("e"), body.type)

    def add(*xs):
        out = xs[0]
        for y in xs[1:]:
            out = N.PrimApp("add", (out, y))
        return out

    def flt(v):
        return N.PrimApp("to_float64", (v,))

    def counted(c):  # if keep then value + target + col else 0
        return N.Cond(N.Prj(2, c), add(N.Prj(0, c), flt(add(N.Prj(0, N.Prj(1, c)),
                                                            N.Prj(1, N.Prj(1, c))))),
                      const(0.0, float64))
    use = N.Lam((j,), N.Let(e, N.Index(g, j), add(
        N.Prj(0, N.Prj(0, e)), flt(N.Prj(1, N.Prj(0, e))), N.Prj(1, e),
        counted(N.Prj(2, e)), counted(N.Prj(3, e)), counted(N.Prj(4, e)))))
    out = N.Avar(N.fresh("o"), ArrayT(float64, 1))
    kp = KernelProgram((x,), KBlock((gen, KGenerate((out,), N.Shape(g), use)), (out,)),
                       out.type)
    pruned = prune_leaves(kp)
    (stored,) = pruned.body.steps[0].outs
    # t.0.0, t.0.1, t.1, exp, the two values, the test and k: 8 of 16
    assert len(leaves(stored.type.elt)) == 8, stored.type
    xs = np.linspace(-1.0, 1.0, 9)
    n = np.arange(9)
    pos = xs > 0
    want = (np.where(pos, np.sin(xs), np.cos(xs)) + np.where(pos, 2 * n, n + 1)
            + np.where(pos, xs, 0.5) + np.exp(xs) + n + 3
            + np.where(pos, 2 * np.sin(xs) + 3 * n + 5 + xs * xs + 3 * n + 6, 0.0))
    np.testing.assert_allclose(fused.evaluate(kp, [xs]), want, rtol=1e-15)
    np.testing.assert_allclose(fused.evaluate(pruned, [xs]), want, rtol=1e-15)
    np.testing.assert_allclose(prepare_kernels(pruned)([xs]), want, rtol=1e-15)


def _piecewise(x, y, idx):
    """Per point, one of two chains of reads of ``y`` at data-dependent places."""
    m = y.shape[0]

    def term(i):
        k = idx[i]

        def chain(v, shift):
            for j in range(3):
                v = A.sin(v) * y[(k + j + shift) % m] + A.cos(v * y[k])
            return v
        return A.cond(x[i] * y[k] > 0.0, chain(x[i], 0), chain(x[i] * x[i], 3))
    return A.sum(A.generate((x.shape[0],), term))


def test_contributions_under_a_branch_store_the_test_once():
    """Reverse mode's contributions of a branch's reads are ``(value, target, True)``
    in the branch taken and ``(0.0, 0, False)`` in the other; the materialised element
    stores the branch's test once instead of a flag per contribution (15 here), and
    targets that are values of the element's scope once each (``leafprune``).  The
    gradient is the interpreter's and finite differences', with both branches taken
    (on the NumPy evaluator of the same kernel program: the cpu backend's 15 permutes
    take 20 s to compile, and other tests run pruned programs compiled)."""
    g = A.gradientA(_piecewise, wrt=(0, 1))
    rng = np.random.default_rng(3)
    args = (rng.standard_normal(40), rng.standard_normal(7), rng.integers(0, 7, 40))
    prog = A.compile(g, backend="fused")
    got, want = prog(*args), A.run(g, *args, backend="interpreter")
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
    rep = A.check_grad(_piecewise, *args, wrt=(0, 1), backend="interpreter", rtol=1e-5,
                       atol=1e-6)
    assert rep.ok, rep.max_error
    elts = [leaves(o.type.elt) for s in _generates(_runner(prog).kp.body) for o in s.outs]
    widest = max(elts, key=len)
    assert len(widest) > 15 and sum(str(t) == "bool" for t in widest) == 1, widest
