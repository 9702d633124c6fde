"""The intrinsics every generated cpu module defines (``backends/cpu/emitter.py: HEADER``):
``_ld``/``_st`` read and write flat arrays (``kernelgen.at``/``store_at``) and must agree
with NumPy's indexing for every element type, index type and memory layout a kernel may
be handed; ``max``/``min`` are one ``_select`` with NumPy's NaN propagation."""

import importlib.util
import itertools

import numpy as np
import pytest

import accel as A
from accel.backends.cpu import emitter
from accel.backends.cpu.codegen import generate
from accel.fusion.fuse import fuse
from accel.pipeline import arg_type, optimise, trace_program

_BODY = '''

@nb.njit
def gather(a, idx, out):
    for k in range(idx.shape[0]):
        out[k] = _ld(a, idx[k])


@nb.njit
def scatter(a, idx, vals):
    for k in range(idx.shape[0]):
        _st(a, idx[k], vals[k])


@nb.njit
def put_int_zero(a, i):
    _st(a, i, 0)


@nb.njit
def put_float(a, i, v):
    _st(a, i, v)
'''


@pytest.fixture(scope="module")
def header(tmp_path_factory):
    path = tmp_path_factory.mktemp("header") / "accel_header_under_test.py"
    path.write_text(emitter.HEADER + _BODY)
    spec = importlib.util.spec_from_file_location("accel_header_under_test", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


_DTYPES = (np.float64, np.float32, np.int64, np.int32, np.bool_)
_INDEX_DTYPES = (np.int64, np.int32, np.uint64)


@pytest.mark.parametrize("dtype,index_dtype", list(itertools.product(_DTYPES, _INDEX_DTYPES)))
def test_loads_and_stores_agree_with_numpy_indexing(header, dtype, index_dtype):
    rng = np.random.default_rng(3)
    base = (rng.standard_normal(61) * 10).astype(dtype)
    for a in (base, base[::3], base[5:47]):  # contiguous, strided, offset views
        before = base.copy()
        idx = rng.integers(0, a.shape[0], 40).astype(index_dtype)
        out = np.zeros(40, dtype)
        header.gather(a, idx, out)
        np.testing.assert_array_equal(out, a[idx])
        np.testing.assert_array_equal(base, before)  # a load writes nothing
        vals = (rng.standard_normal(40) * 10).astype(dtype)
        want = a.copy()
        for k, i in enumerate(idx):
            want[i] = vals[k]
        header.scatter(a, idx, vals)
        np.testing.assert_array_equal(a, want)


def test_stores_convert_to_the_arrays_type(header):
    f32 = np.full(4, 7.0, np.float32)
    header.put_float(f32, 2, 0.1)  # a float64 rounded like NumPy's assignment
    assert f32[2] == np.float32(0.1) and f32[1] == 7.0
    f64 = np.full(3, 7.0)
    header.put_int_zero(f64, 1)  # an integer literal (a kernel's ``= 0``)
    np.testing.assert_array_equal(f64, [7.0, 0.0, 7.0])
    flags = np.zeros(3, np.bool_)
    header.put_float(flags, 0, 2.5)
    np.testing.assert_array_equal(flags, [True, False, False])


def test_generated_kernels_index_flat_arrays_through_the_intrinsics():
    """No numba indexing of a flat buffer at an unsigned position is left (each cost
    milliseconds of typing and lowering), and ``max``/``min`` branch nowhere."""
    def f(x, y):
        return A.sum(A.zip_with(lambda a, b: A.max(a, b) * A.min(a, b), x, y))
    x, y = np.linspace(-1, 1, 1000), np.cos(np.arange(1000.0))
    c = A.compile(f)
    np.testing.assert_allclose(c(x, y), np.sum(np.maximum(x, y) * np.minimum(x, y)))
    x[7], y[9] = np.nan, np.nan  # NaN on either side propagates (NumPy's maximum/minimum)
    assert np.isnan(c(x[:8], y[:8])) and np.isnan(c(x[8:], y[8:]))
    assert not np.isnan(c(x[8:], y[10:]))
    src = generate(fuse(optimise(trace_program(f, (arg_type(x, 0), arg_type(y, 0))))).body,
                   False).source
    assert src.startswith(emitter.HEADER)
    kernels = src[len(emitter.HEADER):]
    assert "_ld(" in kernels and "np.uint64(" not in kernels
    assert "_select(" in kernels and " if (" not in kernels
