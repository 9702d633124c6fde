"""A catalogue of bad inputs: every misuse a user can make, and what they must get.

Each case asserts the error class of API.md ("Errors"), that the message names the
operation and the offending types or shapes, that it points at the user's line (this
file) where it can, that the caller's arrays are unchanged, and that the process
survives (the risky cases run in a subprocess).  Also: NaN and infinities propagate as
IEEE values on every backend (never a crash), malformed ADBench files, and resource
safety (memory does not grow over repeated runs; a corrupted cpu cache file is rebuilt).
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap
import tracemalloc
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

import accel as A
from accel.pipeline import BACKENDS
from accel.testing.properties import usable

THIS_FILE = os.path.basename(__file__)
ROOT = Path(__file__).resolve().parents[1]

X = np.arange(6.0)
X32 = np.arange(6.0, dtype=np.float32)
M = np.arange(6.0).reshape(2, 3)
IX = np.arange(6)
B3 = np.array([True, False, True])


def run(f, *args, backend="interpreter", check_bounds=False):
    return A.run(f, *args, backend=backend, check_bounds=check_bounds)


def interp(f):
    """An action running program ``f`` on the interpreter (``.program`` is ``f``)."""
    def action(*args):
        return run(f, *args)
    action.program = f
    return action


def compiled(f):
    """An action calling ``A.compile(f)`` (interpreter) with the arguments."""
    return lambda *args: A.compile(f, backend="interpreter")(*args)


@dataclass
class Bad:
    """One misuse: ``action(*args)`` must raise ``error`` mentioning every ``contains``."""

    id: str
    error: type
    action: object
    args: tuple
    contains: tuple = ()
    located: bool = True  # the message points at this file
    marks: list = field(default_factory=list)

    def param(self):
        return pytest.param(self, id=self.id, marks=self.marks)


def _sum_of_squares(a):
    return A.sum_all(A.map(lambda v: v * v, a))


def _needs_rank1(a):
    return A.generate((2,), lambda i: a[i] * 2.0)


# --------------------------------------------------------------------------- the catalogue

CATALOGUE = [
    # -- ProgramTypeError: ill-typed programs
    Bad("mix_float32_float64", A.ProgramTypeError,
        interp(lambda a, b: A.zip_with(lambda p, q: p + q, a, b)), (X, X32),
        ("add", "float64", "float32")),
    Bad("mix_int_float", A.ProgramTypeError,
        interp(lambda a, b: A.zip_with(lambda p, q: p * q, a, b)), (X, IX),
        ("mul", "float64", "int64")),
    Bad("python_float_on_int", A.ProgramTypeError, interp(lambda a: A.map(lambda v: v + 1.5, a)),
        (IX,), ("1.5", "int64")),
    Bad("true_division_of_ints", A.ProgramTypeError, interp(lambda a: A.map(lambda v: v / 2, a)),
        (IX,), ("div", "int64")),
    Bad("sin_of_int", A.ProgramTypeError, interp(lambda a: A.map(A.sin, a)), (IX,),
        ("sin", "int64")),
    Bad("bitwise_and_of_floats", A.ProgramTypeError, interp(lambda a: A.map(lambda v: v & v, a)),
        (X,), ("and", "float64")),
    Bad("invert_a_float", A.ProgramTypeError, interp(lambda a: A.map(lambda v: ~v, a)), (X,),
        ("not", "float64")),
    Bad("map_arity", A.ProgramTypeError, interp(lambda a: A.map(lambda p, q: p, a)), (X,),
        ("map", "1 argument")),
    Bad("zip_with_arity", A.ProgramTypeError, interp(lambda a: A.zip_with(lambda p: p, a, a)),
        (X,), ("zip_with", "2 argument")),
    Bad("fold_arity", A.ProgramTypeError, interp(lambda a: A.fold(lambda p: p, 0.0, a)), (X,),
        ("fold", "2 argument")),
    Bad("cond_on_a_float", A.ProgramTypeError,
        interp(lambda a: A.map(lambda v: A.cond(v, 1.0, 2.0), a)), (X,),
        ("cond", "bool", "float64")),
    Bad("while_condition_int", A.ProgramTypeError,
        interp(lambda a: A.map(lambda v: A.while_(lambda s: s, lambda s: s - 1, v), a)), (IX,),
        ("while_", "bool", "int64")),
    Bad("acond_on_a_float", A.ProgramTypeError,
        interp(lambda a: A.acond(A.the(A.sum_all(a)), a, a)), (X,),
        ("acond", "bool", "float64")),
    Bad("awhile_condition_not_bool", A.ProgramTypeError,
        interp(lambda a: A.awhile(lambda s: A.sum_all(s), lambda s: s, a)), (X,),
        ("awhile", "bool", "float64")),
    Bad("cond_branches_differ", A.ProgramTypeError,
        interp(lambda a: A.map(lambda v: A.cond(v > 0, v, A.to_int(v)), a)), (X,),
        ("cond", "float64", "int64")),
    Bad("cond_tuple_vs_scalar", A.ProgramTypeError,
        interp(lambda a: A.map(lambda v: A.cond(v > 0, (v, v), v), a)), (X,),
        ("cond", "(float64, float64)", "float64")),
    Bad("acond_branches_differ", A.ProgramTypeError,
        interp(lambda a: A.acond(A.the(A.sum_all(a)) > 0, (a, a), a)), (X,),
        ("acond", "Array1 float64")),
    Bad("index_a_scalar_as_a_tuple", A.ProgramTypeError, interp(lambda a: A.map(lambda v: v[0], a)),
        (X,), ("index", "float64")),
    Bad("fold_of_pairs_with_scalar_op", A.ProgramTypeError,
        interp(lambda a: A.sum(A.map(lambda v: (v, v), a))), (X,),
        ("fold", "(float64, float64)")),
    Bad("fold_returns_a_triple", A.ProgramTypeError,
        interp(lambda a: A.fold(lambda p, q: (p, q, p), 0.0, a)), (X,),
        ("fold", "(float64, float64, float64)", "float64")),
    Bad("fold_seed_float_on_ints", A.ProgramTypeError,
        interp(lambda a: A.fold(lambda p, q: p + q, 0.5, a)), (IX,), ("0.5", "int64")),
    Bad("sum_of_bools", A.ProgramTypeError, interp(lambda a: A.sum(a)), (B3,), ("add", "bool")),
    Bad("python_float_index", A.ProgramTypeError,
        interp(lambda a: A.generate((2,), lambda i: a[1.5])), (X,), ("index", "1.5", "int64")),
    Bad("float_exp_index", A.ProgramTypeError,
        interp(lambda a: A.generate((2,), lambda i: a[A.to_float(i)])), (X,),
        ("index", "float64")),
    Bad("index_rank_mismatch", A.ProgramTypeError,
        interp(lambda a: A.generate((2,), lambda i: a[i])), (M,), ("index", "rank 2")),
    Bad("float_shape", A.ProgramTypeError,
        interp(lambda a: A.generate((2.5,), lambda i: 1.0)), (X,), ("generate", "2.5", "int64")),
    Bad("backpermute_index_rank", A.ProgramTypeError,
        interp(lambda a: A.backpermute((2,), lambda i: (i, i), a)), (X,),
        ("backpermute", "rank 1")),
    Bad("permute_dtypes_differ", A.ProgramTypeError,
        interp(lambda a: A.permute(lambda p, q: p + q, A.fill((2,), 0), lambda i: i % 2, a)),
        (X,), ("permute", "int64", "float64")),
    Bad("permute_combination_type", A.ProgramTypeError,
        interp(lambda a: A.permute(lambda p, q: p > q, A.fill((2,), 0.0), lambda i: i % 2, a)),
        (X,), ("permute", "bool", "float64")),
    Bad("replicate_spec_rank", A.ProgramTypeError,
        interp(lambda a: A.replicate((A.All, A.All, 2), a)), (X,), ("replicate", "rank 1")),
    Bad("replicate_float_size", A.ProgramTypeError,
        interp(lambda a: A.replicate((2.0, A.All), a)), (X,), ("replicate", "2.0")),
    Bad("slice_spec_rank", A.ProgramTypeError, interp(lambda a: A.slice(a, (A.All,))), (M,),
        ("slice", "rank 2")),
    Bad("to_float_int_dtype", A.ProgramTypeError,
        interp(lambda a: A.map(lambda v: A.to_float(v, A.int32), a)), (X,),
        ("to_float", "int32")),
    Bad("array_used_as_scalar", A.ProgramTypeError, interp(lambda a: A.map(lambda v: v + a, a)),
        (X,), ("array", "scalar")),
    Bad("unit_of_an_array", A.ProgramTypeError, interp(lambda a: A.unit(a)), (X,),
        ("array", "scalar")),
    Bad("the_of_rank1", A.ProgramTypeError, interp(lambda a: A.unit(A.the(a))), (X,),
        ("the", "rank-0", "Array1 float64")),
    Bad("python_if_on_exp", A.ProgramTypeError,
        interp(lambda a: A.map(lambda v: v if v > 0 else -v, a)), (X,),
        ("truth value", "A.cond")),
    Bad("awhile_body_type", A.ProgramTypeError,
        interp(lambda a: A.awhile(lambda s: A.unit(False), lambda s: A.map(A.to_int, s), a)),
        (X,), ("awhile", "Array1 int64", "Array1 float64")),
    Bad("while_body_type", A.ProgramTypeError,
        interp(lambda a: A.map(lambda v: A.while_(lambda s: s < 1.0, A.to_int, v), a)), (X,),
        ("while_", "int64", "float64")),
    Bad("zip_with_ranks_differ", A.ProgramTypeError,
        interp(lambda a, b: A.zip_with(lambda p, q: p + q, a, b)), (X, M),
        ("zip_with", "Array1", "Array2")),
    Bad("result_not_an_array", A.ProgramTypeError, interp(lambda a: "oops"), (X,),
        ("program result", "str")),
    # -- nested parallelism
    Bad("nested_sum_in_map", A.ProgramTypeError,
        interp(lambda a: A.map(lambda v: A.the(A.sum(a)) + v, a)), (X,),
        ("sum", "nested parallelism")),
    Bad("nested_generate_in_generate", A.ProgramTypeError,
        interp(lambda a: A.generate((2,), lambda i: A.the(A.generate((), lambda j: a[i])))),
        (X,), ("generate", "nested parallelism")),
    Bad("combinator_outside_a_program", A.ProgramTypeError,
        lambda a: A.map(lambda v: v, a), (X,), ("map", "tracing")),
    # -- arguments of run / compiled programs
    Bad("compiled_too_many_arguments", A.ProgramTypeError, compiled(lambda a: A.map(A.sin, a)),
        (X, X), ("program", "2 array argument")),
    Bad("compiled_too_few_arguments", A.ProgramTypeError,
        lambda a: A.compile(lambda a, b: a, backend="interpreter")(a), (X,),
        ("program", "1 array argument")),
    Bad("compiled_wrong_rank", A.ProgramTypeError, compiled(_needs_rank1), (M,),
        ("index", "rank 2")),
    Bad("compiled_wrong_dtype", A.ProgramTypeError, compiled(lambda a: A.map(A.sin, a)), (IX,),
        ("sin", "int64")),
    Bad("complex_argument", A.ProgramTypeError, interp(lambda a: a),
        (np.zeros(3, np.complex128),), ("complex128",)),
    Bad("float16_argument", A.ProgramTypeError, interp(lambda a: a), (np.zeros(3, np.float16),),
        ("float16",)),
    Bad("list_argument", A.ProgramTypeError, lambda: run(lambda a: a, [1.0, 2.0]), (),
        ("list",)),
    Bad("string_constant", A.ProgramTypeError, interp(lambda a: A.use(np.array(["x"]))), (X,),
        ("use", "<U1")),
    Bad("jvp_tangent_dtype", A.ProgramTypeError,
        lambda a: A.jvp(lambda x: A.map(A.sin, x), (a,), (a.astype(np.float32),),
                        backend="interpreter"), (X,), ("jvp", "float32", "float64")),
    Bad("jvp_tangent_count", A.ProgramTypeError,
        lambda a: A.jvp(lambda x: A.map(A.sin, x), (a,), (), backend="interpreter"), (X,),
        ("jvp", "1 primals", "0 tangents")),
    Bad("python_float_in_max_on_ints", A.ProgramTypeError,
        interp(lambda a: A.map(lambda v: A.max(v, 1.5), a)), (IX,), ("max", "1.5", "int64")),
    # -- ShapeError
    Bad("reshape_size", A.ShapeError, interp(lambda a: A.reshape((4,), a)), (X,),
        ("reshape", "(6,)", "(4,)")),
    Bad("reshape_rank2_size", A.ShapeError, interp(lambda a: A.reshape((4, 2), a)), (M,),
        ("reshape", "(2, 3)", "(4, 2)")),
    Bad("fold1_empty", A.ShapeError, interp(lambda a: A.fold1(lambda p, q: p + q, a)),
        (np.zeros((2, 0)),), ("fold1", "empty", "(2, 0)")),
    Bad("maximum_empty", A.ShapeError, interp(A.maximum), (np.zeros(0),), ("empty", "(0,)")),
    Bad("negative_generate", A.ShapeError,
        interp(lambda a: A.generate((a.shape[0] - 10,), lambda i: i)), (X,),
        ("generate", "negative", "(-4,)")),
    Bad("negative_replicate", A.ShapeError, interp(lambda a: A.replicate((-2, A.All), a)), (X,),
        ("replicate", "negative")),
    Bad("jvp_tangent_shape", A.ShapeError,
        lambda a: A.jvp(lambda x: A.map(A.sin, x), (a,), (np.ones(3),), backend="interpreter"),
        (X,), ("jvp", "(3,)", "(6,)")),
    Bad("vjp_cotangent_shape", A.ShapeError,
        lambda a: A.vjp(lambda x: A.map(A.sin, x), a)[1](np.ones(3)), (X,),
        ("vjp", "(3,)", "(6,)")),
    # -- OutOfBoundsError (interpreter; the other backends below, with check_bounds=True)
    Bad("index_too_large", A.OutOfBoundsError,
        interp(lambda a: A.generate((3,), lambda i: a[i + 4])), (X,),
        ("index", "(6,)", "out of bounds")),
    Bad("index_negative", A.OutOfBoundsError,
        interp(lambda a: A.generate((3,), lambda i: a[i - 1])), (X,), ("index", "(-1,)", "(6,)")),
    Bad("backpermute_source", A.OutOfBoundsError,
        interp(lambda a: A.backpermute((4,), lambda i: 2 * i, a)), (X,), ("(6,)",)),
    Bad("permute_target", A.OutOfBoundsError,
        interp(lambda a: A.permute(lambda p, q: p + q, A.fill((3,), 0.0), lambda i: i, a)), (X,),
        ("permute", "(3,)")),
    Bad("slice_index", A.OutOfBoundsError, interp(lambda a: A.slice(a, (A.All, 3))), (M,),
        ("slice", "3", "(2, 3)")),
    Bad("top_level_index", A.OutOfBoundsError, interp(lambda a: A.unit(a[6])), (X,), ("(6,)",)),
    # -- NotDifferentiableError
    Bad("gradient_of_a_vector", A.NotDifferentiableError,
        interp(A.gradientA(lambda a: A.map(A.sin, a))), (X,), ("gradientA", "Array1 float64")),
    Bad("gradient_of_an_int", A.NotDifferentiableError,
        interp(A.gradientA(lambda a: A.sum_all(A.map(A.to_int, a)))), (X,),
        ("gradientA", "int64")),
    Bad("gradient_of_a_tuple", A.NotDifferentiableError,
        interp(A.gradientA(lambda a: (A.sum_all(a), A.sum_all(a)))), (X,), ("gradientA",)),
    Bad("gradient_wrt_int", A.NotDifferentiableError,
        interp(A.gradientA(lambda a, b: A.sum_all(a), wrt=1)), (X, IX),
        ("gradientA", "parameter 1", "int64")),
    Bad("gradientE_int_result", A.NotDifferentiableError,
        interp(lambda a: A.map(A.gradientE(lambda v: v * 2), a)), (IX,),
        ("gradientE", "int64")),
    # -- BackendError
    Bad("unknown_backend", A.BackendError, lambda a: A.run(lambda x: x, a, backend="nosuch"),
        (X,), ("nosuch", "interpreter")),
    Bad("unknown_backend_compile", A.BackendError, lambda: A.compile(lambda x: x, backend="gpu"),
        (), ("gpu",)),
]
if "cuda" not in BACKENDS:
    CATALOGUE.append(Bad("cuda_unavailable", A.BackendError,
                         lambda a: A.run(lambda x: x, a, backend="cuda"), (X,), ("cuda",)))


def test_the_catalogue_is_large_and_covers_every_error_class():
    assert len(CATALOGUE) >= 30
    classes = {c.error for c in CATALOGUE}
    assert classes >= {A.ProgramTypeError, A.ShapeError, A.OutOfBoundsError,
                       A.NotDifferentiableError, A.BackendError}
    assert len({c.id for c in CATALOGUE}) == len(CATALOGUE)


def _assert_unchanged(args, saved):
    for a, s in zip(args, saved):
        if isinstance(a, np.ndarray):
            assert a.dtype == s.dtype and a.shape == s.shape
            np.testing.assert_array_equal(a, s)
        else:
            assert a == s


def expect(case: Bad):
    saved = [np.array(a, copy=True) if isinstance(a, np.ndarray) else a for a in case.args]
    try:
        with pytest.raises(case.error) as info:
            case.action(*case.args)
    finally:
        _assert_unchanged(case.args, saved)
    err = info.value
    assert isinstance(err, A.AccelError), type(err)
    msg = str(err)
    for s in case.contains:
        assert s in msg, f"{s!r} not in {msg!r}"
    if case.located:
        assert THIS_FILE in msg, f"the message does not point at the user's line: {msg!r}"
    return msg


@pytest.mark.parametrize("case", [c.param() for c in CATALOGUE])
def test_bad_input(case):
    expect(case)


# --------------------------------------------------------------------------- bounds, backends

KERNEL_BACKENDS = [b for b in BACKENDS if b != "interpreter" and usable(b)]
OOB = [c for c in CATALOGUE if c.error is A.OutOfBoundsError]


@pytest.mark.parametrize("backend", KERNEL_BACKENDS)
@pytest.mark.parametrize("case", [c.param() for c in OOB])
def test_out_of_bounds_detected_by_every_backend_with_check_bounds(backend, case):
    prog = case.action.program
    bad = Bad(case.id, case.error,
              lambda *a: run(prog, *a, backend=backend, check_bounds=True), case.args,
              tuple(s for s in case.contains if s.startswith("(")))
    expect(bad)


def _in_subprocess(code: str, timeout=600):
    """Run ``code`` in a fresh interpreter: (returncode, stdout + stderr)."""
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT,
                       capture_output=True, text=True, timeout=timeout,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    return r.returncode, r.stdout + r.stderr


_SURVIVES = """
import numpy as np, accel as A
x = np.arange(6.0)
saved = x.copy()
try:
    A.run({prog}, x, backend={backend!r})
    print("RAN")
