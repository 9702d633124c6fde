"""GradBench's ``particle`` and ``saddle`` (nested AD) against NumPy references.

Each eval function is a gradient descent whose gradient is taken *through* a loop that
takes gradients itself.  The nested derivatives (``naive_euler``'s derivative through the
Euler loop, ``r1_cost``'s through the inner search) are checked in all four mode pairs
against central differences of a NumPy re-implementation, and whole runs against the
same descent in NumPy with a larger step and tolerance, so they stay small on the
interpreter (tens of seconds in all: every step of these loops is a Python-level step
there).  GradBench's runner validates the evals' real settings
against their golden values.
"""

import numpy as np
import pytest

import accel as A
from accel.adbench.gradbench import particle, saddle
from accel.adbench.gradbench.descent import argmax, grad_f, grad_r
from accel.adbench.gradbench.protocol import Tool

MODES = ["rr", "ff", "fr", "rf"]
FAST = {"eta0": 0.05, "tol": 1e-3}   # a few dozen descent steps instead of hundreds
PARTICLE_FAST = {"eta0": 0.01, "tol": 0.05}   # two or three descent steps


def np_argmin(grad, f, x, eta0=1e-5, tol=1e-5):
    """GradBench's descent, as every tool implements it."""
    fx, gx, eta, i = f(x), grad(x), eta0, 0
    while True:
        if np.linalg.norm(gx) <= tol:
            return x
        if i == 10:
            eta, i = 2 * eta, 0
            continue
        xp = x - eta * gx
        if np.linalg.norm(x - xp) <= tol:
            return x
        fxp = f(xp)
        if fxp < fx:
            x, fx, gx, i = xp, fxp, grad(xp), i + 1
        else:
            eta, i = eta / 2, 0


def central(f, x, h=1e-6):
    return np.array([(f(x + h * e) - f(x - h * e)) / (2 * h) for e in np.eye(len(x))])


def np_euler(w):
    ch = np.array([[10.0, 10.0 - w], [10.0, 0.0]])
    x, xd, dt = np.array([0.0, 8.0]), np.array([0.75, 0.0]), 0.1
    while True:
        d = x - ch
        grad_p = -(d / np.sqrt((d ** 2).sum(1))[:, None] ** 3).sum(0)
        xn = x + dt * xd
        if xn[1] <= 0:
            break
        x, xd = xn, xd - dt * grad_p
    xf = x[0] - x[1] / xd[1] * xd[0]
    return xf * xf


def outer_gradient(mode, f):
    """The gradient program of ``f`` (a program of one vector) in ``mode``."""
    if mode == "r":
        return lambda x: grad_r(f, x)
    return lambda x: grad_f(1)(f, x)


# --------------------------------------------------------------------------- particle


@pytest.mark.parametrize("mode", MODES)
def test_particle_nested_derivative(mode):
    """d/dw of the Euler loop (which takes the potential's gradient every step)."""
    backend = "interpreter"
    f = particle.naive_euler(mode[1])
    # compiled once, run at both points (tracing the nested gradient costs as much as a run)
    run_f = A.compile(f, backend=backend)
    run_g = A.compile(outer_gradient(mode[0], f), backend=backend)
    # both points in forward-outer modes; the slow reverse-outer modes (a run on the
    # interpreter costs 5-10 s) take one each, between them both points
    for w in {"rr": (0.4,), "rf": (0.0,)}.get(mode, (0.0, 0.4)):
        x = np.array([w])
        np.testing.assert_allclose(run_f(x), np_euler(w), rtol=1e-12)
        want = central(lambda v: np_euler(v[0]), x)
        got = run_g(x)
        np.testing.assert_allclose(np.reshape(got, -1), want, rtol=1e-6)


@pytest.mark.parametrize("mode", ["ff"])   # the others: nested_derivative (time)
def test_particle_whole_run_matches_numpy_descent(mode):
    want = np_argmin(lambda v: central(lambda u: np_euler(u[0]), v), lambda v: np_euler(v[0]),
                     np.array([0.0]), **PARTICLE_FAST)
    got = A.run(particle.program(mode[0], mode[1], **PARTICLE_FAST), np.array([0.0]),
                backend="interpreter")
    np.testing.assert_allclose(got, want, rtol=1e-6)


