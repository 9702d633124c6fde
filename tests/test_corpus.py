"""The performance corpus (benchmarks/corpus) is a measuring instrument: its programs
must compute what they claim.  At tiny sizes on the interpreter, every accel
formulation agrees with the NumPy reference, their gradients agree with each other and
with a central finite difference of the reference, and, when JAX is installed, every
JAX formulation agrees too.  No timing is asserted."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

import accel as A
from benchmarks.corpus import PROGRAMS, SIZES, by_name

IDS = [p.name for p in PROGRAMS]


_GRADS: dict = {}  # (program, formulation) -> its gradient at the tiny seeded inputs


def _grad(prog, f, args):
    """The gradient of ``f`` at ``prog.args("tiny")`` (seeded, so the same in every test),
    computed once per formulation: both the accel and the JAX test need the first one
    (BA's takes tens of seconds to trace and differentiate)."""
    key = (prog.name, next(form for form, g in prog.accel.items() if g is f))
    if key not in _GRADS:
        g = A.run(A.gradientA(f, wrt=prog.wrt), *args, backend="interpreter")
        _GRADS[key] = g if isinstance(g, tuple) else (g,)
    return _GRADS[key]


def test_registry_is_complete():
    assert len(PROGRAMS) >= 16
    assert len(set(IDS)) == len(IDS)
    for name in ("matmul_square", "mlp", "attention", "conv1d", "conv2d", "pairwise_rbf",
                 "logsumexp", "kmeans", "gmm", "ba", "least_squares", "stencil", "cumsum",
                 "histogram", "rnn"):
        assert name in IDS
    assert len(by_name(["gmm"])[0].accel) == 3
    for prog in PROGRAMS:
        assert prog.accel and prog.jax, prog.name
        nparams = {len(inspect.signature(f).parameters)
                   for f in list(prog.accel.values()) + list(prog.jax.values())
                   + list(prog.torch.values())}
        assert len(nparams) == 1, prog.name
        arity = nparams.pop()
        for size in SIZES[:2]:   # the default inputs are large; same generators
            args = prog.args(size)
            assert len(args) == arity, prog.name
            assert all(isinstance(a, np.ndarray) for a in args)
            assert all(args[i].dtype == np.float64 for i in prog.wrt), prog.name
    with pytest.raises(ValueError, match="size"):
        PROGRAMS[0].args("huge")


def test_unknown_program_is_refused():
    with pytest.raises(SystemExit, match="unknown corpus program"):
        by_name(["no_such_program"])


@pytest.mark.parametrize("prog", PROGRAMS, ids=IDS)
def test_formulations_agree_with_numpy_and_finite_differences(prog):
    args = prog.args("tiny")
    ref = prog.reference(*args)
    grads = []
    for form, f in prog.accel.items():
        v = float(A.run(f, *args, backend="interpreter"))
        assert abs(v - ref) <= 1e-10 * max(1.0, abs(ref)), (form, v, ref)
        grads.append((form, _grad(prog, f, args)))
    first_form, first = grads[0]
    for form, g in grads[1:]:
        for a, b in zip(first, g):
            np.testing.assert_allclose(b, a, rtol=1e-10, atol=1e-12, err_msg=form)
    # central difference of the NumPy reference along a random direction
    rng = np.random.default_rng(1)
    dirs = {i: rng.standard_normal(args[i].shape) for i in prog.wrt}
    h = 1e-6

    def at(t):
        return prog.reference(*[a + t * dirs[i] if i in dirs else a
                                for i, a in enumerate(args)])
    fd = (at(h) - at(-h)) / (2 * h)
    dd = sum(float(np.sum(g * dirs[i])) for i, g in zip(prog.wrt, first))
    assert abs(fd - dd) <= 1e-5 * max(1.0, abs(dd)), (first_form, fd, dd)


@pytest.mark.parametrize("prog", PROGRAMS, ids=IDS)
def test_jax_formulations_agree(prog):
    jax = pytest.importorskip("jax")
    jax.config.update("jax_enable_x64", True)
    args = prog.args("tiny")
    ref = prog.reference(*args)
    want = _grad(prog, next(iter(prog.accel.values())), args)
    jargs = [jax.numpy.asarray(a) for a in args]
    for form, f in prog.jax.items():
        assert abs(float(f(*jargs)) - ref) <= 1e-10 * max(1.0, abs(ref)), form
        got = jax.grad(f, argnums=prog.wrt)(*jargs)
        for a, b in zip(want, got):
            np.testing.assert_allclose(np.asarray(b), a, rtol=1e-9, atol=1e-11, err_msg=form)
