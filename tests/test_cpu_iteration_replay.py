"""The cpu host's replay of whole loop iterations (``backends/cpu/loopreplay.py``) and
the host's choice of a matrix product whose operand is row ``t`` of an array
(``fusion.contraction.fits`` reads sizes only; the kernel checks the row).

Every test compares with the interpreter, over several calls of one compiled program
(iterations learned in one call are replayed by the next), and checks from ``stats()``
that the replay did run: a test that passed because nothing was replayed proves
nothing."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import accel as A
from accel.backends.cpu import runtime
from accel.errors import OutOfBoundsError
from compiled_helpers import runner_of as _runner, same_as_interpreter


def _same(prog, f, *args):
    return same_as_interpreter(prog, f, *args, tol=1e-11)


def _rnn(w, u, xs, h0):
    """``h <- tanh(W h + U x_t)`` over the rows of ``xs``: matrix-vector products, one
    with row ``t`` of ``xs``."""
    hdim = h0.shape[0]

    def matvec(m, v):
        return A.sum(A.zip_with(lambda a, b: a * b, m, A.replicate((hdim, A.All), v)))

    def body(st):
        h, t = st
        xt = A.slice(xs, (A.the(t), A.All))
        return (A.zip_with(lambda a, b: A.tanh(a + b), matvec(w, h), matvec(u, xt)),
                A.map(lambda i: i + 1, t))
    h, _ = A.awhile(lambda st: A.map(lambda i: i < xs.shape[0], st[1]), body,
                    (h0, A.unit(0)))
    return A.sum_all(A.map(lambda v: v * v, h))


def _rnn_args(rng, steps=30, hdim=128, idim=32):
    return (rng.standard_normal((hdim, hdim)) / np.sqrt(hdim),
            rng.standard_normal((hdim, idim)) / np.sqrt(idim),
            rng.standard_normal((steps, idim)), rng.standard_normal(hdim))


@pytest.mark.parametrize("grad", [False, True], ids=["primal", "gradient"])
def test_iterations_are_replayed_with_each_calls_arrays(grad):
    """After the calls that learn them, iterations run from launch lists, and they read
    the arrays of the call that runs them (other values, same shapes)."""
    f = A.gradientA(_rnn, wrt=(0, 1, 3)) if grad else _rnn
    prog = A.compile(f, backend="cpu", tiered=False)
    rng = np.random.default_rng(3)
    args = _rnn_args(rng)
    for _ in range(3):
        first = _same(prog, f, *args)
    runner = _runner(prog)
    replayed = runner.stats()["replayed_iterations"]
    loops = 3 if grad else 1  # the gradient's counting, forward and reverse loops
    assert replayed >= loops * 30
    other = _same(prog, f, *_rnn_args(rng))
    assert runner.stats()["replayed_iterations"] - replayed >= loops * 30
    assert not np.allclose(np.asarray(other[0]), np.asarray(first[0]))
    _same(prog, f, *_rnn_args(rng, steps=7))  # other shapes: learned again


def test_released_buffers_forget_learned_iterations():
    """``release_buffers`` drops the loop replays' arenas; later calls learn again and
    the counts in ``stats`` keep what ran before."""
    prog = A.compile(_rnn, backend="cpu", tiered=False)
    rng = np.random.default_rng(9)
    args = _rnn_args(rng, steps=20, hdim=32, idim=8)
    for _ in range(2):
        _same(prog, _rnn, *args)
    runner = _runner(prog)
    before = runner.stats()
    assert before["replay_arena_bytes"] > 0
    prog.release_buffers()
    after = runner.stats()
    assert after["replay_arena_bytes"] == 0
    assert after["replayed_iterations"] == before["replayed_iterations"] > 0
    assert after["launches"] == before["launches"]
    for _ in range(2):
        _same(prog, _rnn, *args)
    assert runner.stats()["replay_arena_bytes"] > 0
    assert runner.stats()["replayed_iterations"] > before["replayed_iterations"]


def test_a_product_with_row_t_of_an_array_is_planned_once():
    """``fits`` reads no element: the matrix-vector product with row ``t`` keeps one
    plan for every ``t`` (it was planned at every iteration)."""
    prog = A.compile(_rnn, backend="cpu", tiered=False)
    args = _rnn_args(np.random.default_rng(4), steps=40)
    _same(prog, _rnn, *args)
    assert _runner(prog).stats()["planned_steps"] < 12


@pytest.mark.parametrize("check_bounds", [False, True])
def test_a_products_row_out_of_bounds_is_reported(check_bounds):
    """The row's bounds are checked in the product's kernel, checked or not, and
    reported as the interpreter reports them."""
    def f(w, xs, k):
        row = A.slice(xs, (A.to_int(k[0]), A.All))
        return A.sum(A.zip_with(lambda a, b: a * b, w, A.replicate((256, A.All), row)))
    prog = A.compile(f, backend="cpu", check_bounds=check_bounds, tiered=False)
    rng = np.random.default_rng(5)
    w, xs = rng.standard_normal((256, 32)), rng.standard_normal((10, 32))
    _same(prog, f, w, xs, np.array([9.0]))
    assert _runner(prog).stats()["launches"].get("mm_serial", 0) + \
        _runner(prog).stats()["launches"].get("mm_parallel", 0) >= 1  # BLAS ran
    for k in (10.0, -1.0):
        with pytest.raises(OutOfBoundsError, match=r"index into array .*\(10, 32\)"):
            prog(w, xs, np.array([k]))
        with pytest.raises(OutOfBoundsError):
            A.run(f, w, xs, np.array([k]), backend="interpreter")
    _same(prog, f, w, xs, np.array([3.0]))


def test_replayed_launches_are_counted_as_walked():
    """``stats()["launches"]`` counts a replayed iteration's launches as the walk does.
    (The gradient program and sizes of ``test_iterations_are_replayed_with_each_calls_arrays``:
    run after it, its kernels are in numba's cache: not another 15 s of compilation.)"""
    args = _rnn_args(np.random.default_rng(3))
    f = A.gradientA(_rnn, wrt=(0, 1, 3))
    want = A.run(f, *args, backend="interpreter")
    counts = []
    for replay in (True, False):
        saved = runtime.replayable
        if not replay:
            runtime.replayable = lambda s, launches: False
        try:
            prog = A.compile(f, backend="cpu", tiered=False)
            for _ in range(3):
                same_as_interpreter(prog, f, *args, tol=1e-11, want=want)
            stats = _runner(prog).stats()
        finally:
            runtime.replayable = saved
        assert (stats["replayed_iterations"] > 0) == replay
        counts.append(stats["launches"])
    assert counts[0] == counts[1]


def _outer_inner(x, k):
    """An inner loop of fixed shapes (replayable) inside an outer loop whose body also
    has a reduction: the inner loop's result becomes the outer state, which the next
    run of the inner loop must not overwrite."""
    def inner(y):
        def body(st):
            j, z = st
            return (A.unit(A.the(j) + 1),
                    A.map(lambda v: 0.9 * v + A.to_float(A.the(j)) * 0.01, z))
        return A.awhile(lambda st: A.unit(A.the(st[0]) < A.to_int(k[0])), body,
                        (A.unit(0), y))[1]

    def outer_body(st):
        t, y, acc = st
        z = inner(y)
        return (A.unit(A.the(t) + 1), z,
                A.zip_with(lambda a, b: a + b, acc, A.sum_all(A.zip_with(
                    lambda a, b: a * b, z, y))))
    return A.awhile(lambda st: A.unit(A.the(st[0]) < 6), outer_body,
                    (A.unit(0), x, A.unit(0.0)))


def test_inner_loop_replayed_inside_an_outer_loop():
    prog = A.compile(_outer_inner, backend="cpu", tiered=False)
    x = np.linspace(-1.0, 1.0, 9000)  # pooled buffers
    for k in (5.0, 5.0, 5.0, 2.0, 7.0):
        _same(prog, _outer_inner, x, np.array([k]))
    assert _runner(prog).stats()["replayed_iterations"] > 20
    kept = prog(x, np.array([5.0]))
    prog(x + 1.0, np.array([5.0]))  # the first call's results stay as they were
    want = A.run(_outer_inner, x, np.array([5.0]), backend="interpreter")
    for g, w in zip(kept, want):
        np.testing.assert_allclose(g, w, rtol=1e-12)


def test_a_replayed_iterations_bounds_error_names_the_array():
    def f(x, k):
        def body(st):
            t, s = st
            return (A.unit(A.the(t) + 1),
                    A.generate((A.size(s),), lambda i: s[i + A.the(t) // A.to_int(k[0])]
                               * 0.5))
        return A.awhile(lambda st: A.unit(A.the(st[0]) < 8), body, (A.unit(0), x))[1]
    prog = A.compile(f, backend="cpu", check_bounds=True, tiered=False)
    x = np.arange(6.0)
    for _ in range(3):
        _same(prog, f, x, np.array([100.0]))
    assert _runner(prog).stats()["replayed_iterations"] > 0
    with pytest.raises(OutOfBoundsError, match=r"index \(6,\) is out of bounds for shape \(6,\)"):
        prog(x, np.array([3.0]))  # t = 3: i + 1 reads s[6]
    _same(prog, f, x, np.array([100.0]))


def test_threads_calling_one_program_replay_or_walk_alike():
    """The replay's arena serves one call at a time; a concurrent call walks."""
    prog = A.compile(_rnn, backend="cpu", tiered=False)
    rng = np.random.default_rng(8)
    argsets = [_rnn_args(rng, steps=25, hdim=64, idim=16) for _ in range(4)]
    wants = [A.run(_rnn, *a, backend="interpreter") for a in argsets]
    prog(*argsets[0])
    errors = []

    def work(i):
        try:
            for _ in range(15):
                np.testing.assert_allclose(prog(*argsets[i]), wants[i], rtol=1e-11)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)
    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert _runner(prog).stats()["replayed_iterations"] > 0


def _ragged(h0, ks, scale):
    """A state whose length the host reads from ``ks[t]`` (an array bound outside the
    loop, read at the counter): the replay's key (shapes, counter), its checks of
    outer elements and its variants learned in other calls are all exercised."""
    def body(st):
        t, h = st
        n = A.to_int(ks[A.the(t)])
        m = A.size(h)
        return (A.unit(A.the(t) + 1),
                A.generate((n,), lambda i: h[A.min(i, m - 1)] * scale[0]
                           + A.to_float(A.the(t)) + A.to_float(i) * 0.25))
    return A.awhile(lambda st: A.unit(A.the(st[0]) < ks.shape[0]), body, (A.unit(0), h0))


_RAGGED = A.compile(_ragged, backend="cpu", tiered=False)


@settings(max_examples=25, deadline=None, derandomize=True)
@given(n0=st.integers(1, 5), ks=st.lists(st.integers(1, 4), min_size=0, max_size=12),
       scale=st.floats(-2.0, 2.0, allow_nan=False), calls=st.integers(1, 3))
def test_replayed_iterations_match_the_interpreter_on_random_inputs(n0, ks, scale, calls):
    """One compiled program, many calls: whatever variants earlier calls learned, every
    call gives the interpreter's result."""
    args = (np.linspace(-1.0, 1.0, n0), np.array(ks, dtype=np.float64),
            np.array([scale]))
    want = A.run(_ragged, *args, backend="interpreter")  # (the same for every call)
    for _ in range(calls):
        same_as_interpreter(_RAGGED, _ragged, *args, want=want)
