"""Differential testing on random well-typed programs (``tests/strategies.py``).

- the interpreter (the oracle) and every other backend give the same results;
- for differentiable programs (float results summed to a scalar ``loss``): the gradient
  program type-checks, reverse mode == forward mode along random directions == finite
  differences away from kinks, store mode == recompute mode, every backend runs the
  gradient program like the interpreter, and ``<vjp(ct), t> == <ct, jvp(t)>``;
- the gradients differentiate again (reverse over reverse, forward over reverse, finite
  differences of the gradient), for a few programs, scatters among them.

The cpu backend gets few, small, derandomized examples (numba compiles are slow; the
same examples every run hit its disk cache).

Failures print the shrunk program as a runnable reproducer.  The soak
(``python -m accel.testing.soak --n 2000``) runs the same properties on thousands of
programs; the bugs it found are kept in ``tests/regressions/``.
"""

from __future__ import annotations

import collections
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings

import accel as A
from accel.pipeline import BACKENDS
from accel.testing.programs import ALL_FEATURES, ProgramDesc, generate_program
from accel.testing.sources import RandomSource, ReplaySource
from accel.testing.properties import (PropertyFailure, Skip, check_backends, check_gradient,
                                      check_second_order, gradient_typechecks, usable)
from accel.testing.soak import shrink
from strategies import SLOW, programs, slow_settings

ROOT = Path(__file__).resolve().parents[1]
OTHER = [b for b in BACKENDS if b not in ("interpreter", "cpu") and usable(b)]
CPU = usable("cpu")


# --------------------------------------------------------------------------- the generator


def _sample(n, differentiable=False, seed=0):
    return [generate_program(RandomSource(random.Random(f"{seed}:{i}")),
                             differentiable=differentiable) for i in range(n)]


def test_generator_covers_the_whole_language():
    seen = collections.Counter()
    for d in _sample(500) + _sample(200, differentiable=True):
        seen.update(d.features)
    missing = ALL_FEATURES - set(seen)
    assert not missing, f"never generated: {sorted(missing)}"


def test_generated_programs_typecheck_and_are_in_bounds():
    # well-typed and in bounds by construction: the interpreter runs every one of them
    for d in _sample(60, seed=7):
        prog, _ = d.build()
        A.run(prog, *d.args(), backend="interpreter")


def test_differentiable_programs_have_float64_scalar_losses_and_typed_gradients():
    for d in _sample(25, differentiable=True, seed=3):
        _, loss = d.build()
        v = A.run(loss, *d.args(), backend="interpreter")
        assert v.shape == () and v.dtype == np.float64
        wrt = tuple(i for i, x in enumerate(d.inputs) if x.dtype.kind == "f")
        assert wrt and d.inputs[0].dtype == np.float64
        gradient_typechecks(d, wrt)


def test_reproducer_text_runs_and_replay_is_exact():
    d = _sample(1, seed=11)[0]
    ns = {}
    exec(d.reproducer(), ns)
    np.testing.assert_equal(A.run(ns["prog"], *ns["args"], backend="interpreter"),
                            A.run(d.build()[0], *d.args(), backend="interpreter"))
    again = generate_program(ReplaySource(d.choices))
    assert again.source == d.source and again.choices == d.choices
    assert all(np.array_equal(x, y) for x, y in zip(again.inputs, d.inputs))


def test_inputs_are_small():
    for d in _sample(100, seed=5):
        for x in d.inputs:
            assert x.ndim <= 2 and all(n <= 8 for n in x.shape)


def test_shrinker_finds_small_programs():
    def fails(d):
        return "A.scanr(" in d.source and "A.permute(" in d.source

    big = next(d for d in _sample(300, seed=2) if fails(d))
    small, tried = shrink(big, fails, budget=150)
    assert fails(small) and tried <= 150
    assert len(small.source.splitlines()) <= min(8, len(big.source.splitlines()))


# --------------------------------------------------------------------------- properties


@pytest.mark.parametrize("backend", OTHER)
@slow_settings(60)
@given(desc=programs())
def test_backends_agree_with_the_interpreter(backend, desc):
    check_backends(desc, [backend])


