"""Kernels specialised on tests of sizes alone (``backends/cpu/versions``): one kernel set
per outcome, the host launching the one the arguments' sizes pick, the same values as
the undecided step on every outcome, and only the taken outcome compiled."""

from __future__ import annotations

import platform
import re

import numpy as np
import pytest

import accel as A
from accel.ast import nodes as N
from accel.ast.types import bool_
from accel.backends.cpu import prepare_kernels, versions
from accel.fusion.kernels import KFold, KGenerate
from accel.fusion.fuse import fuse
from accel.pipeline import arg_type, optimise, trace_program

from kernel_builders import kernel_asm
from test_cpu_intervals import _conv2d_grad, conv2d


def _kp(f, args):
    return fuse(optimise(trace_program(f, tuple(arg_type(a, i) for i, a in enumerate(args)))))


def _conds(e) -> int:
    """How many conditionals ``e`` has."""
    n, stack = 0, [e]
    while stack:
        x = stack.pop()
        n += isinstance(x, N.Cond)
        stack.extend(c for c in vars(x).values() if isinstance(c, (N.Exp, N.Lam)))
        for c in vars(x).values():
            if isinstance(c, tuple):
                stack.extend(y for y in c if isinstance(y, (N.Exp, N.Lam)))
    return n


@pytest.fixture(scope="module")
def conv_grad_kp():
    rng = np.random.default_rng(0)
    args = (rng.standard_normal((12, 20)), rng.standard_normal((3, 4)))
    return _kp(A.gradientA(conv2d, wrt=(0, 1)), args)


def test_the_image_adjoints_size_tests_are_found_through_lets_and_decided(conv_grad_kp):
    """The image adjoint of a convolution picks ``u - a`` or ``a`` by ``oh >= kh`` and by
    ``ow >= kw`` (let-bound): two size tests; deciding them leaves none, and fewer
    conditionals (the window guard, on the index, stays)."""
    folds = [s for s in conv_grad_kp.body.steps if isinstance(s, KFold)]
    found = [(s, versions.size_tests(s)) for s in folds]
    (s, tests), = [(s, t) for s, t in found if t]
    assert len(tests) == 2
    assert all(t.type == bool_ for t in tests)
    for values in versions.outcomes(tests):
        d = versions.decided(s, tests, values)
        assert versions.size_tests(d) == []
        assert _conds(d.src) < _conds(s.src)


def test_a_test_reading_an_element_is_not_a_size_test():
    """``if x[0] > 0`` reads an element: it is decided per element, not on the host."""
    def f(x, y):
        return A.generate(A.shape(x), lambda i: A.cond(x[0] > 0.0, x[i], y[i]))
    x, y = np.ones(5), np.ones(5)
    (g,) = [s for s in _kp(f, (x, y)).body.steps if isinstance(s, KGenerate)]
    assert versions.size_tests(g) == []


def test_each_outcome_is_right_and_only_the_taken_one_is_compiled():
    """Arguments whose sizes take either outcome get the right values from their own
    kernels, and a runner makes an outcome's function ready (compiles it, or finds it
    compiled) only once a call takes that outcome."""
    def f(x, y):
        k = x.shape[0]
        j = y.shape[0]
        size = A.cond(k >= j, j, k)
        return A.generate((size,), lambda i: A.cond(k >= j, x[i] * 2.5, y[i] + 1.25))
    rng = np.random.default_rng(3)
    runner = prepare_kernels(_kp(f, (np.ones(3), np.ones(2))), tiered=False)
    (plan,) = [p for p in runner.gen.plans.values() if p.tests]
    assert len(plan.choices) == 2
    for n, m in [(7, 5), (6, 6), (5, 7), (1, 9)]:
        x, y = rng.standard_normal(n), rng.standard_normal(m)
        want = x[:m] * 2.5 if n >= m else y[:n] + 1.25
        np.testing.assert_array_equal(runner([x, y]), want)
        if (n, m) == (6, 6):
            assert runner.stats()["compiled_functions"] == 1
    assert runner.stats()["compiled_functions"] == 2


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86 assembly")
def test_the_decided_image_adjoint_loads_its_block_of_columns_as_vectors(conv_grad_kp):
    """With ``ow >= kw`` decided, a block of 16 output columns reads ``dy[u - a, v + c -
    b]`` at consecutive positions; undecided, the column was a select between that and
    ``b`` per element, which LLVM could only gather (22 ``vgather`` in the block's
    function, none decided; a 512 x 512 image's adjoint took 4.7 ms undecided, 1.0 ms
    decided)."""
    runner = prepare_kernels(conv_grad_kp, tiered=False)
    rng = np.random.default_rng(2)
    img, ker = rng.standard_normal((40, 70)), rng.standard_normal((3, 4))
    for got, want in zip(runner([img, ker]), _conv2d_grad(img, ker)):
        np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-11)
    (plan,) = [p for p in runner.gen.plans.values() if p.tests]
    taken = dict(plan.choices)[(True, True)]
    _, asm = kernel_asm(runner, re.escape(taken.fn) + "_b")
    packed = len(re.findall(r"\bv(?:mul|add|fmadd\d+)pd\s[^\n]*%[yz]mm", asm))
    assert packed >= 8, f"decided block not vectorized: {packed} packed operations"
    assert "vgather" not in asm, "the block's consecutive reads are gathered"
