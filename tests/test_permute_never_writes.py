"""A permute whose index function never targets anything (``lambda ix: A.ignore``, or a
``cond`` whose every branch is ``A.ignore``) is well typed: its target rank is the
defaults array's, its result is the defaults, and its adjoint goes to the defaults alone
(the source gets a zero adjoint).  Accelerate accepts ``const ignore`` the same way.

Each program runs on every backend (cuda on the simulator when there is no GPU), once as
the pipeline optimises it (simplify turns the permute into its defaults) and once with
the optimisation passes switched off, so that fusion and the backends see a permute that
writes nothing.
"""

import numpy as np
import pytest

import accel as A
from accel import pipeline
from accel.frontend import arg_type, trace_program
from accel.simplify.driver import simplify
from accel.pipeline import BACKENDS


def _usable(name: str) -> bool:
    if name == "cuda":
        from accel.backends.cuda import available
        return available()[0]
    return name in BACKENDS


BACKENDS_UNDER_TEST = [b for b in ("interpreter", "fused", "cpu", "cuda") if _usable(b)]
D = np.arange(6.0).reshape(2, 3) - 2.5
S = np.linspace(-1.0, 1.0, 5)


def const_ignore(d, s):
    return A.permute(lambda new, old: new + old, d, lambda ix: A.ignore, A.map(A.sin, s))


def cond_ignore(d, s):  # every branch, nested, is A.ignore; the condition reads s
    return A.permute(lambda new, old: A.max(new, old), d,
                     lambda i: A.cond(s[i] > 0, A.ignore,
                                      A.cond(s[i] < -0.5, A.ignore, A.ignore)), s)


def rank0_ignore(d, s):  # defaults of rank 0: the target is the empty index
    return A.permute(lambda new, old: new * old, A.unit(A.the(A.sum_all(d))),
                     lambda i: A.ignore, s)


PROGRAMS = {"const_ignore": (const_ignore, D), "cond_ignore": (cond_ignore, D),
            "rank0_ignore": (rank0_ignore, np.array(D.sum()))}


@pytest.fixture(params=["optimised", "unoptimised"])
def passes(request, monkeypatch):
    if request.param == "unoptimised":
        monkeypatch.setattr(pipeline, "PASSES", [])
    return request.param


@pytest.mark.parametrize("backend", BACKENDS_UNDER_TEST)
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_result_is_the_defaults(backend, name, passes):
    f, want = PROGRAMS[name]
    for check_bounds in (False, True):
        got = A.run(f, D, S, backend=backend, check_bounds=check_bounds)
        np.testing.assert_array_equal(got, want)


def test_target_rank_comes_from_the_defaults():
    assert "(False, (0, 0))" in A.show(const_ignore, D, S)  # rank 2, as the defaults
    assert "(False, ())" in A.show(rank0_ignore, D, S)


def test_simplify_turns_the_permute_into_its_defaults():
    sig = tuple(arg_type(a, i) for i, a in enumerate((D, S)))
    for f in (const_ignore, cond_ignore):
        assert "Permute" in A.show(f, D, S)
        assert "Permute" not in str(simplify(trace_program(f, sig)))


def _loss(f):
    return lambda d, s: A.sum_all(A.map(lambda v: v * v * v, f(d, s)))


@pytest.mark.parametrize("backend", BACKENDS_UNDER_TEST)
@pytest.mark.parametrize("name", ["const_ignore", "cond_ignore"])
def test_reverse_mode_adjoint_goes_to_the_defaults_alone(backend, name, passes):
    f = PROGRAMS[name][0]
    gd, gs = A.run(A.gradientA(_loss(f)), D, S, backend=backend)
    np.testing.assert_allclose(gd, 3 * D * D, rtol=1e-12)
    np.testing.assert_array_equal(gs, np.zeros_like(S))
    # the gradient differentiates again: d/dd sum(3 d^2) = 6 d
    gg = A.gradientA(lambda d, s: A.sum_all(A.gradientA(_loss(f), wrt=0)(d, s)), wrt=0)
    np.testing.assert_allclose(A.run(gg, D, S, backend=backend), 6 * D, rtol=1e-12)


@pytest.mark.parametrize("backend", BACKENDS_UNDER_TEST)
@pytest.mark.parametrize("name", ["const_ignore", "cond_ignore"])
def test_forward_mode_tangent_is_the_defaults_tangent(backend, name, passes):
    f = PROGRAMS[name][0]
    td, ts = np.full_like(D, 2.0), np.ones_like(S)
    out, tan = A.jvp(f, (D, S), (td, ts), backend=backend)
    np.testing.assert_array_equal(out, D)
    np.testing.assert_array_equal(tan, td)


def test_vjp_and_check_grad_of_a_permute_that_never_writes():
    _, pullback = A.vjp(const_ignore, D, S)
    cd, cs = pullback(np.full_like(D, 3.0))
    np.testing.assert_array_equal(cd, np.full_like(D, 3.0))
    np.testing.assert_array_equal(cs, np.zeros_like(S))
    assert A.check_grad(_loss(cond_ignore), D, S, backend="interpreter")
