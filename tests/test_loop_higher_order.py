"""Loop gradients differentiate again, and take every loop the primal takes (issue 24).

Second order through ``awhile``: the gradient of a loop is an ordinary program whose
taped loop writes its tape with a scatter (``permute (\\new old -> new)``, which has
derivative rules in both modes), so reverse over reverse and forward over reverse
work; they are checked against central differences of the gradient, with and without
checkpoints, on the interpreter, the fused NumPy backend and the cpu backend (and the
cuda backend where it runs), and the type checker runs on every program the
transformations produce.  Reverse over reverse keeps no tape of the first-order tape
(checked on the kernel program).  States that change shape from one iteration to the
next (a shrinking vector, a shrinking matrix in a tuple state) get a flat tape whose
size is measured; their gradients agree with forward mode and finite differences on
every backend, with 0, 1 or many trips, and differentiate again.
"""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import accel as A
from accel.ad.api import gradient_program
from accel.ad.forward.driver import jvp_program
from accel.ad.reverse.loop_shapes import keeps_shape, settles
from accel.ast.nodes import Awhile, Index
from accel.backends import fused as numpy_eval
from accel.fusion.fuse import fuse
from accel.fusion.kernels import KAwhile, KPermute
from accel.pipeline import optimise
from accel.testing.properties import usable
from accel.ast.typecheck import typecheck
from accel.frontend import arg_type, trace_program
from compiled_helpers import check_second_order



def _loops(block):
    for s in block.steps:
        if isinstance(s, KAwhile):
            yield s
            yield from _loops(s.body)


def _sig(args):
    return tuple(arg_type(a, i) for i, a in enumerate(args))


def typechecked_derivatives(f, x):
    """Type-check the gradient of ``f``, its reverse-over-reverse and its
    forward-over-reverse programs (traced at ``x``)."""
    prog = trace_program(f, _sig([x]))
    typecheck(prog)
    g, _ = gradient_program(prog, None)
    typecheck(g)
    gp = trace_program(A.gradientA(f), _sig([x]))
    typecheck(gp)
    typecheck(jvp_program(gp))
    hp = trace_program(lambda a: A.sum_all(A.gradientA(f)(a)), _sig([x]))
    h, _ = gradient_program(hp, None)
    typecheck(h)


def counted_loop(every=None, trips=3):
    """Issue 24's program: ``sum(s^2)`` with ``s`` ``trips`` steps of
    ``x <- 0.9 x + sin x`` (state ``(x, unit 0)``, the counter in the state)."""
    def f(x):
        def body(s):
            return (A.map(lambda v: 0.9 * v + A.sin(v), s[0]), A.unit(A.the(s[1]) + 1))
        s = A.awhile(lambda s: A.unit(A.the(s[1]) < trips), body, (x, A.unit(0)),
                     checkpoint=every)
        return A.sum_all(A.map(lambda v: v * v, s[0]))
    return f


X = np.array([0.3, -1.2, 2.0, 0.7])


@pytest.mark.parametrize("every", [None, 2])
def test_counted_loop_derivatives_typecheck(every):
    typechecked_derivatives(counted_loop(every), X)


@pytest.mark.parametrize("backend", ["interpreter", "fused", "cpu"])
@pytest.mark.parametrize("every", [None, 2])
def test_counted_loop_second_order(backend, every):
    check_second_order(counted_loop(every), X, backend)


@pytest.mark.parametrize("trips", [0, 1, 5])
def test_counted_loop_second_order_trip_counts(trips):
    check_second_order(counted_loop(2, trips), X, "interpreter")


def test_cpu_shapes_of_nested_loop_results_are_not_remembered():
    """The cpu host remembers shapes computed from arrays bound once per call; a nested
    loop's result changes from one outer iteration to the next and must not be
    remembered (found by the checkpointed second-order gradient above)."""
    def f(x):
        def body(s):
            k, acc = s
            kk = A.the(k)
            c = A.awhile(lambda q: A.unit(A.the(q) < kk % 2 + 1),
                         lambda q: A.unit(A.the(q) + 1), A.unit(0))
            rows = A.fill((A.the(c), A.size(x)), 1.0)  # 1, 2, 1, 2 rows
            return (A.unit(kk + 1),
                    A.zip_with(lambda a, b: a + b, acc, A.sum(A.transpose(rows))))
        return A.awhile(lambda s: A.unit(A.the(s[0]) < 4), body,
                        (A.unit(0), A.map(lambda v: v * 0, x)))[1]
    x = np.arange(3.0)
    np.testing.assert_array_equal(A.run(f, x, backend="cpu"), np.full(3, 6.0))
    np.testing.assert_array_equal(A.run(f, x, backend="interpreter"), np.full(3, 6.0))


