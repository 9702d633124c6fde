"""An array that does not fit in memory raises ``A.OutOfMemoryError`` (an ``AccelError`` and
a ``MemoryError``) naming the program step and the array's shape, element type and size,
on every backend, and the compiled program still runs on smaller inputs afterwards.

The gradient of ``sum(m * (m + 1))`` with ``m[i, j] = a[i] * a[j]`` materialises an
(n, n) array: with n = 200,000 that is 320 GB of float64 (more with the adjoint's tuple
components).  Whether such an allocation fails at once depends on the kernel's overcommit
policy, so the address space of the test process is capped (``RLIMIT_AS``, 32 GiB above
what it uses) while the program runs: the allocation then fails on any Linux machine
instead of succeeding lazily and touching pages.  Sizes whose byte count exceeds what a
``ssize_t`` can describe are refused before anything is allocated.
"""

import contextlib
import os

import numpy as np
import pytest

import accel as A
from accel.pipeline import BACKENDS

resource = pytest.importorskip("resource")


def _usable(name: str) -> bool:
    if name == "cuda":
        from accel.backends.cuda import available
        return available()[0]
    return name in BACKENDS


BACKENDS_UNDER_TEST = [b for b in ("interpreter", "fused", "cpu", "cuda") if _usable(b)]
BIG = 200_000


def g(a):
    m = A.generate((a.shape[0], a.shape[0]), lambda ix: a[ix[0]] * a[ix[1]])
    return A.sum_all(A.zip_with(lambda x, y: x * y, m, A.map(lambda v: v + 1.0, m)))


def want_gradient(a):
    # d/da_k sum_ij m_ij^2 + m_ij = 2 sum_j (2 a_k a_j + 1) a_j   (m is symmetric)
    return 2 * ((2 * np.outer(a, a) + 1) @ a)


@contextlib.contextmanager
def address_space_cap(headroom: int = 32 << 30):
    with open("/proc/self/statm") as f:
        used = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = used + headroom
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs Linux /proc")
@pytest.mark.parametrize("backend", BACKENDS_UNDER_TEST)
def test_gradient_too_big_names_the_step_and_program_stays_usable(backend):
    grad = A.compile(A.gradientA(g), backend=backend)
    sim = backend == "cuda"  # (the simulator: ~5 ms an element of the (n, n) arrays)
    small = np.linspace(-1.0, 1.0, 12 if sim else 30)
    np.testing.assert_allclose(grad(small), want_gradient(small), rtol=1e-10)  # compiled
    with address_space_cap():
        with pytest.raises(A.OutOfMemoryError) as info:
            grad(np.linspace(0.0, 1.0, BIG))
    e = info.value
    assert isinstance(e, A.AccelError) and isinstance(e, MemoryError)
    assert e.shape == (BIG, BIG) and e.nbytes >= BIG * BIG * 8
    msg = str(e)
    assert backend.split()[0] in msg and e.step and e.step in msg
    assert f"({BIG}, {BIG})" in msg and "float64" in msg and f"{e.nbytes:,} bytes" in msg
    # the same compiled object, a smaller input (on the cpu, (100, 100) arrays come from
    # the buffer pool; the cuda backend has no pool)
    a = np.linspace(-1.0, 1.0, 20 if sim else 100)
    np.testing.assert_allclose(grad(a), want_gradient(a), rtol=1e-10)


def huge(k):
    n = A.the(k)
    m = A.generate((n, n), lambda ix: A.to_float(ix[0] - ix[1]))
    return A.zip_with(lambda x, y: x * y, m, A.map(lambda v: v + 1.0, m))


@pytest.mark.parametrize("backend", BACKENDS_UNDER_TEST)
def test_byte_count_beyond_the_address_space_is_refused_before_numpy(backend):
    c = A.compile(huge, backend=backend)
    with pytest.raises(A.OutOfMemoryError, match=r"\(10000000000, 10000000000\)") as info:
        c(np.array(10**10))  # 10^20 elements: NumPy would say "array is too big"
    assert info.value.nbytes == 8 * 10**20
    assert "float64" in str(info.value) and "800,000,000,000,000,000,000 bytes" in str(info.value)
    x = np.arange(3.0)
    want = np.subtract.outer(x, x) * (np.subtract.outer(x, x) + 1)
    np.testing.assert_array_equal(c(np.array(3)), want)


def test_cpu_replay_falls_back_and_names_the_step(monkeypatch):
    """The cpu backend replays a known plan straight-line; an allocation failing there
    falls back to the step-by-step run, which names the step, and nothing is left
    behind."""
    if not _usable("cpu"):
        pytest.skip("no cpu backend")
    grad = A.compile(A.gradientA(g), backend="cpu")
    a = np.linspace(-1.0, 1.0, 60)
    for _ in range(3):  # plan, then replay
        np.testing.assert_allclose(grad(a), want_gradient(a), rtol=1e-10)
    ((_, runner),) = grad._cache.values()
    assert runner.stats()["straight_line_calls"] >= 1

    def fail(size, dtype, taken):
        raise MemoryError(f"Unable to allocate {size} {dtype}")
    monkeypatch.setattr(runner._pool, "take", fail)
    with pytest.raises(A.OutOfMemoryError, match=r"cpu backend: .*step a\d+ = .*\(60, 60\)"):
        grad(a)
    monkeypatch.undo()
    np.testing.assert_allclose(grad(a), want_gradient(a), rtol=1e-10)
