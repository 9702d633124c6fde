"""accel quickstart: a dot product and a numerically stable softmax, checked against NumPy.

Run it with ``python examples/quickstart.py``.  The backend comes from the environment
variable ``ACCEL_BACKEND`` (default ``"cpu"``, numba), so the same script exercises any
backend: ``ACCEL_BACKEND=interpreter python examples/quickstart.py``.
"""

from __future__ import annotations

import os

import numpy as np

import accel as A

BACKEND = os.environ.get("ACCEL_BACKEND", "cpu")


def dot(xs, ys):
    """The dot product of two vectors: a zip_with fused into a fold (a rank-0 array)."""
    return A.sum_all(A.zip_with(lambda x, y: x * y, xs, ys))


def softmax(logits):
    """Row-wise softmax of a matrix, with the log-sum-exp trick for stability.

    ``A.maximum`` and ``A.sum`` reduce the innermost dimension; ``A.replicate`` broadcasts
    the per-row results back over the columns.
    """
    n, m = logits.shape
    row_max = A.replicate((A.All, m), A.maximum(logits))
    shifted = A.zip_with(lambda x, mx: A.exp(x - mx), logits, row_max)
    total = A.replicate((A.All, m), A.sum(shifted))
    return A.zip_with(lambda e, s: e / s, shifted, total)


def log_sum_exp(logits):
    """``log(sum(exp(x)))`` of a vector, computed without overflow."""
    mx = A.the(A.maximum(logits))
    s = A.sum_all(A.map(lambda x: A.exp(x - mx), logits))
    return A.map(lambda t: A.log(t) + mx, s)


def main() -> None:
    rng = np.random.default_rng(0)
    xs, ys = rng.standard_normal(1000), rng.standard_normal(1000)
    logits = rng.standard_normal((4, 5)) * 10.0
    big = np.array([1000.0, 1001.0, 999.0])  # exp would overflow without the shift

    print(f"backend: {BACKEND}\n")

    got = A.run(dot, xs, ys, backend=BACKEND)
    print(f"dot:         accel {float(got):.12f}   numpy {float(xs @ ys):.12f}")

    got = A.run(log_sum_exp, big, backend=BACKEND)
    want = big.max() + np.log(np.exp(big - big.max()).sum())
    print(f"logsumexp:   accel {float(got):.12f}   numpy {want:.12f}")

    got = A.run(softmax, logits, backend=BACKEND)
    e = np.exp(logits - logits.max(axis=-1, keepdims=True))
    want = e / e.sum(axis=-1, keepdims=True)
    print("softmax (accel):\n", np.array2string(got, precision=4, suppress_small=True))
    print("softmax (numpy):\n", np.array2string(want, precision=4, suppress_small=True))
    print(f"max |accel - numpy| = {np.abs(got - want).max():.2e}\n")
    assert np.allclose(got, want, rtol=1e-9, atol=1e-12)

    # Compile once per (dtype, rank) signature, then run for any size.
    fast_dot = A.compile(dot, backend=BACKEND)
    for n in (3, 10, 100):
        a, b = np.arange(float(n)), np.ones(n)
        assert float(fast_dot(a, b)) == n * (n - 1) / 2
    print(f"compiled dot ran for 3 sizes; kernels: {fast_dot.stats(xs, ys)['kernels']}\n")

    # Reverse mode: the gradient of a log-sum-exp of a softmax-weighted dot product is an
    # ordinary program; compare it with forward mode and finite differences.
    def loss(w, x):
        return log_sum_exp(A.flatten(A.zip_with(lambda a, b: a * b, softmax(w), x)))

    w, x = rng.standard_normal((3, 4)), rng.standard_normal((3, 4))
    grad = A.run(A.gradientA(loss, wrt=0), w, x, backend=BACKEND)
    report = A.check_grad(loss, w, x, wrt=0, backend=BACKEND)
    print(f"gradient of loss w.r.t. w (shape {grad.shape}); check_grad: {report}")
    assert report.ok and np.allclose(grad, report.reverse[0])

    print("\nThe traced softmax program:")
    print(A.show(softmax, logits))


if __name__ == "__main__":
    main()
