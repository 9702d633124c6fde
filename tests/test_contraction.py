"""Folds that are matrix products (accel/fusion/contraction.py) and their BLAS phase on
the cpu backend (backends/cpu/contract.py).

The recogniser must see the same product through every formulation (generate with
indexing, replicate + zip_with, backpermute, and reverse AD's gathered adjoints), and
nothing else; the cpu backend's ``mm`` phase must give NumPy's values for every layout
of the operands and the output, batches, matrix-vector products, scale factors,
float32, and fall back to the fold's other phases where the arrays do not span the
fold's domain.
"""

import inspect
import platform
import re

import numpy as np
import pytest

import accel as A
import accel.backends.cpu.contract as contract_phase
from accel.fusion.contraction import contraction
from accel.fusion.fuse import fuse
from accel.fusion.kernels import KFold, KGenerate, sub_blocks
from accel.pipeline import arg_type, optimise, trace_program

from benchmarks.corpus import linalg, nn


def _folds(f, *args):
    sig = tuple(arg_type(a, i) for i, a in enumerate(args))
    kp = fuse(optimise(trace_program(f, sig)))

    def steps(b):
        for s in b.steps:
            yield s
            for sb in sub_blocks(s):
                yield from steps(sb)
    return [s for s in steps(kp.body) if isinstance(s, KFold)]


RNG = np.random.default_rng(7)
MA, MB = RNG.standard_normal((5, 4)), RNG.standard_normal((4, 6))


@pytest.mark.parametrize("form", ["replicate", "generate", "backpermute"])
def test_every_matmul_formulation_and_its_gradient_is_a_contraction(form):
    f = getattr(linalg, "matmul_" + form)
    primal = _folds(f, MA, MB)
    assert sum(contraction(s) is not None for s in primal) == 1
    grad = _folds(A.gradientA(f, wrt=(0, 1)), MA, MB)
    assert len(grad) == 3 and all(contraction(s) is not None for s in grad)


@pytest.mark.parametrize("form", ["replicate", "generate"])
def test_attention_products_are_contractions(form):
    q, k, v = (RNG.standard_normal((6, 3)) for _ in range(3))
    f = getattr(nn, "attention_" + form)
    assert sum(contraction(s) is not None for s in _folds(f, q, k, v)) == 2
    assert sum(contraction(s) is not None
               for s in _folds(A.gradientA(f, wrt=(0, 1, 2)), q, k, v)) >= 4


def test_other_folds_are_not_contractions():
    x = RNG.standard_normal((5, 4))
    n, k = x.shape
    not_products = [
        # row norms: both reads at (i, k): no row or column index of a product
        lambda a: A.sum(A.map(lambda v: v * v, a)),
        # a maximum, not a sum
        lambda a: A.maximum(A.generate((n, n, k), lambda ix: a[ix[0], ix[2]] * a[ix[1], ix[2]])),
        # three reads, one of them at every component of the index
        lambda a: A.sum(A.generate((n, n, k), lambda ix: a[ix[0], ix[2]] * a[ix[1], ix[2]]
                                   * a[(ix[0] + ix[1]) % n, ix[2]])),
        # a non-linear function of the reads
        lambda a: A.sum(A.generate((n, n, k),
                                   lambda ix: A.sin(a[ix[0], ix[2]] * a[ix[1], ix[2]]))),
    ]
    for f in not_products:
        assert all(contraction(s) is None for s in _folds(f, x))


def test_a_third_factor_of_fewer_components_joins_an_operand():
    """``sum_k a[i, k] * a[0, k] * a[j, k]``: the factor read at (k) joins the operand
    read at (i, k), which is materialised; the fold is a product, and right."""
    x = RNG.standard_normal((5, 4))

    def f(a):
        n, k = a.shape
        return A.sum(A.generate((n, n, k), lambda ix: a[ix[0], ix[2]] * a[0, ix[2]]
                                * a[ix[1], ix[2]]))
    assert any(contraction(s) is not None for s in _folds(f, x))
    np.testing.assert_allclose(A.run(f, x), (x * x[0]) @ x.T, rtol=1e-12)


