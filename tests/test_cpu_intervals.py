"""Guards decided for whole blocks of a fold's rows by bounds of their terms over the
block (``backends/cpu/intervals``): the same values as the guarded fold, everywhere
including the borders where the guard fails for some elements of a block."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import accel as A
from accel.backends.cpu import prepare_kernels
from accel.fusion.fuse import fuse
from accel.pipeline import arg_type, optimise, trace_program


def _runner(f, args):
    kp = fuse(optimise(trace_program(f, tuple(arg_type(a, i) for i, a in enumerate(args)))))
    return prepare_kernels(kp, tiered=False)


def conv2d(img, ker):
    kh, kw = ker.shape
    prods = A.generate((img.shape[0] - kh + 1, img.shape[1] - kw + 1, kh, kw),
                       lambda ix: img[ix[0] + ix[2], ix[1] + ix[3]] * ker[ix[2], ix[3]])
    return A.sum_all(A.map(lambda v: v * v, A.sum(A.sum(prods))))


def _conv2d_grad(img, ker):
    """NumPy: y = valid correlation, L = sum y^2, dimg and dker."""
    kh, kw = ker.shape
    oh, ow = img.shape[0] - kh + 1, img.shape[1] - kw + 1
    y = sum(ker[a, b] * img[a:a + oh, b:b + ow] for a in range(kh) for b in range(kw))
    dy = 2 * y
    dimg = np.zeros_like(img)
    dker = np.zeros_like(ker)
    for a in range(kh):
        for b in range(kw):
            dimg[a:a + oh, b:b + ow] += ker[a, b] * dy
            dker[a, b] = (img[a:a + oh, b:b + ow] * dy).sum()
    return dimg, dker


@pytest.fixture(scope="module")
def conv_grad():
    rng = np.random.default_rng(0)
    args = (rng.standard_normal((12, 20)), rng.standard_normal((3, 4)))
    return _runner(A.gradientA(conv2d, wrt=(0, 1)), args)


def test_a_convolutions_image_adjoint_decides_its_window_guard_by_blocks(conv_grad):
    """The image adjoint folds a window guarded by ``0 <= u - a < oh`` and
    ``0 <= v - b < ow``: its blocks are split on the bounds of those terms."""
    assert "inbox" in conv_grad.source()
    rng = np.random.default_rng(1)
    img, ker = rng.standard_normal((40, 70)), rng.standard_normal((5, 5))
    for got, want in zip(conv_grad([img, ker]), _conv2d_grad(img, ker)):
        np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-11)


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(h=st.integers(1, 24), w=st.integers(1, 40), kh=st.integers(1, 7), kw=st.integers(1, 7),
       seed=st.integers(0, 2**16))
def test_window_guards_agree_with_numpy_at_every_shape(conv_grad, h, w, kh, kw, seed):
    """Images smaller than their kernel in one direction (``oh < kh``: the other arm of
    the adjoint's conditional), single rows and columns, blocks cut by the border."""
    kh, kw = min(kh, h), min(kw, w)
    rng = np.random.default_rng(seed)
    img, ker = rng.standard_normal((h, w)), rng.standard_normal((kh, kw))
    for got, want in zip(conv_grad([img, ker]), _conv2d_grad(img, ker)):
        np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-11)


def test_a_causal_window_and_an_unprovable_remainder():
    """``sum_j (if i - j >= 0 then x[i - j] * k[j] else 0)`` is decided in the interior;
    ``(i + j) % 5 < 3`` spans every remainder over a block, so it stays in the loop."""
    def causal(x, k):
        n, m = x.shape[0], k.shape[0]
        return A.sum(A.generate((n, m), lambda ix: A.cond(ix[0] - ix[1] >= 0,
                                                          x[ix[0] - ix[1]] * k[ix[1]], 0.0)))

    def stripes(x, k):
        n, m = x.shape[0], k.shape[0]
        return A.sum(A.generate((n, m), lambda ix: A.cond((ix[0] + ix[1]) % 5 < 3,
                                                          x[ix[0]] * k[ix[1]], 0.0)))

    rng = np.random.default_rng(2)
    x, k = rng.standard_normal(100), rng.standard_normal(9)
    r = _runner(causal, (x, k))
    assert "inbox" in r.source()
    want = np.array([sum(x[i - j] * k[j] for j in range(9) if i - j >= 0) for i in range(100)])
    np.testing.assert_allclose(r([x, k]), want, rtol=1e-12, atol=1e-12)
    for n in (1, 5, 17, 33):
        np.testing.assert_allclose(r([x[:n], k]), want[:n], rtol=1e-12, atol=1e-12)
    s = _runner(stripes, (x, k))
    want = np.array([sum(x[i] * k[j] for j in range(9) if (i + j) % 5 < 3) for i in range(100)])
    np.testing.assert_allclose(s([x, k]), want, rtol=1e-12, atol=1e-12)
