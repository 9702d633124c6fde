"""Every error class of API.md provoked by a representative bad program.

Each message must name the operation and the offending types or shapes and point at the
user's line (this file); the caller's arrays are never mutated or aliased, whether the
run succeeds or fails.  Also: ``A.compile`` compiles once per (dtype, rank) signature.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import accel as A

THIS_FILE = os.path.basename(__file__)


def run(f, *args):
    return A.run(f, *args, backend="interpreter")


def run_checked(f, *args):
    """``run`` that asserts the caller's arrays are unchanged, even if it raises."""
    saved = [np.array(a, copy=True) for a in args]
    try:
        out = run(f, *args)
    finally:
        for a, s in zip(args, saved):
            assert a.dtype == s.dtype and a.shape == s.shape
            np.testing.assert_array_equal(a, s)
    for leaf in _leaves(out):
        for a in args:
            assert not np.shares_memory(leaf, a)
    return out


def _leaves(v):
    if isinstance(v, tuple):
        return [x for item in v for x in _leaves(item)]
    return [v]


def raises(cls, f, *args, contains=()):
    """Run ``f`` on ``args``, expect ``cls``; check the message and the caller's arrays."""
    with pytest.raises(cls) as info:
        run_checked(f, *args)
    msg = str(info.value)
    assert isinstance(info.value, A.AccelError)
    for s in contains:
        assert s in msg, (s, msg)
    assert THIS_FILE in msg, msg  # points at the user's line
    return msg


X = np.arange(6.0)
X32 = np.arange(6.0, dtype=np.float32)
M = np.arange(6.0).reshape(2, 3)
IX = np.arange(6)


# --------------------------------------------------------------------------- classes


def test_error_classes_are_also_builtin_exceptions():
    assert issubclass(A.ProgramTypeError, TypeError)
    assert issubclass(A.ShapeError, ValueError)
    assert issubclass(A.OutOfBoundsError, IndexError)
    assert issubclass(A.NotDifferentiableError, TypeError)
    assert issubclass(A.BackendError, RuntimeError)
    for c in (A.ProgramTypeError, A.ShapeError, A.OutOfBoundsError, A.NotDifferentiableError,
              A.BackendError):
        assert issubclass(c, A.AccelError)


# --------------------------------------------------------------------------- ProgramTypeError


def test_mixing_float32_and_float64():
    raises(A.ProgramTypeError, lambda a, b: A.zip_with(lambda p, q: p + q, a, b),
           X, X32, contains=("add", "float64", "float32"))


def test_mixing_int_and_float_and_python_float_on_int():
    raises(A.ProgramTypeError, lambda a, b: A.zip_with(lambda p, q: p * q, a, b), X, IX,
           contains=("mul", "float64", "int64"))
    raises(A.ProgramTypeError, lambda a: A.map(lambda v: v + 1.5, a), IX,
           contains=("1.5", "int64"))
    raises(A.ProgramTypeError, lambda a: A.map(lambda v: v / 2, a), IX,
           contains=("div", "int64"))


def test_fold_function_returning_the_wrong_type():
    raises(A.ProgramTypeError, lambda a: A.fold(lambda p, q: p < q, 0.0, a), X,
           contains=("fold", "bool", "float64"))
    raises(A.ProgramTypeError, lambda a: A.fold(lambda p, q: A.to_int(p + q), 0.0, a), X,
           contains=("fold", "int64", "float64"))
    # a seed of the wrong type
    raises(A.ProgramTypeError, lambda a: A.fold(lambda p, q: p + q, 0.5, a), IX,
           contains=("0.5", "int64"))


def test_map_result_of_wrong_type_for_fold():
    # map makes bools; folding them with + is ill-typed
    raises(A.ProgramTypeError, lambda a: A.sum(A.map(lambda v: v > 0.0, a)), X,
           contains=("add", "bool"))
    # map makes pairs; a scalar seed does not fit
    raises(A.ProgramTypeError,
           lambda a: A.fold(lambda p, q: p, 0.0, A.map(lambda v: (v, v), a)), X,
           contains=("fold",))


def test_non_bool_conditions():
    raises(A.ProgramTypeError, lambda a: A.map(lambda v: A.cond(v, 1.0, 2.0), a), X,
           contains=("cond", "bool", "float64"))
    raises(A.ProgramTypeError,
           lambda a: A.map(lambda v: A.while_(lambda s: s, lambda s: s * 2.0, v), a), X,
           contains=("while_", "bool", "float64"))
    raises(A.ProgramTypeError, lambda a: A.acond(A.the(A.sum_all(a)), a, a), X,
           contains=("acond", "bool", "float64"))
    raises(A.ProgramTypeError, lambda a: A.awhile(lambda s: s, lambda s: s, a), X,
           contains=("awhile", "bool"))