def _gen_product(out_order, a_layout, b_layout, scale=None):
    """``out = sum_k A . B`` written with generate, for an output order (``"mn"`` or
    ``"nm"``) and operand layouts (``"mk"``/``"km"``, ``"kn"``/``"nk"``)."""
    def f(a, b):
        m = a.shape[0] if a_layout == "mk" else a.shape[1]
        k = a.shape[1] if a_layout == "mk" else a.shape[0]
        n = b.shape[1] if b_layout == "kn" else b.shape[0]

        def elt(ix):
            i, j, kk = (ix[0], ix[1], ix[2]) if out_order == "mn" else (ix[1], ix[0], ix[2])
            x = a[i, kk] if a_layout == "mk" else a[kk, i]
            y = b[kk, j] if b_layout == "kn" else b[j, kk]
            p = x * y
            return p if scale is None else scale(p, a)
        shape = (m, n, k) if out_order == "mn" else (n, m, k)
        return A.sum(A.generate(shape, elt))
    return f


def _np_product(a, b, out_order, a_layout, b_layout):
    am = a if a_layout == "mk" else a.T
    bm = b if b_layout == "kn" else b.T
    c = am @ bm
    return c if out_order == "mn" else c.T


@pytest.fixture
def blas_always(monkeypatch):
    """Every recognised product runs the ``mm`` phase, whatever its size."""
    monkeypatch.setattr(contract_phase, "MM_MIN_WORK", 0)
    monkeypatch.setattr(contract_phase, "MM_MIN_K", 0)


@pytest.mark.parametrize("out_order", ["mn", "nm"])
@pytest.mark.parametrize("a_layout", ["mk", "km"])
@pytest.mark.parametrize("b_layout", ["kn", "nk"])
def test_blas_phase_every_layout(blas_always, out_order, a_layout, b_layout):
    m, k, n = 7, 5, 9
    a = RNG.standard_normal((m, k) if a_layout == "mk" else (k, m))
    b = RNG.standard_normal((k, n) if b_layout == "kn" else (n, k))
    f = _gen_product(out_order, a_layout, b_layout)
    assert any(contraction(s) is not None for s in _folds(f, a, b))
    c = A.compile(f)
    got = c(a, b)
    np.testing.assert_allclose(got, _np_product(a, b, out_order, a_layout, b_layout),
                               rtol=1e-12, atol=1e-12)
    assert any(k.startswith("mm_") for k in c.stats(a, b)["launches"])


@pytest.mark.parametrize("scale", [
    lambda p, a: p * 0.5,                                       # a constant
    lambda p, a: -(p / A.to_float(a.shape[0])),               # a shape, a negation
    lambda p, a: a[0, 0] * p + a[0, 0] * p,                     # a fixed read, doubled
])
def test_blas_phase_scale_factors(blas_always, scale):
    a, b = RNG.standard_normal((6, 4)), RNG.standard_normal((4, 3))
    f = _gen_product("mn", "mk", "kn", scale)
    assert any(contraction(s) is not None and contraction(s).scale
               for s in _folds(f, a, b))
    c = A.compile(f)
    np.testing.assert_allclose(c(a, b), A.run(f, a, b, backend="interpreter"),
                               rtol=1e-12, atol=1e-12)
    assert any(k.startswith("mm_") for k in c.stats(a, b)["launches"])


