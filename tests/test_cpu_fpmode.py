"""``ACCEL_FLUSH_SUBNORMALS`` (``backends/cpu/fpmode``): off by default (subnormals as
NumPy's), on it flushes subnormal inputs and results in every kernel, serial and
parallel, without touching the caller's floating-point mode."""

from __future__ import annotations

import platform

import numpy as np
import pytest

import accel as A
from accel.errors import BackendError
from accel.backends.cpu import fpmode

pytestmark = pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"),
                                reason="the flush modes are x86-64 MXCSR bits")

TINY = np.finfo(np.float64).tiny  # the smallest normal float64


def _scale(by):
    return lambda x: A.map(lambda v: v * by, x)


def _source(f, *args) -> str:
    """The generated module of ``f`` (an ``A.compile`` result) for these arguments."""
    return f._entry(list(args))[1].source()


def _subnormal_count(a) -> int:
    return int(np.count_nonzero((a != 0) & (np.abs(a) < TINY)))


@pytest.fixture
def flush(monkeypatch):
    monkeypatch.setenv(fpmode.ENV, "1")


def test_subnormals_are_exact_by_default(monkeypatch):
    monkeypatch.delenv(fpmode.ENV, raising=False)
    x = np.full(50_000, 1e-10)
    got = A.run(_scale(1e-300), x)
    np.testing.assert_array_equal(got, x * 1e-300)
    assert _subnormal_count(got) == x.size
    assert "_flush_subnormals_on" not in _source(A.compile(_scale(1e-300)), x)


def test_results_and_inputs_flush_in_serial_and_parallel_kernels(flush, small_parallel):
    big, small = np.full(50_000, 1e-10), np.full(10, 1e-10)
    f = A.compile(_scale(1e-300))
    assert "_flush_subnormals_on" in _source(f, big)
    for x, launch in ((big, "g_parallel"), (small, "g_serial")):
        got = f(x)
        assert f.stats(x)["launches"].get(launch), f.stats(x)["launches"]
        np.testing.assert_array_equal(got, np.zeros_like(x))  # FTZ: results
    sub = np.full(50_000, 5e-310)
    sub[::7] = 1.0
    got = A.run(_scale(1e10), sub)  # DAZ: a subnormal input reads as 0
    np.testing.assert_array_equal(got, np.where(sub == 1.0, 1e10, 0.0))


def test_callers_floating_point_mode_is_untouched(flush):
    A.run(_scale(1e-300), np.full(50_000, 1e-10))
    assert np.float64(1e-10) * np.float64(1e-300) == 1e-310  # this thread still exact
    assert _subnormal_count(np.full(8, 1e-10) * 1e-300) == 8


def test_normal_results_do_not_change(flush, monkeypatch):
    """A gradient through exp and a sum of products, with and without flushing: the
    same bits wherever no subnormal is involved."""
    rng = np.random.default_rng(3)
    x, w = rng.normal(size=(300, 24)), rng.normal(size=(24,))

    def loss(x, w):
        y = A.sum(A.zip_with(lambda a, b: a * b, x, A.replicate((300, A.All), w)))
        return A.sum_all(A.map(lambda v: A.exp(-v * v), y))

    grad = A.gradientA(loss, wrt=(0, 1))
    flushed = A.run(grad, x, w)
    monkeypatch.delenv(fpmode.ENV)
    exact = A.run(grad, x, w)
    for a, b in zip(flushed, exact):
        assert _subnormal_count(b) == 0
        np.testing.assert_array_equal(a, b)


def test_exp_underflows_to_zero(flush):
    x = np.array([-720.0, -745.0, -708.0, 0.0, 1.0])
    want = np.exp(x)
    assert _subnormal_count(want) == 2
    got = A.run(lambda v: A.map(A.exp, v), x)
    np.testing.assert_array_equal(got, np.where(want < TINY, 0.0, want))


@pytest.mark.parametrize("value", ["maybe", "2"])
def test_bad_setting_is_a_backend_error(monkeypatch, value):
    monkeypatch.setenv(fpmode.ENV, value)
    with pytest.raises(BackendError, match="ACCEL_FLUSH_SUBNORMALS"):
        A.run(_scale(2.0), np.ones(3))


def test_other_machines_are_refused(monkeypatch, flush):
    monkeypatch.setattr(fpmode.platform, "machine", lambda: "aarch64")
    with pytest.raises(BackendError, match="x86-64.*aarch64"):
        A.run(_scale(3.0), np.ones(3))
    monkeypatch.setenv(fpmode.ENV, "0")
    np.testing.assert_array_equal(A.run(_scale(3.0), np.ones(3)), np.full(3, 3.0))
