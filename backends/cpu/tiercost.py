"""How long a call would take on the NumPy tier, and how long until compiled kernels are
ready, estimated before running it.

Why: the NumPy tier (``backends.fused``) materialises what the compiled kernels never
do, e.g. the whole ``(n, k, d)`` source of k-means' distances: its gradient at the
corpus's default size takes 5-13 s a call there (matrix products no longer: one
``einsum``, ``backends.contract_numpy``; the corpus MLP gradient went 10-15 s -> 0.2 s),
against tens of seconds to compile.  A call the NumPy tier would make that slow is
better spent waiting for the compiled kernels (``tiered``).

The estimate: the NumPy tier evaluates every scalar expression node of a loop step once per
element it computes, vectorised over the elements, so a call costs about
``SECONDS_PER_NODE_ELEMENT`` per (element, node) pair plus ``SECONDS_PER_NODE`` per node
(the evaluator's Python overhead).  ``estimate(kp, args)`` sums that over the top-level
loop steps, whose element counts are known from the arguments (shapes, and elements a
shape reads): a ``KGenerate``
computes its shape's elements; a ``KFold`` that is a matrix product costs its
multiply-adds (``SECONDS_PER_PRODUCT_TERM``: one ``einsum``), any other
``KFold``/``KScan`` its whole source (shape ++ n) and
the combination as often (one NumPy reduction when it is ``+``, ``*``, ``max`` or
``min``; else a long scan takes ``log2 n`` doubling steps over the whole source
(``fused.scan_by_doubling``), and other folds and scans loop along the rows: ``n`` steps
of the combination over every row at once, each paying the per-node overhead, which made
a 0.3 s estimate of a long scan take 30 s); a ``KPermute`` its defaults and its sources.
Steps whose shapes depend on array elements, or that follow a loop or conditional whose
results' shapes are unknown, are not counted, so the estimate is a lower bound (a loop's
iterations are not counted at all).

The wait (``wait_estimate``): loading kernels that numba's disk cache holds costs about
``LOAD_SECONDS`` (importing numba, the module, the cached functions); compiling costs
about ``COMPILE_SECONDS_PER_KERNEL`` for each loop step with no cached function (the
cache directory's ``__pycache__`` is looked at, numba is not imported), less the time
a running compilation has already spent.

The rule (``skip_numpy``): a call runs on the NumPy tier unless its estimate is over
``MIN_SECONDS`` and over the wait, i.e. unless waiting for compiled kernels would give
its result sooner.  ``$ACCEL_NUMPY_TIER_SECONDS`` replaces both by a fixed budget: a
call estimated over it skips the NumPy tier.  The constants were measured on this
(loaded, 2-core) machine with ``benchmarks/first_call.py`` and are deliberately rough:
the decision only needs the order of magnitude.
"""

from __future__ import annotations

import math
import os

import numpy as np

from accel.ast.patterns import scalar_binop
from accel.ast.traverse import walk
from accel.ast.types import ArrayT, Scalar
from accel.backends import fused, interpreter as I
from accel.backends.contract_numpy import product_of
from accel.backends.interpreter_values import ArrayValue
from accel.fusion.kernels import KFold, KGenerate, KPermute, KScan, KUse, count_loops

#: Seconds per (element, expression node) on the NumPy tier (vectorised NumPy operations
#: with their temporaries, large fold sources a block of rows at a time: ``fused``).
#: Rough: with 6 ns, the corpus's pairwise RBF, k-means and 1-D convolution gradients
#: at their default sizes were estimated at 20, 9.8 and 10.6 s and took 3.0, 1.6 and
#: 1.2 s (about 1 ns fits; it varies more than tenfold with the machine's load).  A
#: call slower than its estimate corrects the later ones (``tiered``).
SECONDS_PER_NODE_ELEMENT = 1.5e-9
#: Seconds per expression node per step (the evaluator's dispatch, NumPy call overhead).
SECONDS_PER_NODE = 4e-6
#: Seconds per multiply-add of a matrix-product fold (``backends.contract_numpy``: one
#: ``einsum``, BLAS where NumPy finds it; a batched product may loop in NumPy).
SECONDS_PER_PRODUCT_TERM = 1e-9
#: A call estimated under this always runs on the NumPy tier.
MIN_SECONDS = 0.5
#: Importing numba, loading the module and its cached kernels (GMM gradient: 1-2 s).
LOAD_SECONDS = 1.5
#: Compiling one loop step's functions cold (2.8-4.4 s measured at load 3-4, the issue: 5).
COMPILE_SECONDS_PER_KERNEL = 5.0


#: The combinations the NumPy evaluator reduces with one ufunc (``backends.interpreter``).
_UFUNCS = {"add": None, "mul": None, "max": None, "min": None}


def budget() -> float | None:
    """``$ACCEL_NUMPY_TIER_SECONDS`` (a fixed budget instead of the wait), or None."""
    v = os.environ.get("ACCEL_NUMPY_TIER_SECONDS", "").strip()
    try:
        return float(v) if v else None
    except ValueError:
        return None