def test_blas_phase_batches_and_matrix_vector(blas_always):
    a, b = RNG.standard_normal((3, 5, 4)), RNG.standard_normal((3, 6, 4))
    v = RNG.standard_normal(4)

    def batched(a, b):  # out[t, i, j] = sum_k a[t, i, k] * b[t, j, k]
        t, m, k = a.shape
        n = b.shape[1]
        return A.sum(A.generate((t, m, n, k),
                                lambda ix: a[ix[0], ix[1], ix[3]] * b[ix[0], ix[2], ix[3]]))

    def matvec(a, v):  # out[i] = sum_k a[1, i, k] ... over a rank-2 slice: a[i, k] v[k]
        m, k = a.shape
        return A.sum(A.generate((m, k), lambda ix: a[ix[0], ix[1]] * v[ix[1]]))

    def vecmat(a, v):  # out[i] = sum_k v[k] a[k, i]
        k, m = a.shape
        return A.sum(A.generate((m, k), lambda ix: v[ix[1]] * a[ix[1], ix[0]]))

    for f, args, ref in [
        (batched, (a, b), np.einsum("tik,tjk->tij", a, b)),
        (matvec, (a[0], v), a[0] @ v),
        (vecmat, (a[0].T.copy(), v), v @ a[0].T),
    ]:
        assert any(contraction(s) is not None for s in _folds(f, *args))
        c = A.compile(f)
        np.testing.assert_allclose(c(*args), ref, rtol=1e-12, atol=1e-12)
        assert any(k.startswith("mm_") for k in c.stats(*args)["launches"])


@pytest.mark.parametrize("case", [
    # GMM's product: out[n, k, r] = sum_c L[k, r, c] * xc[n, k, c] (batch k inside)
    ("nkr", "krc", "nkc", "krc,nkc->nkr"),
    ("rkn", "nkc", "kcr", "nkc,kcr->rkn"),   # batch in the middle, K-major operand
    ("nrk", "ckr", "knc", "ckr,knc->nrk"),   # batch last in the output
    ("kn", "kc", "nkc", "kc,nkc->kn"),       # matrix-vector per batch
])
def test_blas_phase_batch_at_any_position(blas_always, case):
    """A batch component at any dimension of the output and of either array is still a
    contraction, and the strided ``mm`` phase gives NumPy's values (with a post factor
    of the output's index)."""
    out, la, lb, spec = case
    ext = {"n": 5, "k": 3, "r": 4, "c": 6}
    a = RNG.standard_normal(tuple(ext[ch] for ch in la))
    b = RNG.standard_normal(tuple(ext[ch] for ch in lb))
    post = RNG.uniform(1.0, 2.0, ext[out[0]])

    def f(a, b, w):
        dims = {**{ch: a.shape[j] for j, ch in enumerate(la)},
                **{ch: b.shape[j] for j, ch in enumerate(lb)}}
        pos = {ch: j for j, ch in enumerate(out + "c")}

        def term(ix):
            ra = a[tuple(ix[pos[ch]] for ch in la)]
            rb = b[tuple(ix[pos[ch]] for ch in lb)]
            return ra * rb / w[ix[0]] * 2.0
        return A.sum(A.generate(tuple(dims[ch] for ch in out + "c"), term))

    assert any(contraction(s) is not None and contraction(s).batch is not None
               for s in _folds(f, a, b, post))
    want = np.einsum(spec, a, b) * 2.0 / post.reshape((-1,) + (1,) * (len(out) - 1))
    c = A.compile(f)
    np.testing.assert_allclose(c(a, b, post), want, rtol=1e-12, atol=1e-12)
    assert any(k.startswith("mm_") for k in c.stats(a, b, post)["launches"])


def test_gmm_indexing_gradient_products_are_batched_contractions():
    """GMM written with indexing: the (N, K, D) products by L_k, batched over K inside
    the arrays, are contractions in the primal and the gradient, and the fused kernel
    program (with its materialised operands and presummed scatter) gives the
    interpreter's gradient (the strided BLAS phase itself is tested above: compiling the
    whole GMM gradient here took 190 s of the suite)."""
    from benchmarks.corpus import gmm
    prog = gmm.PROGRAMS[0]
    args = prog.args("tiny")
    f = prog.accel["indexing"]
    g = A.gradientA(f, wrt=prog.wrt)
    assert any(contraction(s) is not None and contraction(s).batch is not None
               for s in _folds(g, *args))
    for got, want in zip(A.run(g, *args, backend="fused"),
                         A.run(g, *args, backend="interpreter")):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


