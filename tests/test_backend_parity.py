"""Backend parity: a curated primal and gradient corpus runs on every available backend
and must agree with the reference interpreter (up to floating-point reassociation).

The corpus is small on purpose: each program is a few numba compilations on the cpu
backend (cached on disk across runs) and a few simulated CUDA launches.
"""

import numpy as np
import pytest

import accel as A
from accel.pipeline import BACKENDS

def _usable(name: str) -> bool:
    if name not in BACKENDS:
        return False
    if name == "cuda":  # numba-cuda installed, and a GPU or the simulator
        from accel.backends.cuda import available
        return available()[0]
    return True


BACKENDS_UNDER_TEST = [b for b in ("fused", "cpu", "cuda") if _usable(b)]
RNG = np.random.default_rng(42)
X = RNG.uniform(-1, 1, size=37)
Y = RNG.uniform(-1, 1, size=29)
M = RNG.uniform(-1, 1, size=(5, 7))
IX = RNG.integers(0, 37, size=11).astype(np.int64)


def loss_mix(a, b, ix):
    y = A.map(lambda v: A.sin(v) * v, a)
    z = A.zip_with(lambda u, v: u * v + A.exp(v * 0.1), y, b)
    g = A.map(lambda j: z[A.min(j, A.size(z) - 1)] * a[j], ix)
    return A.sum_all(A.map(lambda r: r * r, g))


CORPUS = {
    "map_chain": (lambda a: A.map(lambda v: A.sqrt(abs(v)) + A.tanh(v) * 2, a), (X,)),
    "zip_unequal": (lambda a, b: A.zip_with(lambda u, v: u * v - u, a, b), (X, Y)),
    "fold_rows": (lambda m: A.sum(A.map(A.exp, m)), (M,)),
    "fold_all_long": (lambda a: A.fold_all(lambda p, q: p + q, 0.0, A.map(A.cos, a)), (X,)),
    "fold_noncommutative": (lambda m: A.fold1(lambda p, q: (p[0] * q[0], p[0] * q[1] + p[1]),
                                              A.zip(m, A.map(lambda v: v * 0.5, m))), (M,)),
    "scans": (lambda m: (A.scanl(lambda p, q: 0.5 * p + q, 0.0, m),
                         A.scanr1(lambda q, p: q - p, m)), (M,)),
    "permute_hist": (lambda a, ix: A.permute(lambda p, q: p + q, A.fill((5,), 0.0),
                                             lambda i: ix[i % A.size(ix)] % 5, A.map(A.exp, a)),
                     (X, IX)),
    "backpermute_reshape": (lambda m: A.reshape((7, 5), A.transpose(m)), (M,)),
    "replicate_slice": (lambda m: A.slice(A.replicate((3, A.All, A.All), m), (1, A.All, 2)),
                        (M,)),
    "acond_awhile": (lambda a: A.awhile(lambda s: A.unit(A.the(A.sum(A.map(abs, s))) < 100.0),
                                        lambda s: A.map(lambda v: v * 1.7 + 0.1, s),
                                        A.acond(A.the(A.sum(a)) > 0, a, A.map(lambda v: -v, a))),
                     (X,)),
    "cond_while_lanes": (lambda a: A.map(lambda v: A.while_(lambda s: s < 10.0,
                                                            lambda s: s * 2.0 + 1.0,
                                                            A.cond(v > 0, v, -v)), a), (X,)),
    "grad_mix": (A.gradientA(loss_mix, wrt=(0, 1)), (X, Y, IX)),
    "grad_product": (A.gradientA(lambda a: A.the(A.product(A.map(lambda v: v + 1.5, a)))), (X,)),
    "grad_maximum": (A.gradientA(lambda m: A.sum_all(A.maximum(m))), (M,)),
    "grad_scan": (A.gradientA(lambda a: A.sum_all(A.map(lambda v: v * v, A.scanl(
        lambda p, q: p * 0.9 + A.sin(q), 0.0, a)))), (X,)),
}


@pytest.mark.parametrize("backend", BACKENDS_UNDER_TEST)
@pytest.mark.parametrize("name", sorted(CORPUS))
def test_backend_agrees_with_interpreter(backend, name):
    f, args = CORPUS[name]
    saved = [np.copy(a) for a in args]
    want = A.run(f, *args, backend="interpreter")
    got = A.run(f, *args, backend=backend)
    want = want if isinstance(want, tuple) else (want,)
    got = got if isinstance(got, tuple) else (got,)
    flat_w, flat_g = _flatten(want), _flatten(got)
    assert len(flat_w) == len(flat_g)
    for w, g in zip(flat_w, flat_g):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=1e-9, atol=1e-12)
    for a, s in zip(args, saved):
        np.testing.assert_array_equal(a, s)


def _flatten(v):
    if isinstance(v, tuple):
        return [x for i in v for x in _flatten(i)]
    return [np.asarray(v)]
