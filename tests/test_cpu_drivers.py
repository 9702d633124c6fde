"""Parallel phases through the shared drivers (``accel.backends.cpu.drivers``): one
``prange`` driver per argument count and types, calling a range function by address.

The parallel phases of every other cpu test run through them too (``small_parallel``
makes small inputs reach them); here: programs of different kernels share one
compiled driver, its chunks cover every task exactly once, and a bounds error found in
a chunk run by another thread still reaches the caller."""

import numpy as np
import pytest

import accel as A
from accel.backends.cpu import drivers
from accel.errors import OutOfBoundsError


def test_names_and_signatures():
    from numba import types
    assert drivers.range_name("k3_par_o") == "k3_o"
    assert drivers.range_name("k3_oc") is None
    arr = types.float64[::1]
    assert drivers.range_signature((types.int64, types.int64, arr)) == (
        types.int64, types.int64, types.int64, arr)
    assert drivers.driver_source(3) == drivers.driver_source(3)
    assert "def par(addr, ntask, nch, b0, b1, b2):" in drivers.driver_source(3)


def test_programs_with_the_same_argument_types_share_one_driver(small_parallel):
    from numba import types
    par = drivers.driver_module(4).par  # generate's: the output, the input, shp, err
    before = set(par.signatures)
    x = np.linspace(-1.0, 1.0, 50_001)
    f1 = A.compile(lambda a: A.map(lambda v: v * 2.0 + 1.0, a), backend="cpu")
    f2 = A.compile(lambda a: A.map(lambda v: A.sqrt(v * v + 1.0), a), backend="cpu")
    np.testing.assert_allclose(f1(x), 2.0 * x + 1.0, rtol=1e-15)
    np.testing.assert_allclose(f2(x), np.sqrt(x * x + 1.0), rtol=1e-15)
    for f in (f1, f2):
        launches = f.stats(x)["launches"]
        assert sum(v for k, v in launches.items() if k.endswith("_parallel")) >= 1, launches
    arr, ints = types.float64[::1], types.int64[::1]
    assert (types.int64,) * 3 + (arr, arr, ints, ints) in par.signatures
    assert len(set(par.signatures) - before) <= 1, par.signatures  # (other tests' too)


@pytest.mark.parametrize("n", [1, 2, 7, 4097, 100_003])
def test_chunks_cover_every_task_once(small_parallel, n):
    """Chunk ``c`` of ``nch`` runs tasks ``c*ntask//nch .. (c+1)*ntask//nch - 1``: every
    element is written, with its own index, at any length."""
    f = A.compile(lambda a: A.generate(a.shape, lambda i: a[i] + A.to_float(i)),
                  backend="cpu")
    x = np.zeros(n)
    np.testing.assert_array_equal(f(x), np.arange(n, dtype=np.float64))


def test_a_bounds_error_in_a_parallel_chunk_is_raised(small_parallel):
    n = 60_000
    f = A.compile(lambda a, k: A.generate(a.shape, lambda i: a[i] + a[i + A.the(k)]),
                  backend="cpu", check_bounds=True)
    x = np.arange(float(n))
    np.testing.assert_array_equal(f(x, np.array(0)), 2 * x)
    with pytest.raises(OutOfBoundsError):
        f(x, np.array(1))