def _triangular(lm, x):
    """out[n, r] = sum_{c < r} lm[r, c] * (x[n, c] + 1): x has one column fewer than lm,
    and the guard is what keeps its reads in bounds."""
    n, d = x.shape[0], lm.shape[0]
    return A.sum(A.generate((n, d, d), lambda ix: A.cond(
        ix[2] < ix[1], lm[ix[1], ix[2]] * (x[ix[0], ix[2]] + 1.0), 0.0)))


def test_guarded_operands_are_materialised_without_reading_more(blas_always):
    """A product under a guard comparing index components (a triangular ``c < r``)
    becomes a contraction of two materialised operands, each computed only where the
    fold reads it: with bounds checks on, nothing reads out of bounds, and the values
    are the interpreter's (the same with the rows' guard on the other side)."""
    lm, x = RNG.standard_normal((5, 5)), RNG.standard_normal((4, 4))

    def upper(lm, x):  # out[n, c] = sum_{r > c} lm[r, c] * x[n, r - 1]: guard c < r
        n, d = x.shape[0], lm.shape[0]
        return A.sum(A.generate((n, d, d), lambda ix: A.cond(
            ix[1] < ix[2], lm[ix[2], ix[1]] * x[ix[0], ix[2] - 1], 0.0)))

    for f in (_triangular, upper):
        folds = _folds(f, lm, x)
        assert any(contraction(s) is not None for s in folds), f.__name__
        want = A.run(f, lm, x, backend="interpreter")
        for check in (False, True):
            c = A.compile(f, check_bounds=check)
            np.testing.assert_allclose(c(lm, x), want, rtol=1e-12, atol=1e-12)
        assert any(k.startswith("mm_") for k in c.stats(lm, x)["launches"])
    ref = np.array([[sum(lm[r, c] * (x[i, c] + 1.0) for c in range(r)) for r in range(5)]
                    for i in range(4)])
    np.testing.assert_allclose(A.run(_triangular, lm, x), ref, rtol=1e-12)


def test_guards_that_cannot_be_eliminated_keep_the_fold():
    """A guard tying the folded component to two others (``c < r`` and ``c < n``) has no
    exact per-operand condition: the fold stays as it is, and is right."""
    lm, x = RNG.standard_normal((5, 5)), RNG.standard_normal((4, 5))

    def f(lm, x):
        n, d = x.shape[0], lm.shape[0]
        return A.sum(A.generate((n, d, d), lambda ix: A.cond(
            (ix[2] < ix[1]) & (ix[2] < ix[0]), lm[ix[1], ix[2]] * A.sin(x[ix[0], ix[2]]),
            0.0)))
    assert not any(contraction(s) is not None for s in _folds(f, lm, x))
    np.testing.assert_allclose(A.run(f, lm, x), A.run(f, lm, x, backend="interpreter"),
                               rtol=1e-12)


@pytest.mark.parametrize("form", ["replicate", "generate"])
def test_least_squares_gradient_is_a_guarded_matrix_vector_product(blas_always, form):
    """The gradient of ``0.5 |Xw - y|^2`` under the gathers' index-free guards: the
    residual is materialised, the matrix stays a read whose guards the host checks (no
    copy of X), both folds are products, and the values are the interpreter's."""
    f = getattr(linalg, "lstsq_" + form)
    x, w, y = RNG.standard_normal((7, 5)), RNG.standard_normal(5), RNG.standard_normal(7)
    g = A.gradientA(f, wrt=1)
    sig = tuple(arg_type(a, i) for i, a in enumerate((x, w, y)))
    kp = fuse(optimise(trace_program(g, sig)))
    folds = [s for s in kp.body.steps if isinstance(s, KFold)]
    assert len(folds) == 2 and all(contraction(s) is not None for s in folds)
    assert not any(isinstance(s, KGenerate) and s.outs[0].type.rank == 2
                   for s in kp.body.steps)
    c = A.compile(g)
    np.testing.assert_allclose(c(x, w, y), A.run(g, x, w, y, backend="interpreter"),
                               rtol=1e-12)
    np.testing.assert_allclose(c(x, w, y), x.T @ (x @ w - y), rtol=1e-12)
    assert any(k.startswith("mm_") for k in c.stats(x, w, y)["launches"])


