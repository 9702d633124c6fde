"""The program cache (``accel/progcache.py``) and the NumPy tier's cost rule
(``backends/cpu/tiercost.py``).

The cache must hit on an equal program (traced again, or in a new process), miss when a
captured constant, a dtype, a rank or the program changes, and ignore a corrupted or
mismatched entry (recomputing it, never a wrong answer or a crash).  The session runs
with the cache off (``conftest``); these tests turn it on with a private directory.
"""

import json
import os
import pickle
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import accel as A
import accel.pipeline as P
from accel import progcache
from accel.ad import api as ad_api
from accel.backends import fused
from accel.backends.cpu import tiercost
from accel.frontend import arg_type, trace_program

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def cache(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    d.mkdir(mode=0o700)
    monkeypatch.setenv("ACCEL_CACHE_DIR", str(d))
    monkeypatch.setenv("ACCEL_PROGRAM_CACHE", "1")
    return d


@pytest.fixture
def spy(monkeypatch):
    """Counts of the passes the cache skips: ``optimise`` and ``reverse_program``."""
    counts = {"optimise": 0, "reverse": 0}
    opt, rev = P.optimise, ad_api.reverse_program

    def optimise(prog, timings=None):
        counts["optimise"] += 1
        return opt(prog, timings)

    def reverse(*a, **k):
        counts["reverse"] += 1
        return rev(*a, **k)
    monkeypatch.setattr(P, "optimise", optimise)
    monkeypatch.setattr(ad_api, "reverse_program", reverse)
    return counts


def _loss(c=0.5):
    def loss(x, y):
        return A.sum_all(A.map(A.tanh, A.zip_with(lambda a, b: a * b + c, x, y)))
    return loss


def _kp(fn, args):
    sig = tuple(arg_type(np.asarray(a), i) for i, a in enumerate(args))
    return P.optimise_cached(trace_program(fn, sig), "cpu")


def _reference(x, y, c=0.5):
    t = np.tanh(x * y + c)
    return np.sum(t), (1 - t * t) * y, (1 - t * t) * x


X = np.random.default_rng(3).standard_normal((6, 7))
Y = np.random.default_rng(4).standard_normal((6, 7))


def test_equal_programs_share_and_changes_miss(cache, spy):
    g = A.value_and_gradientA(_loss(), wrt=(0, 1))
    _kp(g, (X, Y))
    assert spy == {"optimise": 1, "reverse": 1}
    prog, kp = _kp(A.value_and_gradientA(_loss(), wrt=(0, 1)), (X, Y))  # traced again
    assert spy == {"optimise": 1, "reverse": 1}
    v, (gx, gy) = fused.evaluate(kp, [X, Y])
    rv, rgx, rgy = _reference(X, Y)
    np.testing.assert_allclose(v, rv)
    np.testing.assert_allclose(gx, rgx)
    np.testing.assert_allclose(gy, rgy)
    variants = [
        (A.value_and_gradientA(_loss(0.25), wrt=(0, 1)), (X, Y)),  # a captured constant
        (A.value_and_gradientA(_loss(), wrt=(0, 1)), (X.astype(np.float32),
                                                     Y.astype(np.float32))),  # dtype
        (A.value_and_gradientA(_loss(), wrt=(0, 1)), (X[0], Y[0])),  # rank
        (A.value_and_gradientA(_loss(), wrt=(0,)), (X, Y)),  # what is differentiated
        (A.value_and_gradientA(lambda x, y: A.sum_all(A.zip_with(lambda a, b: a * b - 0.5,
                                                                  x, y)), wrt=(0, 1)),
         (X, Y)),  # another program
    ]
    for i, (fn, args) in enumerate(variants):
        _kp(fn, args)
        assert spy["optimise"] == 2 + i, f"variant {i} hit another program's entry"


def test_use_constants_are_keyed_by_value(cache, spy):
    def with_constant(c):
        return lambda x: A.sum_all(A.zip_with(lambda a, b: a * b, x, A.use(c)))
    c1 = np.arange(6.0)
    c2 = c1.copy()
    c2[3] = 7.0
    _kp(with_constant(c1), (c1,))
    _kp(with_constant(c1.copy()), (c1,))
    assert spy["optimise"] == 1
    _, kp = _kp(with_constant(c2), (c1,))
    assert spy["optimise"] == 2
    assert float(fused.evaluate(kp, [c1])) == pytest.approx(float(np.dot(c1, c2)))


def test_corrupted_or_mismatched_entries_are_ignored(cache, spy):
    g = A.gradientA(_loss(), wrt=(0, 1))
    _kp(g, (X, Y))
    files = sorted((cache / "programs").glob("*.pkl"))
    assert len(files) == 2  # the derivative and the optimised program
    for bad in (b"", b"garbage", files[0].read_bytes()[:40],
                pickle.dumps({"key": "another key", "names": 1, "value": 42}),
                pickle.dumps({"key": None, "names": "x", "value": None})):
        for f in files:
            f.write_bytes(bad)
        before = dict(spy)
        _, kp = _kp(A.gradientA(_loss(), wrt=(0, 1)), (X, Y))
        assert spy == {"optimise": before["optimise"] + 1, "reverse": before["reverse"] + 1}
        gx, gy = fused.evaluate(kp, [X, Y])
        np.testing.assert_allclose(gx, _reference(X, Y)[1])
    _kp(A.gradientA(_loss(), wrt=(0, 1)), (X, Y))  # rebuilt entries are good again
    assert spy["optimise"] == before["optimise"] + 1


def test_off_switch(cache, spy, monkeypatch):
    monkeypatch.setenv("ACCEL_PROGRAM_CACHE", "0")
    _kp(_loss(), (X, Y))
    _kp(_loss(), (X, Y))
    assert spy["optimise"] == 2
    assert not (cache / "programs").exists() or not list((cache / "programs").iterdir())


def test_loaded_names_never_clash_with_later_fresh_names(cache):
    from accel.ast import nodes as N
    progcache.store("k", N.Program((), N.Unit(N.Const(1.0, A.float64))))
    entry = pickle.loads(next((cache / "programs").glob("*.pkl")).read_bytes())
    N.reserve_names(entry["names"] + 10 ** 6)
    assert progcache.load("k") is not None
    assert int(N.fresh("v")[1:]) > entry["names"] + 10 ** 6


SCRIPT = textwrap.dedent("""
    import json, sys
    import numpy as np
    import accel as A
    import accel.pipeline as P
    from accel.ad import api
    counts = {"optimise": 0, "reverse": 0}
    opt, rev = P.optimise, api.reverse_program
    def optimise(p, t=None):
        counts["optimise"] += 1
        return opt(p, t)
    def reverse(*a, **k):
        counts["reverse"] += 1
        return rev(*a, **k)
    P.optimise, api.reverse_program = optimise, reverse
    def loss(x, y):
        return A.sum_all(A.map(A.tanh, A.zip_with(lambda a, b: a * b + 0.5, x, y)))
    x = np.linspace(-1, 1, 42).reshape(6, 7)
    y = np.cos(x)
    g = A.compile(A.gradientA(loss, wrt=(0, 1)), tiered=True)
    gx, gy = g(x, y)
    t = np.tanh(x * y + 0.5)
    assert np.allclose(gx, (1 - t * t) * y) and np.allclose(gy, (1 - t * t) * x)
    print(json.dumps(counts))
""")


def test_hit_in_a_new_process(cache):
    env = dict(os.environ, ACCEL_PROGRAM_CACHE="1", ACCEL_TIERED="1",
               PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    runs = [subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True,
                           text=True, timeout=300) for _ in range(2)]
    for r in runs:
        assert r.returncode == 0, r.stderr[-2000:]
    counts = [json.loads(r.stdout.strip().splitlines()[-1]) for r in runs]
    assert counts == [{"optimise": 1, "reverse": 1}, {"optimise": 0, "reverse": 0}]


# --------------------------------------------------------------------------- tiering


def _matmul_loss(a, b):
    n, k, m = a.shape[0], a.shape[1], b.shape[1]
    prod = A.sum(A.generate((n, m, k), lambda ix: a[ix[0], ix[2]] * b[ix[2], ix[1]]))
    return A.sum_all(A.map(A.tanh, prod))


def _distance_loss(a, b):
    n, k, m = a.shape[0], a.shape[1], b.shape[1]
    d = A.sum(A.generate((n, m, k), lambda ix: A.tanh(a[ix[0], ix[2]] - b[ix[2], ix[1]])))
    return A.sum_all(A.map(lambda v: v * v, d))


def test_estimate_grows_with_the_work_the_numpy_tier_does():
    """A fold the NumPy tier materialises costs its source's elements; a matrix
    product (one ``einsum``: ``backends.contract_numpy``) its multiply-adds, far less."""
    small = [np.ones((8, 8)), np.ones((8, 8))]
    big = [np.ones((400, 400)), np.ones((400, 400))]
    est = {}
    for loss in (_distance_loss, _matmul_loss):
        g = A.gradientA(loss, wrt=(0, 1))
        _, kp = P.optimise_cached(trace_program(g, tuple(arg_type(a, i) for i, a in
                                                         enumerate(small))), "cpu")
        est[loss] = tiercost.estimate(kp, small), tiercost.estimate(kp, big)
    es, eb = est[_distance_loss]
    assert 0 < es < 0.05 < 1.0 < eb  # 400^3 elements per fold: seconds on NumPy
    assert eb / es > 1000
    es, eb = est[_matmul_loss]
    assert 0 < es < eb < 0.5  # 400^3 multiply-adds per product


def test_over_budget_skips_the_numpy_tier(monkeypatch):
    from accel.backends.cpu import tiered
    tiered.forget_jobs()
    a, b = np.random.default_rng(1).standard_normal((2, 5, 5))
    g = A.compile(A.gradientA(_matmul_loss, wrt=(0, 1)), tiered=True)
    monkeypatch.setenv("ACCEL_NUMPY_TIER_SECONDS", "1000")
    r1 = g(a, b)
    s = g.stats(a, b)
    assert s["tier"] == "numpy" and s["numpy_skipped"] == 0
    # Over budget while the worker's job runs: the call waits for it, then runs compiled.
    monkeypatch.setenv("ACCEL_NUMPY_TIER_SECONDS", "0")
    r2 = g(a, b)
    s = g.stats(a, b)
    assert s["tier"] == "compiled" and s["numpy_skipped"] == 1 and s["numpy_calls"] == 1
    for x, y in zip(r1, r2):
        np.testing.assert_allclose(x, y, rtol=1e-12)
    # Over budget with no job: compiled in the caller; no NumPy call at all.
    tiered.forget_jobs()
    h = A.compile(A.gradientA(_matmul_loss, wrt=(0, 1)), tiered=True)
    r3 = h(a, b)
    s = h.stats(a, b)
    assert s["tier"] == "compiled" and s["numpy_calls"] == 0 and s["compile_state"] == "local"
    for x, y in zip(r1, r3):
        np.testing.assert_allclose(x, y, rtol=1e-12)


def test_the_rule_compares_the_numpy_estimate_with_the_wait(tmp_path, monkeypatch):
    monkeypatch.delenv("ACCEL_NUMPY_TIER_SECONDS", raising=False)
    assert not tiercost.skip_numpy(0.3, lambda: 0.0)  # short calls always run on NumPy
    assert tiercost.skip_numpy(5.0, lambda: 1.5)  # the kernels load sooner than that
    assert not tiercost.skip_numpy(5.0, lambda: 90.0)  # compiling takes longer
    monkeypatch.setenv("ACCEL_NUMPY_TIER_SECONDS", "10")
    assert not tiercost.skip_numpy(5.0, lambda: 1.5)
    assert tiercost.skip_numpy(11.0, lambda: 1000.0)
    g = A.gradientA(_matmul_loss, wrt=(0, 1))
    args = [np.ones((8, 8)), np.ones((8, 8))]
    _, kp = P.optimise_cached(trace_program(g, tuple(arg_type(a, i) for i, a in
                                                     enumerate(args))), "cpu")
    from accel.fusion.kernels import count_loops
    n = count_loops(kp.body)
    cold = tiercost.wait_estimate(kp, "accel_cpu_x", str(tmp_path))
    assert cold == pytest.approx(tiercost.LOAD_SECONDS + n * tiercost.COMPILE_SECONDS_PER_KERNEL)
    (tmp_path / "__pycache__").mkdir()
    for i in range(n):
        (tmp_path / "__pycache__" / f"accel_cpu_x.k{i}_g-1.py311.nbi").write_bytes(b"")
    (tmp_path / "__pycache__" / "accel_cpu_y.k0_g-1.py311.nbi").write_bytes(b"")  # another
    assert tiercost.wait_estimate(kp, "accel_cpu_x", str(tmp_path)) == tiercost.LOAD_SECONDS
