"""Fusion: kernel counts of characteristic programs, and parity of the fused kernel
program (NumPy evaluator, backend "fused") with the unfused interpreter."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import accel as A
from accel.fusion.fuse import fuse
from accel.fusion.kernels import count_loops
from accel.frontend import arg_type, trace_program
from accel.pipeline import optimise


def kernels(f, *args) -> int:
    c = A.compile(f, backend="fused")
    c(*args)
    return c.stats(*args)["kernels"]


def test_chain_feeding_sum_is_one_kernel():
    def f(a, b):
        x = A.map(A.sin, a)
        y = A.zip_with(lambda u, v: u * v + 1, x, A.backpermute(b.shape, lambda i: i, b))
        return A.sum(A.map(lambda v: v * v, y))
    x = np.arange(6.0)
    assert kernels(f, x, x) == 1
    np.testing.assert_allclose(A.run(f, x, x, backend="fused"),
                               np.sum((np.sin(x) * x + 1) ** 2))


def test_thesis_example_gradient_is_one_elementwise_kernel():
    g = A.gradientA(lambda a: A.sum_all(A.map(lambda x: 2 * x + 3 * x * x, a)))
    x = np.linspace(-1, 1, 7)
    assert kernels(g, x) == 1
    np.testing.assert_allclose(A.run(g, x, backend="fused"), 2 + 6 * x)


def test_dot_product_gradient_is_at_most_two_kernels():
    g = A.gradientA(lambda a, b: A.sum_all(A.zip_with(lambda u, v: u * v, a, b)))
    x, y = np.arange(5.0), np.arange(5.0) + 2
    assert kernels(g, x, y) <= 2
    ga, gb = A.run(g, x, y, backend="fused")
    np.testing.assert_allclose(ga, y)
    np.testing.assert_allclose(gb, x)


def test_shared_expensive_array_is_computed_once():
    """``e`` is read twice, so fusion materialises it; both reads are at the one reader's
    own index, so once they are one (``tidy``) it is computed there (``reinline``): one
    loop applying ``exp`` once an element.  Read also elsewhere (a reversed copy), it
    stays an array."""
    def f(a):
        e = A.map(lambda v: A.exp(A.sin(v)), a)
        return A.zip_with(lambda u, v: u + v, e, A.map(lambda v: v * 2, e))

    def g(a):
        e = A.map(lambda v: A.exp(A.sin(v)), a)
        n = a.shape[0]
        return (A.zip_with(lambda u, v: u + v, e, A.map(lambda v: v * 2, e)),
                A.backpermute((n,), lambda i: n - 1 - i, e))
    x = np.linspace(-1, 1, 5)
    for fn, loops, exps in [(f, 1, 1), (g, 3, 1)]:
        kp = fuse(optimise(trace_program(fn, (arg_type(x, 0),))))
        assert count_loops(kp.body) == loops, fn.__name__
        assert _applications(kp, "exp") == exps, fn.__name__
    np.testing.assert_allclose(A.run(f, x, backend="fused"), 3 * np.exp(np.sin(x)))


def _applications(kp, op: str) -> int:
    """How many ``op`` the kernel functions of ``kp`` apply (written, not executed)."""
    from accel.ast.traverse import children
    from accel.fusion.kernels import KAwhile, KGenerate

    def count(e):
        return (getattr(e, "op", None) == op) + sum(count(c) for c in children(e))

    def block(b):
        n = 0
        for s in b.steps:
            if isinstance(s, KAwhile):
                n += block(s.cond) + block(s.body)
            elif isinstance(s, KGenerate):
                n += count(s.f)
        return n
    return block(kp.body)


@pytest.mark.parametrize("loop", [False, True])
def test_adjoints_sharing_a_transcendental_compute_it_once(loop):
    """The adjoints of ``W`` and ``h`` in ``tanh (W[i] * h[i] + x[i])`` (same shape) both
    need ``1 - tanh(..)^2``: they are materialised side by side and merged into one
    kernel applying ``tanh`` once; in a loop the reverse sweep reads ``tanh(..)``, the
    next state, off the tape (``ad/reverse/loop.py``) and applies it not at all."""
    def step(w, h, x):
        return A.generate((A.size(h),), lambda i: A.tanh(w[i] * h[i] + x[i]))

    def loss(w, h0, x):
        if loop:
            def body(s):
                return (A.unit(A.the(s[0]) + 1), step(w, s[1], x))
            h = A.awhile(lambda s: A.unit(A.the(s[0]) < 3), body, (A.unit(0), h0))[1]
        else:
            h = step(w, h0, x)
        return A.sum(A.map(lambda v: v * v, h))
    g = A.gradientA(loss, wrt=(0, 1))
    rng = np.random.default_rng(2)
    args = tuple(rng.normal(size=6) for _ in range(3))
    sig = tuple(arg_type(a, i) for i, a in enumerate(args))
    kp = fuse(optimise(trace_program(g, sig)))
    # the primal's (a loop: the taped sweep's), read back by the reverse sweep (which
    # would apply it once per adjoint without the rule, and recompute it in a loop
    # without the next state)
    assert _applications(kp, "tanh") == 1
    for backend in ("fused", "cpu"):
        for got, want in zip(A.run(g, *args, backend=backend),
                             A.run(g, *args, backend="interpreter")):
            np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-13)


PROGRAMS = [
    lambda a: A.map(lambda v: v * 2, a),
    lambda a: A.sum(A.map(A.cos, a)),
    lambda a: A.scanl(lambda p, q: 2 * p + q, 0.0, a),
    lambda a: A.scanr1(lambda p, q: p - q, a),
    lambda a: A.fold1(lambda p, q: A.max(p, q), A.map(lambda v: v + 1, a)),
    lambda a: A.permute(lambda p, q: p + q, A.fill((3,), 0.0), lambda i: i % 3,
                        A.map(lambda v: v * v, a)),
    lambda a: A.reshape((2, A.size(a) // 2), A.map(A.exp, a)),
    lambda a: A.replicate((2, A.All), A.map(A.sin, a)),
    lambda a: A.slice(A.replicate((3, A.All), a), (1, A.All)),
    lambda a: A.acond(A.the(A.sum(a)) > 0, A.map(A.sin, a), A.map(A.cos, a)),
    lambda a: A.awhile(lambda s: A.unit(A.the(A.sum(s)) < 50.0),  # terminates: s grows
                       lambda s: A.map(lambda v: abs(v) * 2 + 1, s), a),
    lambda a: A.generate((A.size(a),), lambda i: A.cond(i > 0, a[i - 1], a[i]) * 2),
    A.gradientA(lambda a: A.the(A.product(A.map(A.sin, a)))),
    A.gradientA(lambda a: A.the(A.maximum(a))),
    A.gradientA(lambda a: A.sum_all(A.replicate((2, A.All), A.map(A.exp, a)))),
    A.gradientA(lambda a: A.the(A.acond(A.the(A.sum(a)) > 0, A.sum(A.map(A.sin, a)),
                                        A.sum(A.map(A.cos, a))))),
]


@pytest.mark.parametrize("k", range(len(PROGRAMS)))
@settings(deadline=None, max_examples=8)
@given(xs=st.lists(st.floats(-2, 2, width=32), min_size=2, max_size=8).filter(
    lambda v: len(v) % 2 == 0))
def test_fused_matches_interpreter(k, xs):
    x = np.array(xs)
    want = A.run(PROGRAMS[k], x, backend="interpreter")
    got = A.run(PROGRAMS[k], x, backend="fused")
    if not isinstance(want, tuple):
        want, got = (want,), (got,)
    for w, g in zip(want, got):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)


def test_generates_sharing_a_subterm_merge_past_steps_they_do_not_read():
    """``merge_generates``: a generate of the shared set joins an earlier one of the set
    with its shape past a step it does not read (not past one it reads); other generates
    merge only when adjacent."""
    from accel.ast import nodes as N
    from accel.ast.types import float64
    from accel.fusion.fuse import merge_generates
    from accel.fusion.kernels import KFold, KGenerate
    from kernel_builders import P, at, av, dim, f64, ix_lam, lam, sh

    x = av(float64, 1, "x")
    g1, g2, g3 = (av(float64, 1, "g") for _ in range(3))
    s = av(float64, 0, "s")
    shape = sh(dim(x, 0))

    def gen(out, extra=None):
        def f(i):
            v = P("tanh", at(x, i))
            return v if extra is None else P("mul", v, N.Index(extra, N.Tuple(())))
        return KGenerate((out,), shape, ix_lam(1, f))
    fold = KFold(s, N.Tuple(()), dim(x, 0), lam((float64, float64), lambda a, b: P("add", a, b)),
                 f64(0.0), ix_lam(1, lambda i: at(x, i)))
    shared = frozenset({g1.name, g2.name})
    merged = merge_generates([gen(g1), fold, gen(g2)], shared)
    assert [type(t).__name__ for t in merged] == ["KGenerate", "KFold"]
    assert [v.name for v in merged[0].outs] == [g1.name, g2.name]
    kept = merge_generates([gen(g1), fold, gen(g2, s)], shared)  # g2 reads the fold
    assert [type(t).__name__ for t in kept] == ["KGenerate", "KFold", "KGenerate"]
    apart = merge_generates([gen(g1), fold, gen(g3)], shared)  # g3 is not shared
    assert len(apart) == 3
    assert len(merge_generates([gen(g1), gen(g3)], shared)) == 1  # adjacent


def test_rank_0_generates_of_a_loop_body_are_one_kernel():
    """A loop's counters updated by a ``map`` over a rank-0 array (shape ``shape t``) and
    a ``unit`` (shape ``()``) are one launch per iteration, not two."""
    from accel.fusion.kernels import KAwhile, KGenerate

    def f(x):
        def body(st):
            t, s, y = st
            return (A.map(lambda v: v + 1, t), A.unit(A.the(s) + A.the(t)),
                    A.map(lambda v: v * 0.5, y))
        return A.awhile(lambda st: A.unit(A.the(st[0]) < 4), body, (A.unit(0), A.unit(0), x))

    x = np.linspace(0.0, 1.0, 5)
    kp = fuse(optimise(trace_program(f, (arg_type(x, 0),))))
    (loop,) = [s for s in kp.body.steps if isinstance(s, KAwhile)]
    rank0 = [s for s in loop.body.steps if isinstance(s, KGenerate) and not s.shape.type.items]
    assert len(rank0) == 1, loop.body.steps
    for backend in ("fused", "cpu"):
        for got, want in zip(A.run(f, x, backend=backend), A.run(f, x, backend="interpreter")):
            np.testing.assert_allclose(got, want)


def test_an_array_read_only_for_its_shape_does_not_keep_its_producer():
    """``y = reshape ((n - 2) * (m - 2)) (map sq lap)`` read only for its shape (reverse
    mode's seed of a ``sum_all`` is a generate over ``shape y``): the shape is known as
    a term of sizes (nine nodes), so ``y`` is dead and ``lap``, read once by the
    adjoint, is fused into it rather than materialised (a stencil's gradient: 3 -> 2
    kernels, one 8 MB array written and read less at 1024^2)."""
    def lap(u):
        h, w = u.shape[0] - 2, u.shape[1] - 2
        return A.generate((h, w), lambda ix: u[ix[0], ix[1] + 1] + u[ix[0] + 2, ix[1] + 1]
                          + u[ix[0] + 1, ix[1]] + u[ix[0] + 1, ix[1] + 2]
                          - 4.0 * u[ix[0] + 1, ix[1] + 1])

    def f(u):
        return A.sum_all(A.map(lambda v: v * v, lap(u)))
    u = np.random.default_rng(4).standard_normal((9, 12))
    g = A.gradientA(f)
    p = optimise(trace_program(g, (arg_type(u, 0),)))
    assert count_loops(fuse(p).body) == 2
    c = u[1:-1, 1:-1]
    d = 2 * (u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:] - 4.0 * c)
    want = np.zeros_like(u)
    for sl in ((slice(None, -2), slice(1, -1)), (slice(2, None), slice(1, -1)),
               (slice(1, -1), slice(None, -2)), (slice(1, -1), slice(2, None))):
        want[sl] += d
    want[1:-1, 1:-1] -= 4.0 * d
    for backend in ("cpu", "interpreter"):
        np.testing.assert_allclose(A.run(g, u, backend=backend), want, rtol=1e-12,
                                   atol=1e-12)