def test_blas_phase_float32_and_empty_sums(blas_always):
    a = RNG.standard_normal((5, 4)).astype(np.float32)
    b = RNG.standard_normal((4, 3)).astype(np.float32)
    f = _gen_product("mn", "mk", "kn")
    got = A.compile(f)(a, b)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, a @ b, rtol=1e-5)
    z = A.compile(f)(np.zeros((5, 0)), np.zeros((0, 3)))
    np.testing.assert_array_equal(z, np.zeros((5, 3)))


def test_mismatched_extents_fall_back_to_the_fold(blas_always):
    """``zip_with`` of replicates intersects shapes: with a (5, 4) and b (6, 3) the sum
    runs over 4 terms, not over either array's whole dimension, and the guards of the
    gradient's gathers do not hold everywhere: the fold's own phases run."""
    a, b = RNG.standard_normal((5, 4)), RNG.standard_normal((6, 3))
    for f in (linalg.matmul_replicate, A.gradientA(linalg.matmul_replicate, wrt=(0, 1))):
        want = A.run(f, a, b, backend="interpreter")
        got = A.compile(f)(a, b)
        for g, w in zip(got if isinstance(got, tuple) else (got,),
                        want if isinstance(want, tuple) else (want,)):
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("form", ["replicate", "generate", "backpermute"])
def test_matmul_gradients_through_blas_match_numpy(blas_always, form):
    a, b = RNG.standard_normal((9, 7)), RNG.standard_normal((7, 8))
    f = A.gradientA(getattr(linalg, "matmul_" + form), wrt=(0, 1))
    c = A.compile(f)
    da, db = c(a, b)
    g = 2 * (a @ b)
    np.testing.assert_allclose(da, g @ b.T, rtol=1e-11, atol=1e-11)
    np.testing.assert_allclose(db, a.T @ g, rtol=1e-11, atol=1e-11)
    assert c.stats(a, b)["launches"].get("mm_serial", 0) + \
        c.stats(a, b)["launches"].get("mm_parallel", 0) >= 3


def test_blas_phase_factors_of_the_output_index(blas_always):
    """softmax(s) @ v as ``p[i, k] / z[i] * v[k, j]``: ``1 / z[i]`` multiplies row i of
    the product after its sum (and a factor of both output indices too)."""
    p, v = RNG.random((6, 5)), RNG.standard_normal((5, 4))
    z, w = RNG.random(6) + 1, RNG.standard_normal((6, 4))

    def f(p, z, v, w):
        m, k = p.shape
        n = v.shape[1]
        return A.sum(A.generate((m, n, k), lambda ix: p[ix[0], ix[2]] / z[ix[0]]
                                * v[ix[2], ix[1]] * w[ix[0], ix[1]]))
    args = (p, z, v, w)
    assert any(contraction(s) is not None and len(contraction(s).post) == 2
               for s in _folds(f, *args))
    c = A.compile(f)
    np.testing.assert_allclose(c(*args), (p / z[:, None]) @ v * w, rtol=1e-12, atol=1e-12)
    assert any(k.startswith("mm_") for k in c.stats(*args)["launches"])


