"""Later kernels read a materialised generate instead of recomputing its elements
(``accel.fusion.materialised``): only where the read is the same expression over a
dimension no larger than the generate's.  Each case is checked against NumPy on the
interpreter, the fused NumPy evaluator and the cpu backend (with bounds checks), and by
the kernels' sources."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import accel as A
from accel.ast import nodes as N
from accel.ast.traverse import walk
from accel.frontend import arg_type, trace_program
from accel.fusion.fuse import fuse
from accel.fusion.kernels import KFold, KGenerate
from accel.pipeline import optimise


def kernel_program(f, *args):
    p = optimise(trace_program(f, tuple(arg_type(a, i) for i, a in enumerate(args))))
    return fuse(p)


def producer(kp, k: int):
    """The step writing result ``k`` of kernel program ``kp``."""
    name = kp.body.result[k].name
    (s,) = [s for s in kp.body.steps if name in {o.name for o in getattr(s, "outs", ())}
            or getattr(s, "out", None) is not None and s.out.name == name]
    return s


def reads(e) -> set:
    return {x.array.name for x in walk(e) if isinstance(x, N.Index)}


def check(f, expected, *args):
    for backend in ("interpreter", "fused", "cpu"):
        got = A.compile(f, backend=backend, check_bounds=True)(*args)
        got = got if isinstance(got, tuple) else (got,)
        for g, e in zip(got, expected):
            np.testing.assert_allclose(g, e, rtol=1e-12, atol=1e-12, err_msg=backend)


def mods(e) -> int:
    return sum(isinstance(x, N.PrimApp) and x.op == "mod" for x in walk(e))


def centred(x, mu, n):
    """xc[i, k, d] = x[i mod S, d] - mu[k, d] over (n, K, D), as the GMM writes it."""
    return A.generate((n, mu.shape[0], mu.shape[1]),
                      lambda i: x[i[0] % x.shape[0], i[2]] - mu[i[1], i[2]])


@pytest.fixture
def data():
    rng = np.random.default_rng(2)
    return rng.normal(size=(5, 3)), rng.normal(size=(4, 3)), rng.normal(size=(4, 3))


def sq(e):
    return e * e


def uses(xc):
    """Four more reads of ``xc``: more than four make fusion materialise it where it is
    bound (as the GMM's), before the kernels that follow."""
    return (A.map(lambda v: v * 2.0, xc), A.map(lambda v: v + 1.0, xc), A.map(lambda v: -v, xc),
            A.map(lambda v: v * v, xc))


def uses_np(xc):
    return xc * 2.0, xc + 1.0, -xc, xc * xc


def test_a_fold_recomputing_a_materialised_generate_reads_it(data):
    x, mu, q = data

    def f(x, mu, q):
        xc = centred(x, mu, 7)
        k, d = mu.shape
        lxc = A.sum(A.generate((7, k, d, d), lambda i: xc[i[0], i[1], i[3]] * q[i[1], i[2]]))
        ss = A.sum(A.generate((7, k, d), lambda i: sq(
            q[i[1], i[2]] * (x[i[0] % x.shape[0], i[2]] - mu[i[1], i[2]]) + lxc[i])))
        return (ss, xc) + uses(xc)
    xc = x[np.arange(7) % 5][:, None, :] - mu[None]
    lxc = np.einsum("nke,kd->nkd", xc, q)
    check(f, (((q[None] * xc + lxc) ** 2).sum(-1), xc) + uses_np(xc), *data)
    kp = kernel_program(f, *data)
    ss, gen = producer(kp, 0), producer(kp, 1)
    assert isinstance(ss, KFold) and isinstance(gen, KGenerate) and mods(gen.f) == 1
    assert mods(ss.src) == 0 and gen.outs[0].name in reads(ss.src)


def test_a_kernel_over_a_larger_space_recomputes(data):
    """The later generate runs over 9 points, the materialised one over 7: reading it
    would be out of bounds, so the expression stays."""
    x, mu, _ = data

    def f(x, mu):
        xc = centred(x, mu, 7)
        big = A.generate((9, 4, 3), lambda i: x[i[0] % x.shape[0], i[2]] - mu[i[1], i[2]])
        return (A.map(lambda v: v * 2.0, big), xc) + uses(xc)
    xc7 = x[np.arange(7) % 5][:, None, :] - mu[None]
    xc9 = x[np.arange(9) % 5][:, None, :] - mu[None]
    check(f, (xc9 * 2, xc7) + uses_np(xc7), x, mu)
    kp = kernel_program(f, x, mu)
    big, gen = producer(kp, 0), producer(kp, 1)
    assert mods(big.f) == 1 and gen.outs[0].name not in reads(big.f)


def test_components_must_bind_consistently():
    """``exp(a[j, i]) * v[i]`` is not ``exp(a[j, i]) * v[j]``: the sum of the second
    recomputes it, the sum of the first reads it."""
    rng = np.random.default_rng(4)
    a, v = rng.normal(size=(4, 4)), rng.normal(size=4)

    def f(a, v):
        p = A.generate((4, 4), lambda i: A.exp(a[i[1], i[0]]) * v[i[0]])
        t = A.sum(A.generate((4, 4), lambda i: A.exp(a[i[1], i[0]]) * v[i[1]]))
        u = A.sum(A.generate((4, 4), lambda i: A.exp(a[i[1], i[0]]) * v[i[0]]))
        return p, t, u
    e = np.exp(a.T)
    check(f, (e * v[:, None], (e * v[None, :]).sum(1), (e * v[:, None]).sum(1)), a, v)
    kp = kernel_program(f, a, v)
    p, t, u = (producer(kp, k) for k in range(3))
    assert p.outs[0].name not in reads(t.src) and p.outs[0].name in reads(u.src)


@settings(max_examples=25, deadline=None)
@given(n_mat=st.integers(0, 6), n_use=st.integers(0, 6), k=st.integers(0, 3))
def test_sizes_sweep_against_numpy(n_mat, n_use, k):
    """Any sizes, empty included: the read is used exactly when in bounds."""
    rng = np.random.default_rng(n_mat * 100 + n_use * 10 + k)
    x, mu = rng.normal(size=(3, 2)), rng.normal(size=(k, 2))

    def f(x, mu):
        xc = centred(x, mu, n_mat)
        use = A.generate((n_use, mu.shape[0], mu.shape[1]),
                         lambda i: sq(x[i[0] % x.shape[0], i[2]] - mu[i[1], i[2]]))
        return (use, xc) + uses(xc)
    xc_m = x[np.arange(n_mat) % 3][:, None, :] - mu[None]
    xc_u = x[np.arange(n_use) % 3][:, None, :] - mu[None]
    check(f, (xc_u ** 2, xc_m) + uses_np(xc_m), x, mu)
    kp = kernel_program(f, x, mu)
    use, gen = producer(kp, 0), producer(kp, 1)
    if use is not gen:  # (equal shapes: one loop writes both, sharing the expression)
        assert (gen.outs[0].name in reads(use.f)) == (n_use <= n_mat)


def test_dimensions_are_compared_through_earlier_arrays_shapes():
    """The corpus MLP written with ``replicate``: its hidden ``tanh`` is materialised
    over ``min (shape h).0 (shape x).0`` rows (a zip_with over the layer's product ``h``,
    a fold over ``(shape x).0`` rows) and read back by the gradient's generate over
    ``(shape x).0`` rows: with ``h``'s shape written out the two are the same length, so
    the adjoint reads the ``tanh`` instead of applying it again.  The gradient matches
    the interpreter's on the fused and cpu backends."""
    from benchmarks.corpus.nn import mlp_replicate
    rng = np.random.default_rng(4)
    args = (rng.normal(size=(5, 4)), rng.normal(size=5), rng.normal(size=(3, 5)),
            rng.normal(size=3), rng.normal(size=(6, 4)), rng.normal(size=(6, 3)))
    g = A.gradientA(mlp_replicate, wrt=(0, 1, 2, 3))
    kp = kernel_program(g, *args)
    tanhs = [e for s in kp.body.steps for f in ("f", "src") if getattr(s, f, None) is not None
             for e in walk(getattr(s, f)) if isinstance(e, N.PrimApp) and e.op == "tanh"]
    assert len(tanhs) == 1
    want = A.compile(g, backend="interpreter")(*args)
    for backend in ("fused", "cpu"):
        for got, w in zip(A.compile(g, backend=backend)(*args), want):
            np.testing.assert_allclose(got, w, rtol=1e-12, atol=1e-14, err_msg=backend)
