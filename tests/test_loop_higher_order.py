"""Loop gradients differentiate again, and take every loop the primal takes (issue 24).

Second order through ``awhile``: the gradient of a loop is an ordinary program whose
taped loop writes its tape with a scatter (``permute (\\new old -> new)``, which has
derivative rules in both modes), so reverse over reverse and forward over reverse
work; they are checked against central differences of the gradient, with and without
checkpoints, on the interpreter, the fused NumPy backend and the cpu backend, and the
type checker runs on every program the transformations produce.
"""

import numpy as np
import pytest

import accel as A
from accel.ad.api import gradient_program
from accel.ad.forward.driver import jvp_program
from accel.ast.typecheck import typecheck
from accel.frontend import arg_type, trace_program

EPS = 1e-6


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


def fd_hessian(g, x, backend):
    """Central differences of the gradient program ``g``: column k is d g / d x_k."""
    cols = []
    for k in range(x.size):
        e = np.zeros_like(x)
        e.flat[k] = EPS
        cols.append((A.run(g, x + e, backend=backend) - A.run(g, x - e, backend=backend))
                    .reshape(-1) / (2 * EPS))
    return np.stack(cols, axis=-1)


def check_second_order(f, x, backend, rtol=1e-5, atol=1e-6):
    """Reverse over reverse (gradient of the sum of the gradient) and forward over
    reverse (a Hessian-vector product) agree with differences of the gradient."""
    g = A.gradientA(f)
    hess = fd_hessian(g, x, backend)
    rr = A.run(A.gradientA(lambda a: A.sum_all(g(a))), x, backend=backend)
    np.testing.assert_allclose(rr.reshape(-1), hess.sum(axis=0), rtol=rtol, atol=atol)
    t = np.linspace(0.3, -0.7, x.size).reshape(x.shape)
    _, fr = A.jvp(g, (x,), (t,), backend=backend)
    np.testing.assert_allclose(fr.reshape(-1), hess @ t.reshape(-1), rtol=rtol, atol=atol)


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