def test_blas_phase_rows_at_fixed_positions(blas_always):
    """``w[i, k] * xs[t, k]`` (an RNN's input at step t) and ``xs[t, s, k, i]``: leading
    components at an index read from an array are an offset into the array."""
    w, xs = RNG.standard_normal((6, 5)), RNG.standard_normal((4, 5))
    x4 = RNG.standard_normal((3, 2, 5, 6))
    t = np.array(2, dtype=np.int64)

    def row(w, xs, t):
        m, k = w.shape
        return A.sum(A.generate((m, k), lambda ix: w[ix[0], ix[1]] * xs[A.the(t), ix[1]]))

    def block(w, x4, t):  # out[j, i] = sum_k w[j, k] * x4[t, 1, k, i]
        m, k = w.shape
        n = x4.shape[3]
        return A.sum(A.generate((m, n, k),
                                lambda ix: w[ix[0], ix[2]] * x4[A.the(t), 1, ix[2], ix[1]]))

    for f, args, ref in [(row, (w, xs, t), w @ xs[2]),
                         (block, (w, x4, t), w @ x4[2, 1])]:
        assert any(contraction(s) is not None for s in _folds(f, *args))
        c = A.compile(f)
        np.testing.assert_allclose(c(*args), ref, rtol=1e-12, atol=1e-12)
        assert any(k.startswith("mm_") for k in c.stats(*args)["launches"])
    # an index out of bounds: the fold's own phases run, and check when asked
    with pytest.raises(A.OutOfBoundsError):
        A.compile(row, check_bounds=True)(w, xs, np.array(9, dtype=np.int64))


def test_elementwise_operands_are_materialised(blas_always):
    """``sum_k tanh(h[i, k] + b[k]) * w[j, k]`` (a dense layer after an activation):
    fusion inlines the activation into the sum; ``materialise_operands`` computes it
    once per (i, k) in a generate of its own and the sum becomes a matrix product, on
    every kernel backend."""
    h, bias, w = RNG.standard_normal((7, 5)), RNG.standard_normal(5), RNG.standard_normal((4, 5))

    def layer(h, bias, w):
        n, k = h.shape
        o = w.shape[0]
        return A.sum(A.generate((n, o, k), lambda ix: A.tanh(h[ix[0], ix[2]] + bias[ix[2]])
                                * (2.0 * w[ix[1], ix[2]]) * w[ix[1], ix[2]]))
    args = (h, bias, w)
    sig = tuple(arg_type(a, i) for i, a in enumerate(args))
    kp = fuse(optimise(trace_program(layer, sig)))
    folds = [s for s in kp.body.steps if isinstance(s, KFold)]
    assert len(folds) == 1 and contraction(folds[0]) is not None
    assert len(kp.body.steps) == 3  # the two operands' generates and the fold
    want = np.tanh(h + bias) @ (2 * w * w).T
    for backend in ("fused", "cpu"):
        np.testing.assert_allclose(A.run(layer, *args, backend=backend), want,
                                   rtol=1e-12, atol=1e-12)
    c = A.compile(layer)
    c(*args)
    assert any(k.startswith("mm_") for k in c.stats(*args)["launches"])
    np.testing.assert_allclose(A.run(A.gradientA(lambda h, bias, w: A.sum_all(layer(h, bias, w)),
                                                 wrt=(0, 1, 2)), *args, backend="cpu")[2],
                               A.run(A.gradientA(lambda h, bias, w: A.sum_all(layer(h, bias, w)),
                                                 wrt=(0, 1, 2)), *args,
                                     backend="interpreter")[2], rtol=1e-11, atol=1e-11)


def test_a_shifted_operand_is_copied_then_multiplied(blas_always):
    """``sum_k a[i, k] * b[j + 1, k]``: the shifted read is an operand of its own (a
    generate over (j, k)), then a product."""
    a, b = RNG.standard_normal((6, 5)), RNG.standard_normal((5, 5))

    def f(a, b):
        n, k = a.shape
        return A.sum(A.generate((n, b.shape[0] - 1, k),
                                lambda ix: a[ix[0], ix[2]] * b[ix[1] + 1, ix[2]]))
    c = A.compile(f)
    np.testing.assert_allclose(c(a, b), a @ b[1:].T, rtol=1e-12, atol=1e-12)
    assert any(k.startswith("mm_") for k in c.stats(a, b)["launches"])