def wait_estimate(kp, module_name: str, directory) -> float:
    """Seconds until the compiled kernels of ``kp`` (module ``module_name`` in the cache
    ``directory``) could run, from a standing start (module docstring)."""
    cached = set()
    try:
        for entry in os.scandir(os.path.join(directory, "__pycache__")):
            name = entry.name
            if name.startswith(module_name + ".k") and name.endswith(".nbi"):
                cached.add(name[len(module_name) + 1:].split("_", 1)[0])
    except OSError:
        pass
    missing = max(0, count_loops(kp.body) - len(cached))
    return LOAD_SECONDS + COMPILE_SECONDS_PER_KERNEL * missing


def skip_numpy(numpy_seconds: float, wait_seconds) -> bool:
    """Whether a call estimated at ``numpy_seconds`` on NumPy should wait instead
    (``wait_seconds``: a callable giving the estimated wait, asked only if needed)."""
    fixed = budget()
    if fixed is not None:
        return numpy_seconds > fixed
    return numpy_seconds > MIN_SECONDS and numpy_seconds > wait_seconds()


def _nodes(*lams) -> int:
    return sum(sum(1 for _ in walk(lam.body)) for lam in lams if lam is not None)


def _shape(e, aenv) -> tuple:
    return tuple(int(x[0]) for x in I.eval_scalar(e, aenv))


def _input(t, a) -> ArrayValue:
    """An argument for shape evaluation: its elements too when it is a plain array of
    the parameter's type (a shape may read them, e.g. sizes passed as data), else its
    shape only."""
    if (isinstance(a, np.ndarray) and isinstance(t, ArrayT) and isinstance(t.elt, Scalar)
            and a.dtype == t.elt.dtype and a.ndim == t.rank):
        return ArrayValue(a.shape, a)
    return ArrayValue(getattr(a, "shape", ()), None)


def estimate(kp, args) -> float:
    """Estimated seconds of one NumPy-tier call of ``kp`` on ``args`` (module docstring)."""
    aenv = {p.name: _input(p.type, a) for p, a in zip(kp.params, args)}
    total = 0.0
    for s in kp.body.steps:
        try:
            if isinstance(s, KUse):
                aenv[s.out.name] = ArrayValue(s.array.shape, None)
                continue
            if isinstance(s, KGenerate):
                shape = _shape(s.shape, aenv)
                pairs = [(math.prod(shape), _nodes(s.f), 1)]
                for o in s.outs:
                    aenv[o.name] = ArrayValue(shape, None)
            elif isinstance(s, KFold) and product_of(s) is not None:  # one ``einsum``
                shape = _shape(s.shape, aenv)
                rows = math.prod(shape)
                n = int(I.eval_scalar(s.n, aenv)[0])
                c = product_of(s)
                total += rows * n * SECONDS_PER_PRODUCT_TERM
                pairs = [(rows, sum(1 for e in c.post for _ in walk(e)) + len(c.scale), 1)]
                aenv[s.out.name] = ArrayValue(shape, None)
            elif isinstance(s, (KFold, KScan)):
                shape = _shape(s.shape, aenv)
                n = int(I.eval_scalar(s.n, aenv)[0])
                rows = math.prod(shape)
                length = n + (s.z is not None)
                if scalar_binop(s.f, _UFUNCS) is not None:  # one NumPy reduction
                    pairs = [(rows * n, _nodes(s.src) + 1, 1)]
                elif isinstance(s, KScan) and length >= fused.SCAN_DOUBLING_MIN:
                    # log2 steps over the whole source (``fused.scan_by_doubling``)
                    pairs = [(rows * n, _nodes(s.src), 1),
                             (rows * length, _nodes(s.f) + 4, math.ceil(math.log2(length)))]
                else:  # the evaluator's loop along the rows: n vectorised steps
                    pairs = [(rows * n, _nodes(s.src), 1), (rows, _nodes(s.f), n)]
                out = shape if isinstance(s, KFold) else shape + (n + (s.z is not None),)
                aenv[s.out.name] = ArrayValue(out, None)
            elif isinstance(s, KPermute):
                out = _shape(s.out_shape, aenv)
                shape = _shape(s.shape, aenv)
                pairs = [(math.prod(out), _nodes(s.defaults), 1),
                         (math.prod(shape), _nodes(s.target, s.value, s.comb), 1)]
                aenv[s.out.name] = ArrayValue(out, None)
            else:  # a loop or conditional: what follows may depend on its results' shapes
                continue
        except Exception:  # noqa: BLE001 - a shape that reads elements, or an unknown array
            continue
        for elements, nodes, times in pairs:  # ``times`` steps over ``elements`` each
            total += times * nodes * (elements * SECONDS_PER_NODE_ELEMENT + SECONDS_PER_NODE)
    return total
