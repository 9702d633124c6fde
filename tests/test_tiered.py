"""Tiered execution on the cpu backend (``backends/cpu/tiered.py``, ``worker.py``).

The first calls of a tiered program run on the fused NumPy evaluator while a worker
process compiles the kernels; the tiers must agree up to floating-point reassociation,
calls must switch to the compiled kernels, failures of the background compilation must
reach the caller as ``BackendError``, compiled-only programs must never run the NumPy
tier, and the worker must end with the program.  The session runs compiled-only
(``conftest``); these tests turn tiers on per program.
"""

import logging
import os
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import accel as A
from accel.backends import fused
from accel.backends.cpu import tiered, worker

WAIT = 600  # seconds: a cold compilation on a loaded 2-core machine


def _dot_tanh(x, y):
    return A.sum_all(A.map(A.tanh, A.zip_with(lambda a, b: a * b + 0.5, x, y)))


def _logsumexp(x):
    m = A.maximum(x)
    s = A.sum(A.map(A.exp, A.zip_with(lambda v, mm: v - mm, x,
                                      A.replicate((A.All, x.shape[1]), m))))
    return A.sum_all(A.zip_with(lambda a, b: A.log(a) + b, s, m))


def _rows_then_scan(x):
    return A.scanl1(lambda a, b: a + b, A.sum(A.map(lambda v: v * v, x)))


def _matvec(lm, x):
    """sum tanh(y) with y[i, k, r] = sum_j L[k, r, j] x[i, k, j] (the GMM's products): the
    cpu runner reads L through a transposed copy, a rewrite whose fresh names differ
    between processes (the worker must compile the caller's rewritten program)."""
    n, k, d = x.shape[0], x.shape[1], x.shape[2]
    y = A.sum(A.generate((n, k, d, d),
                         lambda ix: lm[ix[1], ix[2], ix[3]] * x[ix[0], ix[1], ix[3]]))
    return A.sum_all(A.map(A.tanh, y))


rng = np.random.default_rng(7)
X = rng.standard_normal((37, 50))
Y = rng.standard_normal((37, 50))
PROGRAMS = {
    "primal": (_dot_tanh, (X, Y)),
    "gradient": (A.gradientA(_logsumexp), (X,)),
    "fold-scan": (_rows_then_scan, (X,)),
    "matvec-gradient": (A.gradientA(_matvec), (rng.standard_normal((3, 5, 5)),
                                               rng.standard_normal((40, 3, 5)))),
}


def _tuple(r):
    return r if isinstance(r, tuple) else (r,)


@pytest.fixture(autouse=True)
def own_jobs():
    """Each test's tiered runners submit jobs of their own (runners of a module whose job
    an earlier test finished would otherwise run compiled from their first call)."""
    tiered.forget_jobs()


@pytest.fixture
def fresh_worker():
    """A worker started by the test (and ended after it), with ``worker.SERVE`` restored."""
    worker.shutdown()
    tiered.forget_jobs()
    serve = worker.SERVE
    yield
    worker.SERVE = serve
    worker.shutdown()
    tiered.forget_jobs()


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_tiers_agree_and_switch(name):
    f, args = PROGRAMS[name]
    c = A.compile(f, tiered=True)
    first = c(*args)
    s = c.stats(*args)
    assert s["tiered"] and s["tier"] == "numpy"
    assert c.wait(timeout=WAIT)
    then = c(*args)
    s = c.stats(*args)
    assert s["tier"] == "compiled" and s["compile_state"] == "ready"
    assert s["numpy_calls"] == 1 and s["compiled_calls"] == 1
    assert len(_tuple(first)) == len(_tuple(then))
    for a, b in zip(_tuple(first), _tuple(then)):
        assert type(a) is type(b) and a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
    reference = A.run(f, *args, backend="interpreter")
    for a, b in zip(_tuple(reference), _tuple(then)):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


def test_calls_switch_without_waiting():
    f, args = PROGRAMS["primal"]
    c = A.compile(f, tiered=True)
    tiers = []
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        c(*args)
        tiers.append(c.stats(*args)["tier"])
        if tiers[-1] == "compiled":
            break
        time.sleep(0.02)
    assert tiers[0] == "numpy" and tiers[-1] == "compiled"
    c(*args)
    assert c.stats(*args)["tier"] == "compiled"


def test_wait_with_arguments_compiles_before_any_call():
    f, args = PROGRAMS["fold-scan"]
    c = A.compile(f, tiered=True)
    assert c.wait(timeout=0)  # no signature called yet: nothing to wait for
    assert c.wait(*args, timeout=WAIT)
    c(*args)
    s = c.stats(*args)
    assert s["tier"] == "compiled" and s["numpy_calls"] == 0


def test_compiled_only_never_runs_numpy(monkeypatch):
    def no(*a, **k):
        raise AssertionError("the NumPy tier ran")
    monkeypatch.setattr(fused, "evaluate", no)
    monkeypatch.setattr(worker, "submit", no)
    f, args = PROGRAMS["gradient"]
    c = A.compile(f, tiered=False)
    c(*args)
    s = c.stats(*args)
    assert s["tier"] == "compiled" and not s["tiered"]
    assert c.wait(timeout=0)
    monkeypatch.setenv("ACCEL_TIERED", "0")  # the default follows the environment
    c = A.compile(f)
    c(*args)
    assert c.stats(*args)["tier"] == "compiled"