def _kernel_program(f, *args):
    sig = tuple(arg_type(a, i) for i, a in enumerate(args))
    return fuse(optimise(trace_program(f, sig)))


def test_broadcast_generates_are_stored_narrow():
    """A materialised generate that ignores part of its index (``narrow_broadcasts``) is
    computed over the rest, and its readers drop those components; a returned one keeps
    its shape."""
    x, y = RNG.standard_normal(5), RNG.standard_normal((5, 4))

    def f(x, y):
        n, m = y.shape
        b = A.generate((n, m), lambda ix: A.exp(A.sin(x[ix[0]])) * A.cos(x[ix[0]]))
        return (A.sum(A.zip_with(lambda u, v: u * v, b, y)),
                A.sum(A.zip_with(lambda u, v: u + v, b, y)))

    def g(x, y):
        n, m = y.shape
        b = A.generate((n, m), lambda ix: A.exp(A.sin(x[ix[0]])) * A.cos(x[ix[0]]))
        return b, A.sum(A.zip_with(lambda u, v: u * v, b, y))

    kp = _kernel_program(f, x, y)
    gens = [s for s in kp.body.steps if isinstance(s, KGenerate)]
    assert gens and all(o.type.rank == 1 for s in gens for o in s.outs)
    kg = _kernel_program(g, x, y)
    assert any(o.type.rank == 2 for s in kg.body.steps if isinstance(s, KGenerate)
               for o in s.outs)
    for prog in (f, g):
        want = A.run(prog, x, y, backend="interpreter")
        for backend in ("fused", "cpu"):
            for w, got in zip(want, A.run(prog, x, y, backend=backend)):
                np.testing.assert_allclose(got, w, rtol=1e-12, atol=1e-12)


def test_attention_gradient_keeps_no_array_over_the_whole_domain():
    """Softmax attention written with ``generate``: the gradient's contributions over
    the (T, T, d) domain are neither kept as one wide tuple array (``simplify.split``
    weighs their write and read traffic) nor as a broadcast of the scores' adjoint
    (``narrow_broadcasts``); every product in it is a contraction."""
    q, k, v = (RNG.standard_normal((6, 3)) for _ in range(3))
    kp = _kernel_program(A.gradientA(nn.attention_generate, wrt=(0, 1, 2)), q, k, v)
    ranks = [o.type.rank for s in kp.body.steps if isinstance(s, KGenerate) for o in s.outs]
    assert max(ranks) <= 2
    folds = [s for s in kp.body.steps if isinstance(s, KFold)]
    assert sum(contraction(s) is not None for s in folds) == 6


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86 assembly")
def test_transposed_matrix_vector_product_compiles_to_vector_instructions(blas_always):
    """``X^T r`` (the least-squares gradient) is a loop of ``axpy`` over X's rows
    (``contract._axpy_rows``); with its positions written as non-negative (``at``),
    numba drops the negative-index wraparound and LLVM vectorizes it: 0.69 -> 0.14 ms
    for X of 2000 x 500."""
    from accel.backends.cpu import prepare_kernels
    from kernel_builders import kernel_asm
    x, w, y = RNG.standard_normal((40, 24)), RNG.standard_normal(24), RNG.standard_normal(40)
    g = A.gradientA(linalg.lstsq_generate, wrt=1)
    sig = tuple(arg_type(a, i) for i, a in enumerate((x, w, y)))
    runner = prepare_kernels(fuse(optimise(trace_program(g, sig))))
    np.testing.assert_allclose(runner([x, w, y]), x.T @ (x @ w - y), rtol=1e-12)
    (name,) = [n for n in vars(runner.module) if re.fullmatch(r"k\d+_mm", n)
               and "for kk" in inspect.getsource(getattr(runner.module, n).py_func)]
    _, asm = kernel_asm(runner, name)
    packed = len(re.findall(r"\bv(?:mul|add|fmadd\d+)pd\s[^\n]*%[yz]mm", asm))
    assert packed >= 2, f"axpy not vectorized: {packed} packed"