def test_cond_branches_of_different_types():
    raises(A.ProgramTypeError, lambda a: A.map(lambda v: A.cond(v > 0, v, A.to_int(v)), a), X,
           contains=("cond", "float64", "int64"))
    raises(A.ProgramTypeError,
           lambda a: A.acond(A.the(A.sum_all(a)) > 0, a, A.map(A.to_int, a)), X,
           contains=("acond", "float64", "int64"))


def test_wrong_arity_lambdas():
    raises(A.ProgramTypeError, lambda a: A.map(lambda p, q: p, a), X,
           contains=("map", "1 argument"))
    raises(A.ProgramTypeError, lambda a: A.zip_with(lambda p: p, a, a), X,
           contains=("zip_with", "2 argument"))
    raises(A.ProgramTypeError, lambda a: A.fold(lambda p: p, 0.0, a), X,
           contains=("fold", "2 argument"))
    raises(A.ProgramTypeError, lambda a: A.generate((3,), lambda i, j: i), X,
           contains=("generate",))
    raises(A.ProgramTypeError, lambda a, b: A.map(lambda v: v, a), X,
           contains=("program", "1 array argument", "'b'"))


def test_nested_parallelism():
    for name, inner in [("sum", A.sum), ("sum_all", A.sum_all),
                        ("map", lambda x: A.map(lambda w: w, x))]:
        msg = raises(A.ProgramTypeError, lambda a: A.map(lambda v: A.the(inner(a)) + v, a), X,
                     contains=("nested parallelism", "scalar function"))
        assert msg.startswith(name + ":"), msg


def test_python_if_on_an_exp():
    def prog(a):
        def f(v):
            if v > 0:
                return v
            return -v
        return A.map(f, a)
    raises(A.ProgramTypeError, prog, X, contains=("truth value", "A.cond"))

    def top(a):
        if A.the(A.sum_all(a)) > 0:
            return a
        return a
    raises(A.ProgramTypeError, top, X, contains=("truth value",))

    def acc_if(a):
        return a if a else a
    raises(A.ProgramTypeError, acc_if, X, contains=("A.acond",))


def test_zip_with_of_different_ranks_is_a_type_error():
    # ranks are part of the type: a ProgramTypeError (sizes are the ShapeError's business)
    raises(A.ProgramTypeError, lambda a, b: A.zip_with(lambda p, q: p + q, a, b), X, M,
           contains=("zip_with", "Array1", "Array2"))


def test_bad_indexing_and_targets():
    raises(A.ProgramTypeError, lambda a: A.generate((2,), lambda i: a[i]), M,
           contains=("index", "rank 2"))
    raises(A.ProgramTypeError, lambda a: A.generate((2,), lambda i: a[A.to_float(i)]), X,
           contains=("index", "float64"))
    raises(A.ProgramTypeError, lambda a: A.backpermute((2,), lambda i: (i, i), a), X,
           contains=("backpermute", "rank 1"))
    raises(A.ProgramTypeError,
           lambda a: A.permute(lambda p, q: p + q, A.fill((2, 2), 0.0), lambda i: i, a), X,
           contains=("permute", "rank 2"))
    raises(A.ProgramTypeError,
           lambda a: A.permute(lambda p, q: p + q, A.fill((2,), 0), lambda i: i, a), X,
           contains=("permute", "int64", "float64"))


def test_bad_specifiers_and_conversions():
    raises(A.ProgramTypeError, lambda a: A.replicate((A.All, A.All, 2), a), X,
           contains=("replicate", "rank 1"))
    raises(A.ProgramTypeError, lambda a: A.slice(a, (A.All,)), M,
           contains=("slice", "rank 2"))
    raises(A.ProgramTypeError, lambda a: A.map(lambda v: A.to_float(v, A.int32), a), X,
           contains=("to_float", "int32"))
    raises(A.ProgramTypeError, lambda a: A.map(lambda v: A.to_int(v, A.float32), a), X,
           contains=("to_int", "float32"))
    raises(A.ProgramTypeError, lambda a: A.map(lambda v: v + a, a), X,
           contains=("array", "scalar"))
    raises(A.ProgramTypeError, lambda a: A.map(lambda v: A.sin(v), a), IX,
           contains=("sin", "int64"))
    raises(A.ProgramTypeError, lambda a: A.the(a), X, contains=("the", "rank-0"))


