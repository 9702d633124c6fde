"""The cpu backend's straight-line drivers (backends/cpu/straight.py): a program whose
plan depends only on its arguments replays it as a precomputed list of kernel calls;
every other case (changed sizes, a bounds failure, a busy arena, data-dependent plans,
control flow) must still give the interpreter's results through the step-by-step path."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import accel as A
from accel.errors import OutOfBoundsError


def _runner(prog):
    (runner,) = [r for _, r in prog._cache.values()]
    return runner


def _sizes_from_argument(x, c):
    n = A.to_int(c[0])
    ys = A.generate((n, x.shape[0]), lambda ix: x[ix[1]] * A.to_float(ix[0]) + c[1])
    return A.sum(ys), A.sum(A.transpose(ys))


def test_driver_runs_replayed_calls_and_replans_when_a_read_element_changes():
    prog = A.compile(_sizes_from_argument, backend="cpu")
    x = np.linspace(1.0, 2.0, 7)
    for n, shift in ((3, 0.0), (3, 1.0), (3, 2.0), (5, 0.5), (5, -1.0), (3, 4.0), (0, 1.0)):
        c = np.array([float(n), shift])
        got = prog(x, c)
        want = A.run(_sizes_from_argument, x, c, backend="interpreter")
        for g, w in zip(got, want):
            assert g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=1e-13)
    stats = _runner(prog).stats()
    # (3, 1.0), (3, 2.0), (5, -1.0) and the second (3, ...) run on drivers
    assert stats["straight_line_calls"] >= 3


def test_results_of_a_driver_are_fresh_arrays_that_later_calls_do_not_overwrite():
    prog = A.compile(_sizes_from_argument, backend="cpu")
    x = np.arange(4.0)
    outs = [prog(x + k, np.array([3.0, 0.0])) for k in range(4)]
    for k, (a, b) in enumerate(outs):
        want = A.run(_sizes_from_argument, x + k, np.array([3.0, 0.0]), backend="interpreter")
        np.testing.assert_allclose(a, want[0], rtol=1e-13)
        np.testing.assert_allclose(b, want[1], rtol=1e-13)
    assert not np.shares_memory(outs[2][0], outs[3][0])
    assert _runner(prog).stats()["straight_line_calls"] == 3


def _gather(x, idx):
    return A.map(lambda i: x[i] * 2.0, idx)


def test_bounds_failure_on_a_driver_raises_the_step_paths_error_and_recovers():
    prog = A.compile(_gather, backend="cpu", check_bounds=True)
    x = np.arange(5.0)
    ok = np.array([0, 4, 2], dtype=np.int64)
    for _ in range(3):
        np.testing.assert_array_equal(prog(x, ok), x[ok] * 2)
    assert _runner(prog).stats()["straight_line_calls"] == 2
    with pytest.raises(OutOfBoundsError, match=r"index \(7,\) is out of bounds for shape \(5,\)"):
        prog(x, np.array([0, 7, 2], dtype=np.int64))
    np.testing.assert_array_equal(prog(x, ok), x[ok] * 2)
    assert _runner(prog).stats()["straight_line_calls"] == 3  # the replay's flag was reset


def test_concurrent_callers_get_their_own_results():
    """One caller holds the arena; the others run step by step (never a shared buffer)."""
    def f(x):
        y = A.map(lambda v: v * v + 1.0, x)
        return A.sum(A.zip_with(lambda a, b: a * b, y, x))

    prog = A.compile(f, backend="cpu")
    xs = [np.random.default_rng(k).standard_normal(20000) for k in range(8)]
    prog(xs[0])
    prog(xs[0])
    errors = []

    def work(k):
        for _ in range(20):
            got = prog(xs[k])
            want = np.sum((xs[k] ** 2 + 1.0) * xs[k])
            if not np.isclose(got, want, rtol=1e-12):
                errors.append((k, float(got), float(want)))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert _runner(prog).stats()["straight_line_calls"] > 0


def test_no_driver_for_plans_that_read_computed_arrays_or_for_control_flow():
    def computed_size(x):
        n = A.to_int(A.the(A.sum(x)))
        return A.generate((n,), lambda ix: A.to_float(ix[0]))

    def branching(x):
        return A.acond(A.the(A.sum(x)) > 0.0, A.map(lambda v: v + 1.0, x),
                       A.map(lambda v: v - 1.0, x))

    for f, inputs in ((computed_size, [np.array([1.0, 2.0]), np.array([2.0, 3.0])]),
                      (branching, [np.array([1.0, 2.0]), np.array([-3.0, 1.0])])):
        prog = A.compile(f, backend="cpu")
        for x in inputs * 2:
            np.testing.assert_array_equal(prog(x), A.run(f, x, backend="interpreter"))
        assert _runner(prog).stats()["straight_line_calls"] == 0


def test_release_buffers_drops_the_arenas_and_later_calls_rebuild_them():
    prog = A.compile(_sizes_from_argument, backend="cpu")
    x, c = np.arange(6.0), np.array([4.0, 1.0])
    want = A.run(_sizes_from_argument, x, c, backend="interpreter")
    for _ in range(2):
        prog(x, c)
    prog.release_buffers()
    assert not _runner(prog)._straight
    for _ in range(2):
        got = prog(x, c)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-13)
    assert _runner(prog)._straight


def test_replays_call_entry_points_and_kernels_shared_across_dtypes_stay_right():
    """A replay calls a kernel's compiled entry point when it has one specialisation.
    The same kernel text compiled for float64 and then int64 (one module, one
    dispatcher with two specialisations) must keep both signatures' results right."""
    def square(x):  # not v + v: int64 data read as float64 (subnormals) would still
        return A.map(lambda v: v * v, x)  # double right; no constant: one text for both

    f64, i64 = np.arange(6.0), np.arange(6)
    prog64, progi = A.compile(square), A.compile(square)
    for _ in range(3):
        np.testing.assert_array_equal(prog64(f64), f64 * f64)
    (line,) = _runner(prog64)._straight.values()
    (fn, _, _), = line.steps[0][1]
    assert type(fn).__name__ != "CPUDispatcher", fn  # numba's compiled wrapper
    for _ in range(3):
        got = progi(i64)
        assert got.dtype == np.int64
        np.testing.assert_array_equal(got, i64 * i64)
        np.testing.assert_array_equal(prog64(f64 + 1), (f64 + 1) ** 2)
    shared = _runner(prog64).module
    assert _runner(progi).module is shared and len(shared.k0_g.overloads) == 2


def test_replay_updates_dead_defaults_in_place_as_the_first_call():
    """A permute into a dead, owned defaults array (``fusion.inplace``) skips its
    defaults kernel when run step by step; the straight-line replay must skip it too
    (it used to launch it, and so compile it on the second call: 25 s for the GradBench
    det gradient at l = 3)."""
    from accel.adbench.gradbench.det import program
    g = A.compile(A.gradientA(program(3), wrt=0), tiered=False)
    x = np.random.default_rng(0).random(9)

    def defaults_launches():
        return sum(n for k, n in g.stats(x)["launches"].items() if k.startswith("d_"))
    first = g(x)
    d1 = defaults_launches()
    second = g(x)
    assert g.stats(x)["straight_line_calls"] == 1
    assert defaults_launches() == 2 * d1
    np.testing.assert_array_equal(first, second)
    np.testing.assert_allclose(first, np.linalg.det(x.reshape(3, 3))
                               * np.linalg.inv(x.reshape(3, 3)).T.ravel(), rtol=1e-10)