# numba compiles take seconds per kernel: few, small, derandomized examples (the same ones
# every run, so that the cpu backend's disk cache makes reruns fast)
@pytest.mark.skipif(not CPU, reason="the cpu backend is not available")
@settings(max_examples=5, derandomize=True, **SLOW)
@given(desc=programs(max_stmts=3))
def test_cpu_backend_agrees_with_the_interpreter(desc):
    check_backends(desc, ["cpu"])


@slow_settings(15)  # each example compiles its program and derivatives on every backend
@given(desc=programs(differentiable=True, max_stmts=5))
def test_reverse_forward_and_finite_differences_agree(desc):
    try:
        check_gradient(desc, backends=OTHER)
    except Skip:
        pass


@pytest.mark.skipif(not CPU, reason="the cpu backend is not available")
@settings(max_examples=2, derandomize=True, **SLOW)
@given(desc=programs(differentiable=True, max_stmts=2))
def test_cpu_backend_runs_gradient_programs_like_the_interpreter(desc):
    try:
        check_gradient(desc, backends=["cpu"], directions=1, modes=("store",))
    except Skip:
        pass


def _scatters(n, seed):
    """The first ``n`` differentiable programs of a seeded sample that scatter
    (``permute (\\new old -> new)``, colliding targets in most of them)."""
    out = []
    for i in range(400):
        d = generate_program(RandomSource(random.Random(f"{seed}:{i}")), differentiable=True,
                             max_stmts=4)
        if "lambda new, old: new" in d.source:
            out.append(d)
            if len(out) == n:
                return out
    raise AssertionError("the generator drew too few scatters")


def test_scatter_programs_on_every_backend():
    # primal and gradient of generated scatters against the interpreter, forward mode and
    # finite differences, on every backend
    for d in _scatters(2, seed=21):
        check_backends(d, OTHER + (["cpu"] if CPU else []))
        try:
            check_gradient(d, backends=OTHER + (["cpu"] if CPU else []), directions=1,
                           modes=("recompute",))
        except Skip:
            pass


def test_gradients_differentiate_again():
    # reverse over reverse and forward over reverse of generated programs (scatters
    # included) against finite differences of the gradient; one on the cpu backend too
    descs = _scatters(2, seed=23) + _sample(2, differentiable=True, seed=29)
    for k, d in enumerate(descs):
        try:
            check_second_order(d, backends=["cpu"] if CPU and k == 0 else ["interpreter"])
        except Skip:
            pass


def test_properties_detect_a_wrong_backend(monkeypatch):
    """The backend property is not vacuous: a backend that perturbs results fails it."""
    import accel.backends.fused as fused
    d = ProgramDesc("def prog(a0):\n    return A.map(lambda x: x * 2.0, a0)\n",
                    (np.arange(3.0),), (("f64", 1),), False)
    check_backends(d, ["fused"])
    orig = fused.Runner.__call__
    monkeypatch.setattr(fused.Runner, "__call__",
                        lambda self, args: orig(self, args) * (1 + 1e-7))
    with pytest.raises(PropertyFailure, match="values"):
        check_backends(d, ["fused"])


def test_gradient_property_detects_a_wrong_gradient(monkeypatch):
    d = ProgramDesc("def prog(a0):\n    return A.map(lambda x: A.sin(x) * x, a0)\n\n"
                    "def loss(a0):\n    return A.sum_all(prog(a0))\n",
                    (np.array([0.3, -1.2]),), (("f64", 1),), True)
    assert check_gradient(d) == "ok"
    import accel.ad.api as api
    orig = api.gradient_program

    def wrong(prog, *a, **k):  # d/dx (sin x * x) without the product rule
        from accel.frontend import trace_program
        from accel.ast.types import ArrayT, float64
        bad = trace_program(lambda a0: A.sum_all(A.map(lambda x: A.sin(x), a0)),
                            (ArrayT(float64, 1),))
        return orig(bad, *a, **k)
    monkeypatch.setattr(api, "gradient_program", wrong)
    with pytest.raises(PropertyFailure, match="reverse != forward"):
        check_gradient(d)


def test_soak_command_runs():
    r = subprocess.run([sys.executable, "-m", "accel.testing.soak", "--n", "6", "--seed", "3",
                        "--backends", "interpreter,fused", "--grad-every", "2", "--quiet"],
                       cwd=ROOT, capture_output=True, text=True, timeout=600,
                       env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "soak: 6 programs" in r.stdout
    assert "backends : 6 run, 6 passed" in r.stdout
    assert "gradient : 3 run" in r.stdout