def test_bad_arguments_to_run():
    with pytest.raises(A.ProgramTypeError) as info:
        run(lambda a: a, np.zeros(3, dtype=np.complex128))
    assert "complex128" in str(info.value) and THIS_FILE in str(info.value)
    with pytest.raises(A.ProgramTypeError) as info:
        run(lambda a: a, [1.0, 2.0])
    assert "list" in str(info.value)


def test_combinator_outside_a_program():
    with pytest.raises(A.ProgramTypeError) as info:
        A.map(lambda v: v, np.zeros(3))
    assert "map" in str(info.value) and THIS_FILE in str(info.value)


# --------------------------------------------------------------------------- ShapeError


def test_bad_reshape():
    raises(A.ShapeError, lambda a: A.reshape((4,), a), X,
           contains=("reshape", "(6,)", "(4,)"))
    raises(A.ShapeError, lambda a: A.reshape((4, 2), a), M,
           contains=("reshape", "(2, 3)", "(4, 2)"))


def test_fold1_and_maximum_on_an_empty_inner_dimension():
    raises(A.ShapeError, lambda a: A.fold1(lambda p, q: p + q, a), np.zeros((2, 0)),
           contains=("fold1", "empty", "(2, 0)"))
    raises(A.ShapeError, A.maximum, np.zeros(0), contains=("empty", "(0,)"))
    raises(A.ShapeError, A.minimum, np.zeros((3, 0), np.int32), contains=("empty",))


def test_negative_sizes():
    raises(A.ShapeError, lambda a: A.generate((a.shape[0] - 10,), lambda i: i), X,
           contains=("generate", "negative", "(-4,)"))
    raises(A.ShapeError, lambda a: A.fill((-1, 2), 0.0), X, contains=("negative",))
    raises(A.ShapeError, lambda a: A.replicate((-2, A.All), a), X,
           contains=("replicate", "negative"))


# --------------------------------------------------------------------------- OutOfBounds


def test_index_too_large_and_negative():
    raises(A.OutOfBoundsError, lambda a: A.generate((3,), lambda i: a[i + 4]), X,
           contains=("index", "(6,) is out of bounds", "shape (6,)"))
    raises(A.OutOfBoundsError, lambda a: A.generate((3,), lambda i: a[i - 1]), X,
           contains=("index", "(-1,)", "(6,)"))
    raises(A.OutOfBoundsError, lambda a: A.generate((2, 3), lambda ix: a[ix[1], ix[0]]), M,
           contains=("index", "(2, 3)"))
    raises(A.OutOfBoundsError, lambda a: A.unit(a[6]), X, contains=("(6,)",))


def test_backpermute_source_out_of_bounds():
    raises(A.OutOfBoundsError, lambda a: A.backpermute((4,), lambda i: 2 * i, a), X,
           contains=("backpermute", "(6,)"))
    raises(A.OutOfBoundsError, lambda a: A.backpermute((2,), lambda i: -1 - i, a), X,
           contains=("backpermute", "(-1,)"))


def test_permute_target_out_of_range():
    raises(A.OutOfBoundsError,
           lambda a: A.permute(lambda p, q: p + q, A.fill((3,), 0.0), lambda i: i, a), X,
           contains=("permute", "(3,)"))
    raises(A.OutOfBoundsError,
           lambda a: A.permute(lambda p, q: p + q, A.fill((3,), 0.0), lambda i: i - 1, a), X,
           contains=("permute", "(-1,)"))
    # ignored sources are not checked
    out = run_checked(lambda a: A.permute(lambda p, q: p + q, A.fill((3,), 0.0),
                                          lambda i: A.cond(i < 3, i, A.ignore), a), X)
    np.testing.assert_array_equal(out, X[:3])


def test_slice_out_of_bounds():
    raises(A.OutOfBoundsError, lambda a: A.slice(a, (A.All, 3)), M,
           contains=("slice", "3", "(2, 3)"))


# --------------------------------------------------------------------------- BackendError


def test_unknown_backend():
    with pytest.raises(A.BackendError) as info:
        A.run(lambda a: a, X, backend="nosuch")
    msg = str(info.value)
    assert "nosuch" in msg and "interpreter" in msg and THIS_FILE in msg
    with pytest.raises(A.BackendError):
        A.compile(lambda a: a, backend="nosuch")