# --------------------------------------------------------------------------- changing shapes
#
# ``awhile`` whose state changes shape from one iteration to the next: reverse mode keeps
# each checkpointed state in a flat tape with its offset and dimensions.


def shrinking(every=None):
    """Issue 24's program: ``s <- generate (n-1) (\\i -> s[i] * sin s[i+1])`` while
    ``size s > 2``, loss ``sum(s^2)``."""
    def f(x):
        def body(s):
            return A.generate((A.size(s) - 1,), lambda i: s[i] * A.sin(s[i + 1]))
        y = A.awhile(lambda s: A.unit(A.size(s) > 2), body, x, checkpoint=every)
        return A.sum(A.map(lambda v: v * v, y))
    return f


def shrinking_square(every=None):
    """A tuple state: an (n, n) matrix losing a row and a column per step, a weight
    vector of fixed length and a counter; the body reads an outer array too."""
    def f(m, w):
        def body(s):
            a, v, k = s
            n = a.shape[0] - 1
            a2 = A.generate((n, n), lambda ix: A.tanh(a[ix[0], ix[1] + 1] * v[ix[0]]
                                                      + a[ix[0] + 1, ix[1]] * w[ix[1]]))
            v2 = A.map(lambda u: A.cos(u) * 0.8, v)
            return (a2, v2, A.unit(A.the(k) + 1))
        a, v, _ = A.awhile(lambda s: A.unit(s[0].shape[0] > 1), body,
                           (m, A.map(lambda u: u, w), A.unit(0)), checkpoint=every)
        return A.zip_with(lambda p, q: p + q, A.sum_all(A.map(lambda u: u * u, a)),
                          A.sum_all(v))
    return f


def shrinking_reference(x):
    while x.size > 2:
        x = x[:-1] * np.sin(x[1:])
    return np.sum(x * x)


@pytest.mark.parametrize("every", [None, 2, 3])
def test_shrinking_state_gradient_on_every_backend(every):
    x = np.array([0.3, -1.2, 2.0, 0.7, 1.1, -0.4])
    f = shrinking(every)
    np.testing.assert_allclose(A.run(f, x, backend="interpreter"), shrinking_reference(x))
    typechecked_derivatives(f, x)
    want = A.run(A.gradientA(f), x, backend="interpreter")
    for backend in ("fused", "cpu"):
        np.testing.assert_allclose(A.run(A.gradientA(f), x, backend=backend), want,
                                   rtol=1e-12, atol=1e-14)
    report = A.check_grad(f, x, backend="interpreter")
    assert report, report
    np.testing.assert_allclose(report.forward[0], want, rtol=1e-10, atol=1e-12)