def test_environment_turns_tiers_on(monkeypatch):
    monkeypatch.setenv("ACCEL_TIERED", "1")
    f, args = PROGRAMS["primal"]
    c = A.compile(f)
    c(*args)
    assert c.stats(*args)["tiered"]
    assert c.wait(timeout=WAIT)


def test_compile_error_reaches_the_caller(fresh_worker):
    worker.SERVE = "tier_worker_faults:serve_compile_error"
    f, args = PROGRAMS["primal"]
    c = A.compile(f, tiered=True)
    expected = c(*args)  # the NumPy tier answers
    with pytest.raises(A.BackendError, match="injected"):
        c.wait(timeout=WAIT)
    # the failure is reported once; the next call compiles here (which works)
    np.testing.assert_allclose(c(*args), expected, rtol=1e-12)
    assert c.stats(*args)["tier"] == "compiled"

    c = A.compile(f, tiered=True)  # without wait(): the next call raises it
    c(*args)
    deadline = time.monotonic() + WAIT
    while c.stats(*args)["compile_state"] == "compiling" and time.monotonic() < deadline:
        time.sleep(0.02)
    with pytest.raises(A.BackendError, match="injected"):
        c(*args)


def test_dead_worker_falls_back_to_compiling_here(fresh_worker):
    worker.SERVE = "tier_worker_faults:serve_exit"
    f, args = PROGRAMS["fold-scan"]
    c = A.compile(f, tiered=True)
    first = c(*args)
    assert c.wait(timeout=WAIT)
    assert c.stats(*args)["compile_state"] == "local"
    np.testing.assert_allclose(c(*args), first, rtol=1e-12)
    assert c.stats(*args)["tier"] == "compiled"


def test_runners_of_one_module_share_its_job():
    """``A.run`` in a loop: once the module's job has ended, new runners run compiled."""
    f, args = PROGRAMS["fold-scan"]
    A.compile(f, tiered=True).wait(*args, timeout=WAIT)
    c = A.compile(f, tiered=True)
    c(*args)
    assert c.stats(*args)["tier"] == "compiled"


def test_one_log_line_for_a_long_compilation(monkeypatch, caplog):
    monkeypatch.setenv("ACCEL_COMPILE_LOG", "0.001")
    f, args = PROGRAMS["primal"]
    with caplog.at_level(logging.WARNING, logger="accel"):
        c = A.compile(f, tiered=True)
        c(*args)
        assert c.wait(timeout=WAIT)
        time.sleep(0.1)
    lines = [r for r in caplog.records if r.name == "accel"]
    assert len(lines) == 1 and "compiling" in lines[0].getMessage()
    caplog.clear()
    monkeypatch.setenv("ACCEL_COMPILE_LOG", "0")
    tiered.forget_jobs()
    with caplog.at_level(logging.WARNING, logger="accel"):
        c = A.compile(f, tiered=True)
        c(*args)
        assert c.wait(timeout=WAIT)
    assert not [r for r in caplog.records if r.name == "accel"]


_SCRIPT = textwrap.dedent("""
    import os, signal, sys
    import numpy as np
    import accel as A
    from accel.backends.cpu import tiered, worker
    c = A.compile(lambda x: A.sum_all(A.map(A.sin, x)), tiered=True)
    c(np.arange(10.0))
    print(worker.worker_pid(), flush=True)
    if sys.argv[1] == "kill":
        os.kill(os.getpid(), signal.SIGKILL)  # no atexit: the worker sees its pipe close
""")


@pytest.mark.parametrize("how", ["exit", "kill"])
def test_worker_ends_with_the_program(how):
    env = dict(os.environ, ACCEL_TIERED="1")
    out = subprocess.run([sys.executable, "-c", _SCRIPT, how], capture_output=True, text=True,
                         env=env, timeout=120)
    pid = int(out.stdout.split()[0])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    pytest.fail(f"the compile worker {pid} outlived its program ({how})")


_FORK = textwrap.dedent("""
    import os
    import numpy as np
    import accel as A
    from accel.backends.cpu import tiered, worker
    c = A.compile(lambda x: A.sum_all(A.map(A.cos, x)), tiered=True)
    x = np.arange(10.0)
    want = np.cos(x).sum()
    c(x)
    parent = worker.worker_pid()
    pid = os.fork()
    if pid == 0:
        ok = c.wait(timeout=600) and abs(c(x) - want) < 1e-12
        ok = ok and worker.worker_pid() not in (None, parent)
        ok = ok and c.stats(x)["tier"] == "compiled"
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, status
    assert c.wait(timeout=600) and abs(c(x) - want) < 1e-12
    assert worker.worker_pid() == parent
    print("ok")
""")


def test_fork_child_gets_its_own_worker():
    env = dict(os.environ, ACCEL_TIERED="1")
    out = subprocess.run([sys.executable, "-c", _FORK], capture_output=True, text=True,
                         env=env, timeout=600)
    assert out.stdout.strip() == "ok", out.stderr[-2000:]