# --------------------------------------------------------------------------- no mutation


def test_caller_arrays_are_never_mutated_or_aliased():
    d = np.zeros(3)
    src = np.arange(4.0)
    # permute writes into (a copy of) its defaults, which here is the caller's array
    out = run_checked(lambda dd, s: A.permute(lambda p, q: p + q, dd, lambda i: i % 3, s),
                      d, src)
    np.testing.assert_array_equal(out, [3.0, 1.0, 2.0])
    # identity programs, reshapes, slices, tuples and loops return copies
    run_checked(lambda a: a, X)
    run_checked(lambda a: (a, a), X)
    run_checked(lambda a: A.reshape((3, 2), a), X)
    run_checked(lambda a: A.slice(a, (1, A.All)), M)
    run_checked(lambda a: A.acond(True, a, a), X)
    run_checked(lambda a: A.awhile(lambda s: A.unit(False), lambda s: s, a), X)
    run_checked(lambda a, b: A.zip(a, b), X, IX)
    run_checked(lambda a: A.map(lambda v: v, a), np.array(2.0))
    # two results never alias each other either
    r1, r2 = run(lambda a: (a, a), X)
    r1[0] = 100.0
    assert r2[0] == 0.0 and X[0] == 0.0


def test_use_constant_is_not_aliased_or_mutated():
    c = np.arange(3.0)
    f = A.compile(lambda a: A.permute(lambda p, q: p + q, A.use(c), lambda i: i % 3, a),
                  backend="interpreter")
    out1 = f(np.ones(3))
    out2 = f(np.ones(3))
    np.testing.assert_array_equal(c, np.arange(3.0))
    np.testing.assert_array_equal(out1, out2)
    assert not np.shares_memory(out1, c)


def test_failed_runs_leave_arrays_intact_and_process_alive():
    a = np.arange(5.0)
    for prog in (lambda x: A.generate((9,), lambda i: x[i]),
                 lambda x: A.reshape((7,), x),
                 lambda x: A.permute(lambda p, q: p + q, x, lambda i: i + 1, x)):
        with pytest.raises(A.AccelError):
            run_checked(prog, a)
    np.testing.assert_array_equal(a, np.arange(5.0))


# --------------------------------------------------------------------------- compile


def test_compile_once_per_signature_and_any_size():
    calls = []

    def prog(a):
        calls.append(a.type)
        return A.map(lambda v: v * 2, a)

    c = A.compile(prog, backend="interpreter")
    for n in (0, 1, 3, 17):
        np.testing.assert_array_equal(c(np.arange(float(n))), 2 * np.arange(float(n)))
    assert len(c._cache) == 1 and len(calls) == 1
    np.testing.assert_array_equal(c(np.arange(4, dtype=np.float32)),
                                  2 * np.arange(4, dtype=np.float32))
    assert len(c._cache) == 2
    for shape in [(2, 3), (0, 5), (4, 1)]:
        x = np.ones(shape)
        np.testing.assert_array_equal(c(x), 2 * x)
    assert len(c._cache) == 3
    c(np.arange(5))
    c(np.arange(5, dtype=np.int32))
    assert len(c._cache) == 5 and len(calls) == 5
    # .program and .stats for a known signature do not retrace
    text = c.program(np.arange(3.0))
    assert "Map" in text
    assert c.stats(np.arange(3.0))["kernels"] >= 1
    assert len(c._cache) == 5 and len(calls) == 5


def test_compile_errors_point_at_the_call():
    c = A.compile(lambda a: A.generate((3,), lambda i: a[i]), backend="interpreter")
    np.testing.assert_array_equal(c(np.arange(4.0)), np.arange(3.0))
    with pytest.raises(A.OutOfBoundsError) as info:
        c(np.arange(2.0))
    assert THIS_FILE in str(info.value)


def test_rank0_arguments_stay_rank0():
    # NumPy scalars, 0-d arrays and Python numbers are rank-0 arrays (not rank 1)
    c = A.compile(lambda a: A.unit(A.the(a) * 2), backend="interpreter")
    for x in (np.float64(1.5), np.array(1.5), 1.5):
        out = c(x)
        assert isinstance(out, np.ndarray) and out.shape == () and out == 3.0
    assert len(c._cache) == 1
    (sig,) = c._cache
    assert sig[0].rank == 0