@given(n=st.integers(0, 7), seed=st.integers(0, 2 ** 16), every=st.sampled_from([1, 2, 4]))
@settings(deadline=None, max_examples=12, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
def test_shrinking_state_matches_forward_and_differences(n, seed, every):
    """0, 1 or many trips (lengths 0..7), with and without checkpoints."""
    x = np.random.default_rng(seed).uniform(-1.5, 1.5, n)
    assert A.check_grad(shrinking(every), x, backend="interpreter")


@pytest.mark.parametrize("backend", ["interpreter", "fused", "cpu"])
def test_shrinking_state_second_order(backend):
    x = np.array([0.3, -1.2, 2.0, 0.7, 1.1])
    check_second_order(shrinking(), x, backend)
    if backend == "interpreter":  # (the same on every parametrization: run once)
        check_second_order(shrinking(2), x, "interpreter")


@pytest.mark.parametrize("every", [None, 2])
def test_shrinking_tuple_state(every):
    rng = np.random.default_rng(5)
    m, w = rng.uniform(-1, 1, (4, 4)), rng.uniform(-1, 1, 4)
    f = shrinking_square(every)
    assert A.check_grad(f, m, w, backend="interpreter")
    want = A.run(A.gradientA(f), m, w, backend="interpreter")
    for backend in ("fused", "cpu"):
        for g, h in zip(A.run(A.gradientA(f), m, w, backend=backend), want):
            np.testing.assert_allclose(g, h, rtol=1e-12, atol=1e-14)


def _traced_awhile(f, args):
    """The (first) ``Awhile`` node of ``f`` traced at ``args``."""
    from accel.ast.traverse import walk
    prog = trace_program(f, _sig(args))
    return next(n for n in walk(prog) if isinstance(n, Awhile))


def test_which_leaves_keep_their_shape():
    """Leaves that provably keep their shape get a tape of rows, the others a flat one."""
    rng = np.random.default_rng(0)
    m, w = rng.uniform(-1, 1, (4, 4)), rng.uniform(-1, 1, 4)
    assert keeps_shape(_traced_awhile(shrinking(), [X]).body) == [False]
    assert keeps_shape(_traced_awhile(shrinking_square(), [m, w]).body) == [False, True, True]
    assert keeps_shape(_traced_awhile(counted_loop(), [X]).body) == [True, True]

    def rnn(W, h0):  # generate (size h) reading an outer array, a counter first
        def body(s):
            t, h = s
            return (A.unit(A.the(t) + 1), A.generate((A.size(h),),
                                                     lambda i: A.tanh(W[i] * h[i])))
        return A.sum(A.awhile(lambda s: A.unit(A.the(s[0]) < 3), body, (A.unit(0), h0))[1])
    assert keeps_shape(_traced_awhile(rnn, [w, w]).body) == [True, True]

    def grow(x):  # same rank, one more element a step: may not use a tape of rows
        return A.sum(A.awhile(lambda s: A.unit(A.size(s) < 6),
                              lambda s: A.generate((A.size(s) + 1,),
                                                   lambda i: A.sin(s[A.min(i, A.size(s) - 1)])),
                              x))
    assert keeps_shape(_traced_awhile(grow, [X]).body) == [False]
    assert A.check_grad(grow, X[:2], backend="interpreter")


def settled_rnn(W, trips, every=None):
    """``h <- tanh(W h + 0.1 t)`` written with ``replicate`` + ``zip_with`` + ``sum``: the
    new length of ``h`` is ``min`` of sizes, rows of ``W`` whatever the length of ``h``,
    so with a ``(4, 6)`` ``W`` and a length-6 ``h0`` the states have lengths 6, 4, 4, ...
    (``h`` *settles*); loss ``sum(h^2)``."""
    rows = W.shape[0]

    def f(h0):
        w = A.use(W)

        def body(s):
            h, t = s
            pre = A.sum(A.zip_with(lambda a, b: a * b, w, A.replicate((rows, A.All), h)))
            return (A.map(lambda v: A.tanh(v + 0.1 * A.to_float(A.the(t))), pre),
                    A.unit(A.the(t) + 1))
        h, _ = A.awhile(lambda s: A.unit(A.the(s[1]) < trips), body, (h0, A.unit(0)),
                        checkpoint=every)
        return A.sum(A.map(lambda v: v * v, h))
    return f


W46 = np.random.default_rng(8).uniform(-0.8, 0.8, (4, 6))


def test_which_leaves_settle():
    """A leaf settles when the shape the body gives it reads no shape of the state."""
    assert settles(_traced_awhile(settled_rnn(W46, 3), [np.ones(6)]).body) == [True, True]
    assert keeps_shape(_traced_awhile(settled_rnn(W46, 3), [np.ones(6)]).body) == [False, True]
    assert settles(_traced_awhile(shrinking(), [X]).body) == [False]
    assert settles(_traced_awhile(counted_loop(), [X]).body) == [False, True]


@pytest.mark.parametrize("every", [None, 2, 3])
@pytest.mark.parametrize("trips", [0, 1, 2, 5])
def test_settled_state_tape_of_rows(every, trips):
    """A settled leaf has a tape of rows, not a flat one (its first state, of another
    length, is read from the loop's initial value), and the gradient agrees with forward
    mode and differences with 0, 1, 2 or many trips."""
    h0 = np.linspace(-0.9, 0.8, 6)
    f = settled_rnn(W46, trips, every)
    kp = fuse(optimise(trace_program(A.gradientA(f), _sig([h0]))))
    taped = [w for w in _loops(kp.body) if w.owned]
    if trips:
        tapes = [p for p in taped[0].params if p.name in taped[0].owned
                 and p.type.elt == A.float64]
        assert [p.type.rank for p in tapes] == [2], tapes
    assert A.check_grad(f, h0, backend="interpreter")
    want = A.run(A.gradientA(f), h0, backend="interpreter")
    if (trips, every) in ((0, None), (5, 3)):  # (a numba compilation each)
        np.testing.assert_allclose(A.run(A.gradientA(f), h0, backend="cpu"), want,
                                   rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("backend", ["interpreter", "fused"])
def test_settled_state_second_order(backend):
    check_second_order(settled_rnn(W46, 3), np.linspace(-0.9, 0.8, 6), backend)
    if backend == "interpreter":
        check_second_order(settled_rnn(W46, 4, every=3), np.linspace(-0.9, 0.8, 6), backend)


@pytest.mark.parametrize("every,n", [(None, 6), (2, 6), (3, 7), (1, 2)])
def test_flat_tape_holds_the_kept_states(monkeypatch, every, n):
    """The flat tape of a shrinking state holds the kept states' elements and nothing
    more: sum of (n - k) over the checkpointed k (fused NumPy backend)."""
    x = np.linspace(-1, 1, n)
    kp = fuse(optimise(trace_program(A.gradientA(shrinking(every)), _sig([x]))))
    taped = [w for w in _loops(kp.body) if w.owned][0]  # the primal's taped loop
    flat = [p.name for p in taped.params if p.name in taped.owned
            and p.type.elt == A.float64]
    seen: dict = {}
    step = numpy_eval._step

    def spy(s, aenv):
        step(s, aenv)
        if s is taped:
            for p, o in zip(s.params, s.outs):
                if p.name in flat:
                    seen[p.name] = aenv[o.name].shape
    monkeypatch.setattr(numpy_eval, "_step", spy)
    numpy_eval.evaluate(kp, [x])
    trips = max(0, n - 2)
    want = sum(n - k for k in range(trips) if k % (every or 1) == 0)
    assert list(seen.values()) == [(want,)], seen


@pytest.mark.parametrize("f,most", [(counted_loop(None, trips=4), 2), (shrinking(), 1)])
def test_second_order_keeps_no_tape_of_tapes(f, most):
    """Reverse over reverse tapes the first-order taped loop's state, but not its tape
    (the scatter writing it is injective: its adjoint does not read the tape), so no
    loop carries an array of a rank above a tape's (2 for a tape of rows of a vector, 1
    for a flat tape; a tape of tapes costs O(T^2) memory and time), and the permutes
    writing the remaining tapes update them in place."""
    hp = trace_program(lambda a: A.sum_all(A.gradientA(f)(a)), _sig([X]))
    kp = fuse(optimise(gradient_program(hp, None)[0]))
    loops = list(_loops(kp.body))
    assert loops
    for w in loops:
        assert all(p.type.rank <= most for p in w.params), [p.type for p in w.params]
        for s in w.body.steps:
            if isinstance(s, KPermute) and any(
                    p.name == s.defaults.body.array.name for p in w.params
                    if isinstance(s.defaults.body, Index)):
                assert s.into is not None, s.out


@pytest.mark.skipif(not usable("cuda"), reason="the cuda backend (or its simulator) is "
                    "not available")
def test_loop_derivatives_on_cuda():
    """The programs of issue 24 point 4 (and a lifted ``while_``) on the cuda backend:
    the same gradients and second derivatives as the interpreter."""
    from test_while_reverse import C, horner
    x = np.array([0.3, -1.2, 2.0, 0.7, 1.1])
    cases = [(A.gradientA(shrinking()), (x,)), (A.gradientA(counted_loop(2)), (X,)),
             (A.gradientA(horner), (C, X[:3])),
             (A.gradientA(lambda a: A.sum_all(A.gradientA(counted_loop())(a))), (X,))]
    for g, args in cases:
        got, want = A.run(g, *args, backend="cuda"), A.run(g, *args, backend="interpreter")
        for u, v in zip(got if isinstance(got, tuple) else (got,),
                        want if isinstance(want, tuple) else (want,)):
            np.testing.assert_allclose(u, v, rtol=1e-10, atol=1e-12)