def test_strided_batched_matrix_vector_products_compute_every_row(blas_always):
    """``out[k, d] = sum_n a[n, k, d] * v[n, k]``: a batch (k) inside the operands, whose
    ``mm`` gathers through strides by (batch, row) tasks, and a matrix laid out (K, P)
    per batch, whose unstrided ``mm`` would run whole batches: the host must count the
    strided tasks (it counted batches, leaving rows of the output unwritten; found as
    NaNs in the corpus GMM's backpermute gradient)."""
    def f(a, v):
        n, k, d = a.shape
        return A.sum(A.generate((k, d, n), lambda ix: a[ix[2], ix[0], ix[1]] * v[ix[2], ix[0]]))
    a, v = RNG.standard_normal((40, 7, 9)), RNG.standard_normal((40, 7))
    assert contraction(_folds(f, a, v)[0]) is not None
    c = A.compile(f)
    for _ in range(3):  # buffers from the pool hold earlier results: rows must be written
        np.testing.assert_allclose(c(a, v), np.einsum("nkd,nk->kd", a, v), rtol=1e-12)
    assert any(k.startswith("mm_") for k in c.stats(a, v)["launches"])


@pytest.mark.parametrize("out_order", ["mn", "nm"])
@pytest.mark.parametrize("k", [1024, 4099])
def test_long_sums_down_both_arrays_split_into_chunks(out_order, k):
    """``out = X^T Y`` with both operands laid out (K, .) (the gradient of a product with
    respect to its right operand): the sum splits into ``MM_SUM_CHUNKS`` BLAS calls on
    contiguous row slices (phase ``mmk``), added in order (``mmc``), then scaled."""
    a, b = RNG.standard_normal((k, 6)), RNG.standard_normal((k, 9))
    f = _gen_product(out_order, "km", "kn", lambda p, a: p * 0.5)
    c = A.compile(f, tiered=False)
    np.testing.assert_allclose(c(a, b), 0.5 * _np_product(a, b, out_order, "km", "kn"),
                               rtol=1e-12, atol=1e-12)
    assert any(x.startswith("mmk") for x in c.stats(a, b)["launches"])


def test_a_split_sum_applies_the_factors_of_the_output_index():
    """``out[p, q] = w[p] * sum_k x[k, p] * y[k, q]``: the factor ``w[p]`` multiplies each
    output element after the chunks' partials are added."""
    x, y, w = RNG.standard_normal((3000, 5)), RNG.standard_normal((3000, 7)), \
        RNG.standard_normal(5)

    def f(x, y, w):
        return A.sum(A.generate((x.shape[1], y.shape[1], x.shape[0]),
                                lambda ix: x[ix[2], ix[0]] * y[ix[2], ix[1]] * w[ix[0]]))
    (s,) = _folds(f, x, y, w)
    assert contraction(s).post
    c = A.compile(f, tiered=False)
    np.testing.assert_allclose(c(x, y, w), w[:, None] * (x.T @ y), rtol=1e-12, atol=1e-12)
    assert any(k.startswith("mmk") for k in c.stats(x, y, w)["launches"])


def test_the_gradient_of_a_tall_product_splits_the_sum_of_its_right_operand():
    a, b = RNG.standard_normal((2500, 8)), RNG.standard_normal((8, 8))
    g = A.compile(A.gradientA(linalg.matmul_replicate, wrt=(0, 1)), tiered=False)
    da, db = g(a, b)
    y2 = 2 * (a @ b)
    np.testing.assert_allclose(db, a.T @ y2, rtol=1e-11, atol=1e-11)
    np.testing.assert_allclose(da, y2 @ b.T, rtol=1e-11, atol=1e-11)
    assert any(k.startswith("mmk") for k in g.stats(a, b)["launches"])
