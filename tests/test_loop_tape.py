"""The loop tape of ``awhile`` in reverse mode: written in place, sized T/k, exact.

The tape is a loop-carried array written one row per iteration by a ``permute``;
``fusion.inplace`` marks that permute as updating the (dead) tape in place, so an
iteration costs O(state), not O(tape).  These tests check the mark, that the cpu
backend honours it (no per-iteration copy of the defaults, arguments untouched),
the tape's size with checkpoints, and that the gradient is the same with and
without them.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import accel as A
from accel.backends import fused as numpy_eval
from accel.fusion.fuse import fuse
from accel.fusion.kernels import KAwhile, KPermute
from accel.frontend import arg_type, trace_program
from accel.pipeline import optimise


def _rnn(T, every=None):
    """``h <- tanh(W * h + xs[t])`` for T steps, loss ``sum(h^2)`` (state ``(t, h)``)."""
    def loss(W, h0, xs):
        def body(s):
            t, h = s
            tt = A.the(t)
            return (A.unit(tt + 1), A.generate((A.size(h),),
                                               lambda i: A.tanh(W[i] * h[i] + xs[tt, i])))
        _, h = A.awhile(lambda s: A.unit(A.the(s[0]) < T), body, (A.unit(0), h0),
                        checkpoint=every)
        return A.sum(A.map(lambda v: v * v, h))
    return loss


def _args(T, m=4, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.normal(size=m) * 0.7, rng.normal(size=m), rng.normal(size=(T, m))]


def _kernels(f, args):
    return fuse(optimise(trace_program(f, tuple(arg_type(a, i) for i, a in enumerate(args)))))


def _loops(block):
    for s in block.steps:
        if isinstance(s, KAwhile):
            yield s
            yield from _loops(s.body)


def test_tape_permute_is_marked_in_place():
    args = _args(5)
    kp = _kernels(A.gradientA(_rnn(5), wrt=(0, 1)), args)
    taped = [w for w in _loops(kp.body) if w.owned]
    assert taped, "the taped loop updates its tape in place"
    for w in taped:
        marked = [s for s in w.body.steps if isinstance(s, KPermute) and s.into is not None]
        assert {s.into.name for s in marked} == set(w.owned)


def test_permute_into_a_live_array_is_not_marked():
    def f(a, b):  # ``a`` is read after the permute: it must be copied
        p = A.permute(lambda x, y: x + y, a, lambda i: i, b)
        return A.zip_with(lambda u, v: u * v, p, a)
    args = [np.arange(3.0), np.ones(3)]
    kp = _kernels(f, args)
    assert all(s.into is None for s in kp.body.steps if isinstance(s, KPermute))
    np.testing.assert_array_equal(A.run(f, *args, backend="cpu"),
                                  A.run(f, *args, backend="interpreter"))


@pytest.mark.parametrize("every,T", [(None, 7), (1, 7), (3, 7), (3, 9), (4, 1), (2, 0)])
def test_tape_rows_are_trip_count_over_checkpoint(monkeypatch, every, T):
    """The taped loop's tape has ceil(T / every) rows (measured on the fused NumPy backend);
    without checkpoints the reverse sweep is given each step's result (the next state on
    the tape) and no longer recomputes the body, which read the counter: it is not
    taped."""
    args = _args(T)
    kp = _kernels(A.gradientA(_rnn(T, every), wrt=(0, 1)), args)
    taped = next(w for w in _loops(kp.body) if w.owned)  # the primal's taped loop
    tapes = set(taped.owned)  # (the dual loop comes later: its adjoint accumulators)
    seen: dict = {}
    step = numpy_eval._step

    def spy(s, aenv):
        step(s, aenv)
        if isinstance(s, KAwhile):
            for p, o in zip(s.params, s.outs):
                if p.name in tapes:
                    seen[p.name] = aenv[o.name].shape
    monkeypatch.setattr(numpy_eval, "_step", spy)
    numpy_eval.evaluate(kp, args)
    rows = math.ceil(T / (every or 1))
    if (every or 1) == 1:  # the dual reads h_{t+1} off the tape instead of recomputing
        assert sorted(seen.values()) == [(rows, 4)], seen  # the body: nor does it read t
    else:
        assert sorted(seen.values()) == [(rows,), (rows, 4)], seen  # the counter, h


def test_gradient_exact_with_and_without_checkpoints():
    """Every checkpoint interval on the interpreter; on the cpu (a numba compilation
    each) one per kind of tape: every step kept (1), a remainder (3: 7 = 2 * 3 + 1),
    one checkpoint (10 > T; 7 = T is the same one-row tape)."""
    args = _args(7, m=5, seed=3)
    want = A.run(A.gradientA(_rnn(7), wrt=(0, 1)), *args, backend="interpreter")
    for every in (1, 2, 3, 7, 10):
        for backend in ("interpreter",) + (("cpu",) if every in (1, 3, 10) else ()):
            got = A.run(A.gradientA(_rnn(7, every), wrt=(0, 1)), *args, backend=backend)
            for g, w in zip(got, want):
                np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-14)
    assert A.check_grad(_rnn(7, 3), *args, backend="cpu", rtol=1e-5, atol=1e-8)


def test_cpu_skips_the_defaults_copy_inside_loops():
    """Neither the tape write nor the accumulation of ``W``'s adjoint launches a kernel
    over the whole tape per iteration: no defaults copy (phase ``d``) and no winners
    merge (phase ``m``) at all, and the tape write (``h``'s: the reverse sweep reads the
    next state rather than recompute the body, so the counter is not taped) scatters its
    row serially in source order (phase ``s``), one per taped iteration."""
    counts = []
    for T in (4, 12):
        c = A.compile(A.gradientA(_rnn(T), wrt=(0, 1)), backend="cpu")
        c(*_args(T))
        launches = c.stats(*_args(T))["launches"]
        assert not [k for k in launches if k[:2] in ("d_", "m_")], launches
        counts.append(launches.get("s_serial", 0))
    assert counts[1] - counts[0] == 12 - 4


def test_user_scatter_into_loop_carried_array_leaves_arguments_alone():
    """A user's loop writing one row per step into a carried array, in place on the cpu;
    the argument it starts from is not modified, and a zero-trip loop returns it."""
    def f(acc0, x):
        def body(s):
            t, acc = s
            tt = A.the(t)
            row = A.map(lambda v: v * A.to_float(tt + 1), x)
            return (A.unit(tt + 1), A.permute(lambda a, b: a, acc,
                                              lambda j: (tt, j), row))
        return A.awhile(lambda s: A.unit(A.the(s[0]) < A.size(acc0) // 3),
                        body, (A.unit(0), acc0))[1]
    for rows in (0, 2, 5):
        acc0 = np.arange(rows * 3.0).reshape(rows, 3) if rows else np.zeros((0, 3))
        x = np.array([1.0, 2.0, 3.0])
        keep = acc0.copy()
        got = A.run(f, acc0, x, backend="cpu")
        np.testing.assert_array_equal(acc0, keep)
        np.testing.assert_array_equal(got, A.run(f, acc0, x, backend="interpreter"))


def _matrix_rnn(every=None):
    """``h <- tanh(W h + b)`` with ``W h`` a fold over rows (as the corpus RNN writes it)."""
    def loss(W, b, h0):
        n = h0.shape[0]

        def body(s):
            t, h = s
            wh = A.sum(A.zip_with(lambda u, v: u * v, W, A.replicate((n, A.All), h)))
            return A.unit(A.the(t) + 1), A.map(A.tanh, A.zip_with(lambda u, v: u + v, wh, b))
        _, h = A.awhile(lambda s: A.unit(A.the(s[0]) < 6), body, (A.unit(0), h0),
                        checkpoint=every)
        return A.sum_all(A.map(lambda v: v * v, h))
    return loss


def _dual_folds(kp) -> list:
    """The folds of each loop body of ``kp``, in order (the primal's, then the dual's)."""
    from accel.fusion.kernels import KFold
    return [sum(isinstance(s, KFold) for s in w.body.steps) for w in _loops(kp.body)]


def test_reverse_sweep_reads_the_next_state_instead_of_recomputing_the_body():
    """Without checkpoints the reverse sweep is given each step's result, state k + 1 off
    the tape (the loop's result for the last step): ``tanh``'s derivative reads it, and
    the body's matrix-vector product is not recomputed (one fold left in the dual body,
    ``W^T g``).  With checkpoints the states between them are recomputed, the body
    too.  Both give the same gradient, equal to differences on the cpu."""
    rng = np.random.default_rng(5)
    args = [rng.normal(size=(5, 5)) * 0.4, rng.normal(size=5) * 0.1, rng.normal(size=5)]
    folds = {every: _dual_folds(_kernels(A.gradientA(_matrix_rnn(every), wrt=(0, 1, 2)),
                                         args)) for every in (None, 3)}
    # (loops: counting, taped, dual, and with checkpoints the dual's recomputation)
    assert folds[None] == [0, 1, 1], folds  # the dual loop: W^T g only
    assert folds[3][2] == 2, folds  # W h recomputed for tanh', and W^T g
    want = A.run(A.gradientA(_matrix_rnn(3), wrt=(0, 1, 2)), *args, backend="interpreter")
    for backend in ("interpreter", "cpu"):
        got = A.run(A.gradientA(_matrix_rnn(), wrt=(0, 1, 2)), *args, backend=backend)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-14)
    assert A.check_grad(_matrix_rnn(), *args, backend="cpu", rtol=1e-5, atol=1e-8)