# --------------------------------------------------------------------------- saddle


def r1_cost(inner):
    def f(p, start):
        return saddle.objective(p, argmax(saddle.MODES[inner],
                                          lambda q, p1: saddle.objective(p1, q),
                                          start, p, **FAST))
    return f


def np_r1_cost(p, start):
    q = np_argmin(lambda q: 2 * q, lambda q: q @ q - p @ p, start, **FAST)
    return p @ p - q @ q


@pytest.mark.parametrize("mode", MODES)
def test_saddle_nested_derivative(mode):
    """d/dp of the inner search (which takes gradients of f every step)."""
    f = r1_cost(mode[1])
    p, start = np.array([0.7, -0.4]), np.array([1.0, 1.0])
    np.testing.assert_allclose(A.run(f, p, start, backend="interpreter"),
                               np_r1_cost(p, start), rtol=1e-12)
    want = central(lambda v: np_r1_cost(v, start), p)
    if mode[0] == "r":
        got = A.run(A.gradientA(f, wrt=0), p, start, backend="interpreter")
    else:
        got = A.run(lambda a, s: grad_f(2)(f, a, s), p, start, backend="interpreter")
    np.testing.assert_allclose(got, want, rtol=1e-6)
    np.testing.assert_allclose(got, 2 * p, rtol=1e-12)  # the inner argmax ignores p


@pytest.mark.parametrize("mode", ["ff"])   # the others: nested_derivative (time)
def test_saddle_whole_run_matches_numpy_descent(mode):
    start = np.array([1.0, 0.6])
    r1 = np_argmin(lambda p: 2 * p, lambda p: np_r1_cost(p, start), start, **FAST)
    r2 = np_argmin(lambda q: 2 * q, lambda q: q @ q - r1 @ r1, start, **FAST)
    got = A.run(saddle.program(mode[0], mode[1], **FAST), start, backend="interpreter")
    np.testing.assert_allclose(got, np.concatenate([r1, r2]), rtol=1e-10, atol=1e-14)


# --------------------------------------------------------------------------- the tool


def test_tool_serves_both_and_rejects_bad_input():
    tool = Tool()
    for m in ("particle", "saddle"):
        assert tool.handle({"id": 0, "kind": "define", "module": m})["success"]
    for module, inp in (("particle", {"w": "x"}), ("particle", {}),
                        ("saddle", {"start": [1.0]}), ("saddle", {"start": [[1.0, 2.0]]})):
        r = tool.handle({"id": 1, "kind": "evaluate", "module": module, "function": "rr",
                         "input": inp})
        assert r["id"] == 1 and not r["success"], r
    assert sorted(particle.FUNCTIONS) == sorted(saddle.FUNCTIONS) == sorted(MODES)


def test_shape_facts_of_nested_loops_are_walked_once(monkeypatch):
    """The simplifier's dimension trees of tuple terms are remembered (``ShapeFacts``):
    the saddle's second-order program projects from let-bound tuples of tuples in
    nested loops, and walking them afresh at every projection made about 20 million
    walks (84 s); with the memo, about 7,000."""
    from accel.simplify.shapes import ShapeFacts
    walks = [0]
    walk = ShapeFacts._tree_dims

    def counted(self, a, t):
        walks[0] += 1
        return walk(self, a, t)
    monkeypatch.setattr(ShapeFacts, "_tree_dims", counted)
    f = r1_cost("r")
    p, start = np.array([0.7, -0.4]), np.array([1.0, 1.0])
    got = A.run(A.gradientA(f, wrt=0), p, start, backend="interpreter")
    np.testing.assert_allclose(got, 2 * p, rtol=1e-12)
    assert 0 < walks[0] < 100_000, walks[0]  # (0: the program was not simplified here)
