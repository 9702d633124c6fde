"""How the cpu host cuts a phase's tasks into chunks for its parallel driver
(``backends/cpu/plan.calls``): many small chunks per thread for the loop phases (they
balance uneven work), one per thread for a matrix product's BLAS phase ``mm``, whose
every chunk packs the other operand again (``emitter.MM_TASKS_PER_THREAD``)."""

from __future__ import annotations

import numpy as np

import accel as A
from accel.backends.cpu.emitter import PAR_MIN_WORK, PAR_TASKS_PER_THREAD
from accel.backends.cpu.plan import KernelPlan, calls, num_threads


def _plan():
    return KernelPlan(step=None, fn="k0", inputs=[], layout=[], sites=[],
                      parallel=["mm", "g"])


def test_blas_phase_runs_one_chunk_per_thread():
    (name, (ntask, nch), counter), = calls(_plan(), [("mm", 64, PAR_MIN_WORK)])
    assert (name, ntask, counter) == ("k0_par_mm", 64, "mm_parallel")
    assert nch == min(64, num_threads())


def test_loop_phases_keep_several_chunks_per_thread():
    (name, (ntask, nch), _), = calls(_plan(), [("g", 1000, PAR_MIN_WORK)])
    assert name == "k0_par_g" and nch == min(1000, PAR_TASKS_PER_THREAD * num_threads())


def test_products_in_few_chunks_match_numpy():
    """Rows split unevenly across the chunks (65 and 63 rows of output) give NumPy's
    product, with the left operand read transposed as a gradient reads it."""
    rng = np.random.default_rng(3)
    for p, k, q in ((65, 200, 70), (63, 300, 40)):
        x, y = rng.standard_normal((k, p)), rng.standard_normal((k, q))

        def f(a, b):  # out[i, j] = sum_k a[k, i] * b[k, j]
            return A.sum(A.zip_with(lambda u, v: u * v,
                                    A.replicate((A.All, q, A.All), A.transpose(a)),
                                    A.replicate((p, A.All, A.All), A.transpose(b))))
        prog = A.compile(f, backend="cpu")
        np.testing.assert_allclose(prog(x, y), x.T @ y, rtol=1e-12, atol=1e-12)
        assert prog.stats(x, y)["launches"].get("mm_parallel"), prog.stats(x, y)