except Exception as e:
    print("RAISED", type(e).__name__)
assert np.array_equal(x, saved)
print("ALIVE")
"""


def _xfail_on(backends, params, reason):
    """``params`` (backend, *rest) tuples, strictly xfailed for the listed backends."""
    return [pytest.param(*p, id="-".join(map(str, p[:2])),
                         marks=[pytest.mark.xfail(strict=True, reason=reason)]
                         if p[0] in backends else [])
            for p in params]


_RISKY_OOB = {
    "index": "lambda a: A.generate((3,), lambda i: a[i + 100000000])",
    "permute": "lambda a: A.permute(lambda p, q: p + q, A.fill((3,), 0.0), "
               "lambda i: i + 10000000, a)",
}


@pytest.mark.parametrize("backend, what", _xfail_on(
    ["cpu"], [(b, w) for b in KERNEL_BACKENDS for w in _RISKY_OOB],
    "cpu backend, check_bounds=False: an out-of-bounds read or permute write is not checked "
    "(documented as undefined behaviour in backends/cpu) and segfaults the process (exit -11), "
    "against API.md 'a bad program never crashes the Python process'"))
def test_out_of_bounds_without_check_bounds_does_not_crash(backend, what):
    """check_bounds=False may give garbage (API.md), but never kills the process."""
    rc, out = _in_subprocess(_SURVIVES.format(prog=_RISKY_OOB[what], backend=backend))
    assert rc == 0 and "ALIVE" in out, (rc, out)


_PATHOLOGICAL = {
    "1500_chained_maps": "lambda a: __import__('functools').reduce("
                         "lambda x, _: A.map(lambda v: v + 1.0, x), range(1500), a)",
    "huge_allocation": "lambda a: A.fill((10 ** 6, 10 ** 7), 0.0)",
}


@pytest.mark.parametrize("backend, what",
                         [(b, "1500_chained_maps") for b in ["interpreter"] + KERNEL_BACKENDS])
def test_long_programs_run(backend, what):
    rc, out = _in_subprocess(_SURVIVES.format(prog=_PATHOLOGICAL[what], backend=backend))
    assert rc == 0 and "ALIVE" in out and "RAN" in out, (rc, out)


@pytest.mark.parametrize("backend", ["interpreter"] + KERNEL_BACKENDS)
def test_huge_allocation_raises_and_does_not_crash(backend):
    rc, out = _in_subprocess(_SURVIVES.format(prog=_PATHOLOGICAL["huge_allocation"],
                                              backend=backend))
    assert rc == 0 and "ALIVE" in out, (rc, out)
    # 80 TB: NumPy's (or numba's) MemoryError is a fair answer; it must not be a crash
    assert "RAISED" in out and ("MemoryError" in out or "Error" in out), out


def test_cuda_without_a_gpu_or_simulator_is_a_backend_error():
    if "cuda" not in BACKENDS:
        pytest.skip("no cuda backend")
    if os.path.exists("/proc/driver/nvidia/gpus"):
        pytest.skip("this machine has a GPU")
    code = """
    import numpy as np, accel as A
    x = np.arange(3.0)
    try:
        A.run(lambda a: A.map(lambda v: v + 1.0, a), x, backend="cuda")
    except A.BackendError as e:
        print("BACKENDERROR", e)
    assert np.array_equal(x, np.arange(3.0))
    """
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, timeout=600,
                       capture_output=True, text=True, env={**env, "PYTHONPATH": str(ROOT)})
    assert r.returncode == 0, r.stdout + r.stderr
    assert "BACKENDERROR" in r.stdout and "cuda" in r.stdout, r.stdout + r.stderr


# --------------------------------------------------------------------------- NaN, infinities

SPECIAL = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 1e308])

IEEE = [  # (id, program, NumPy reference)
    ("sin", lambda a: A.map(A.sin, a), np.sin),
    ("exp", lambda a: A.map(A.exp, a), np.exp),
    ("log", lambda a: A.map(A.log, a), np.log),
    ("sqrt", lambda a: A.map(A.sqrt, a), np.sqrt),
    ("div", lambda a: A.map(lambda v: 1.0 / v, a), lambda x: 1.0 / x),
    ("zero_div", lambda a: A.map(lambda v: v / 0.0, a), lambda x: x / 0.0),
    ("square", lambda a: A.map(lambda v: v * v, a), lambda x: x * x),
    ("max", lambda a: A.map(lambda v: A.max(v, 0.5), a), lambda x: np.maximum(x, 0.5)),
    ("min", lambda a: A.map(lambda v: A.min(0.5, v), a), lambda x: np.minimum(0.5, x)),
    ("abs_neg", lambda a: A.map(lambda v: -abs(v), a), lambda x: -np.abs(x)),
    ("compare", lambda a: A.map(lambda v: v > 0.0, a), lambda x: x > 0.0),
    ("cond", lambda a: A.map(lambda v: A.cond(v == v, v, 7.0), a),
     lambda x: np.where(x == x, x, 7.0)),
    ("floor", lambda a: A.map(A.floor, a), np.floor),
    ("atan2", lambda a: A.map(lambda v: A.atan2(v, 1.0), a), lambda x: np.arctan2(x, 1.0)),
    ("sum", lambda a: A.sum(a), lambda x: np.array(np.sum(x))),
    ("sum_finite", lambda a: A.sum(A.map(lambda v: A.cond(abs(v) < 1e300, v, 0.0), a)),
     lambda x: np.array(np.sum(np.where(np.abs(x) < 1e300, x, 0.0)))),
    ("maximum", lambda a: A.maximum(a), lambda x: np.array(np.max(x))),
    ("scanl1_mul", lambda a: A.scanl1(lambda p, q: p * q, a), np.cumprod),
]


@pytest.mark.parametrize("backend", ["interpreter"] + KERNEL_BACKENDS)
@pytest.mark.parametrize("name, prog, ref", IEEE, ids=[c[0] for c in IEEE])
def test_nan_and_infinities_propagate_as_ieee_values(backend, name, prog, ref):
    x = SPECIAL.copy()
    with np.errstate(all="ignore"):
        want = ref(SPECIAL)
        out = run(prog, x, backend=backend)
    np.testing.assert_array_equal(x, SPECIAL)
    assert out.dtype == want.dtype and out.shape == want.shape
    np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("backend", ["interpreter"] + KERNEL_BACKENDS)
def test_gradient_at_an_undefined_point_is_ieee_not_a_silent_number(backend):
    g = A.gradientA(lambda a: A.sum_all(A.map(A.sqrt, a)))
    out = run(g, np.array([0.0, 4.0]), backend=backend)
    assert np.isinf(out[0]) and out[1] == 0.25
    out = run(g, np.array([np.nan, np.inf]), backend=backend)
    assert np.isnan(out[0]) and out[1] == 0.0


# --------------------------------------------------------------------------- ADBench files

def _gmm_text():
    return (ROOT / "adbench" / "data" / "gmm" / "test.txt").read_text()


MALFORMED_GMM = [
    ("empty", ""),
    ("truncated", lambda t: "\n".join(t.splitlines()[:6]) + "\n"),
    ("not_a_number", lambda t: t.replace("-0.649014", "-0.64x014", 1)),
    ("bad_header", lambda t: "2 three 1\n" + "\n".join(t.splitlines()[1:])),
    ("negative_size", lambda t: "2 -3 1\n" + "\n".join(t.splitlines()[1:])),
    ("nan_value", lambda t: t.replace("-0.649014", "nan", 1)),
    ("extra_data", lambda t: t + "1 2 3\n"),
    ("binary_garbage", b"\x00\xff\xfe\x89PNG\r\n\x1a\n"),
]


@pytest.mark.parametrize("name, edit", MALFORMED_GMM, ids=[m[0] for m in MALFORMED_GMM])
def test_malformed_adbench_files(tmp_path, name, edit):
    io = pytest.importorskip("accel.adbench.io")
    path = tmp_path / f"gmm_{name}.txt"
    if isinstance(edit, bytes):
        path.write_bytes(edit)
    else:
        path.write_text(edit if isinstance(edit, str) else edit(_gmm_text()))
    with pytest.raises(A.AccelError) as info:
        io.read_gmm(path)
    assert isinstance(info.value, ValueError)
    assert str(path) in str(info.value) or path.name in str(info.value)


def test_missing_adbench_file(tmp_path):
    io = pytest.importorskip("accel.adbench.io")
    with pytest.raises(A.AccelError) as info:
        io.read_gmm(tmp_path / "nosuch.txt")
    assert "nosuch.txt" in str(info.value)


# --------------------------------------------------------------------------- resources


def _program(a, b):
    s = A.sum(A.zip_with(lambda p, q: A.sin(p) * q, a, b))
    return A.map(lambda v: v * 2.0 + 1.0, s)


@pytest.mark.parametrize("backend", ["interpreter", "fused"])
def test_repeated_runs_do_not_grow_memory(backend):
    a, b = np.random.default_rng(0).random((2, 8, 8))
    f = A.compile(_program, backend=backend)
    for _ in range(20):  # warm up: compile, caches
        f(a, b)
        run(_program, a, b, backend=backend)
    gc.collect()
    tracemalloc.start()
    try:
        base, _ = tracemalloc.get_traced_memory()
        for _ in range(200):
            f(a, b)
        gc.collect()
        after_compiled, _ = tracemalloc.get_traced_memory()
        for _ in range(100):
            run(_program, a, b, backend=backend)  # traces and compiles every time
        gc.collect()
        after_run, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert after_compiled - base < 256 * 1024, after_compiled - base
    assert after_run - base < 2 * 1024 * 1024, after_run - base


_CACHED_RUN = """
import numpy as np, accel as A
out = A.run(lambda a: A.map(lambda v: v * 3.0 + 1.0, a), np.arange(4.0), backend="cpu")
assert np.array_equal(out, np.arange(4.0) * 3.0 + 1.0), out
print("OK")
"""


def _cpu_cache(tmp_path):
    if not usable("cpu"):
        pytest.skip("the cpu backend is not available")
    cache = pytest.importorskip("accel.backends.numba.cache")
    if not hasattr(cache, "cache_dir"):
        pytest.skip("the cpu backend does not expose its cache directory")
    env = {"ACCEL_CACHE_DIR": str(tmp_path)}
    rc, out = _in_subprocess_env(_CACHED_RUN, env)
    assert rc == 0 and "OK" in out, out
    return env


def test_corrupted_cpu_cache_module_is_rebuilt(tmp_path):
    env = _cpu_cache(tmp_path)
    files = sorted(tmp_path.rglob("accel_*.py"))
    assert files, sorted(tmp_path.rglob("*"))
    files[0].write_text("def broken(:\n")  # a syntax error
    for p in files[1:]:
        p.write_bytes(b"\x00garbage")
    rc, out = _in_subprocess_env(_CACHED_RUN, env)
    assert rc == 0 and "OK" in out, out
    for p in files:
        text = p.read_text()
        assert "garbage" not in text and "broken(" not in text
    rc, out = _in_subprocess_env(_CACHED_RUN, env)  # and the rebuilt cache is usable again
    assert rc == 0 and "OK" in out, out


@pytest.mark.parametrize("suffix", [".nbi", ".nbc"])
def test_corrupted_numba_cache_file_is_rebuilt(tmp_path, suffix):
    env = _cpu_cache(tmp_path)
    files = sorted(p for p in tmp_path.rglob("*") if p.suffix == suffix)
    assert files, sorted(tmp_path.rglob("*"))
    for p in files:  # truncated, as by a full disk or a killed writer
        p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])
    rc, out = _in_subprocess_env(_CACHED_RUN, env)
    assert rc == 0 and "OK" in out, out


def _in_subprocess_env(code: str, env: dict, timeout=600):
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT,
                       capture_output=True, text=True, timeout=timeout,
                       env={**os.environ, "PYTHONPATH": str(ROOT), **env})
    return r.returncode, r.stdout + r.stderr
