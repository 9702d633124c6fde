"""``exp``, ``log`` and ``tanh`` for the generated kernels: polynomials that LLVM can
vectorize.

Numba compiles ``np.exp`` and ``np.log`` to calls of libm's scalar functions (no SVML in
our dependencies), so a loop containing one is never vectorized, and exp dominates the
GMM's small-D and large-K files (5-7 ns an element).  :data:`SOURCE` is a branch-free
exp in plain arithmetic (about 2 ns an element, vectorized): ``x = n ln2 + r`` with
``|r| <= ln2/2`` (Cody-Waite: ln2 in two parts, r kept as a pair), ``exp(r)`` by its
Taylor series to degree 14 (truncation below 1e-17) with ``1 + r`` summed exactly,
then ``2^n`` applied in two halves so that subnormal results round once and ``2^1024``
is reachable.  Measured against 120-bit arithmetic on the 45,000 test arguments
(``tests/test_cpu_elementwise.py``) with normal results: at most 0.64 ulp from the true
value (NumPy's SIMD exp: 0.68), and 5% of results differ from NumPy's in the last bit
(exp(1) and exp(-1) do not); infinities, NaN, overflow and underflow to 0 or
subnormals are as NumPy's.

``_log`` is fdlibm's ``e_log.c`` made branch-free (about 1 ns an element vectorized,
3 ns for libm's): ``x = 2^k m`` with ``m`` in [sqrt(2)/2, sqrt(2)) read from the bits
(subnormals scaled by 2^52 first), ``f = m - 1`` (exact), ``log(1 + f)`` as
``f - (f^2/2 - s (f^2/2 + R(s^2)))`` with ``s = f / (2 + f)`` and fdlibm's degree-14
polynomial ``R``, plus ``k ln2`` in two parts.  Measured against 64-bit-mantissa
arithmetic (``np.longdouble``) on 420,000 arguments (the tests use 48,000): at most
0.80 ulp from the true value (NumPy's: 0.60), 4% of results differ from NumPy's in the
last bit, log(1) = +0, log(2^k) as NumPy's; 0, negatives, infinities and NaN are as
NumPy's.

``_tanh`` is ``expm1(2|x|) / (expm1(2|x|) + 2)`` with the sign of ``x``: ``2|x|`` reduced
as in ``_exp`` (``|x|`` capped at 20, where tanh rounds to 1), ``expm1(r)`` as ``r`` plus
the same series without its leading 1 (no cancellation near 0), then
``2^n expm1(r) + (2^n - 1)``.  1.3 ms per 10^6 elements against 35 ms for libm's
``tanh`` (an MLP's or an RNN's activations); measured against ``np.longdouble`` on 1.6
million arguments from 1e-12 to 30 in magnitude: at most 2.3 ulp from the true value
(NumPy's: 1.2), a third of results differ from NumPy's in the last bits; +-0, +-inf and
NaN are as NumPy's.

Powers of two are built from bits in float64 arithmetic alone (``_two_to``; the
exponent field read back as a float in ``_log``): AVX2 has no vector conversion between
float64 and int64, so ``np.int64(n)`` made LLVM convert lane by lane.  One thread,
10^6 elements (``tests/test_cpu_elementwise.py`` checks the results): exp 3.17 -> 2.74
ns an element, tanh 3.47 -> 2.66, log 2.73 -> 2.61, every result bit for bit as before.

float32 arguments go through float64, which rounds them correctly almost always.

The source is pasted into every generated module's header (``codegen.HEADER``), so it
is part of the module's content hash: a change here can never load stale kernels.
"""

SOURCE = '''
@_intrinsic
def _f64_of_bits(typingctx, bits):
    """The float64 whose IEEE bits are the int64 ``bits`` (an LLVM bitcast)."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(_nbt.float64))
    return _nbt.float64(_nbt.int64), codegen


@nb.njit(error_model="numpy", fastmath={"contract"}, cache=True, nogil=True, inline="always")
def _two_to(n):
    """``2^n`` for an integral float ``n`` in [-1022, 1023], built from the bits of
    ``n + 1.5 * 2^52 + 1023`` (whose low bits are ``n + 1023``): AVX2 has no vector
    conversion between float64 and int64, so ``np.int64(n)`` scalarized the loop."""
    return _f64_of_bits(_bits_of_f64(n + 6755399441055744.0 + 1023.0) << 52)


@nb.njit(error_model="numpy", fastmath={"contract"}, cache=True, nogil=True)
def _exp(x):
    xc = min(max(x, -745.2), 709.8)
    n = np.rint(xc * 1.4426950408889634)
    rh = xc - n * 6.93147180369123816490e-01  # exact: ln2's high part has 32 bits
    rl = -(n * 1.90821492927058770002e-10)
    r = rh + rl
    q = 1.0 / 6 + r * (1.0 / 24 + r * (1.0 / 120 + r * (1.0 / 720 + r * (
        1.0 / 5040 + r * (1.0 / 40320 + r * (1.0 / 362880 + r * (1.0 / 3628800 + r * (
            1.0 / 39916800 + r * (1.0 / 479001600 + r * (1.0 / 6227020800 + r * (
                1.0 / 87178291200)))))))))))
    r2 = r * r
    hi = 1.0 + rh
    lo = ((1.0 - hi) + rh) + rl  # what 1 + r lost to rounding (Fast2Sum)
    p = hi + (lo + (r2 * 0.5 + r2 * r * q))
    n1 = np.floor(n * 0.5)
    y = p * _two_to(n1) * _two_to(n - n1)
    y = 0.0 if x < -745.2 else y
    y = np.inf if x > 709.8 else y
    return x if x != x else y


@_intrinsic
def _bits_of_f64(typingctx, x):
    """The IEEE bits of the float64 ``x`` as an int64 (an LLVM bitcast)."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], context.get_value_type(_nbt.int64))
    return _nbt.int64(_nbt.float64), codegen


@nb.njit(error_model="numpy", fastmath={"contract"}, cache=True, nogil=True)
def _log(x):
    sub = x < 2.2250738585072014e-308  # subnormal (or not positive: fixed below)
    b = _bits_of_f64(x * 4503599627370496.0 if sub else x)
    e = _f64_of_bits(((b >> 52) & 0x7FF) | 0x4330000000000000) - 4503599627370496.0
    k = e - (1075.0 if sub else 1023.0)
    m = _f64_of_bits((b & 0x000FFFFFFFFFFFFF) | 0x3FF0000000000000)  # in [1, 2)
    big = m > 1.4142135623730951
    m = m * 0.5 if big else m
    dk = k + 1.0 if big else k
    f = m - 1.0
    s = f / (2.0 + f)
    z = s * s
    r = z * (6.666666666666735130e-01 + z * (3.999999999940941908e-01 + z * (
        2.857142874366239149e-01 + z * (2.222219843214978396e-01 + z * (
            1.818357216161805012e-01 + z * (1.531383769920937332e-01 + z * (
                1.479819860511658591e-01)))))))
    hfsq = 0.5 * f * f
    y = dk * 6.93147180369123816490e-01 - (
        (hfsq - (s * (hfsq + r) + dk * 1.90821492927058770002e-10)) - f)
    y = np.nan if x < 0.0 else y
    y = -np.inf if x == 0.0 else y
    y = np.inf if x == np.inf else y
    return x if x != x else y


@nb.njit(error_model="numpy", fastmath={"contract"}, cache=True, nogil=True)
def _tanh(x):
    a = min(abs(x), 20.0)
    t = a + a
    n = np.rint(t * 1.4426950408889634)
    rh = t - n * 6.93147180369123816490e-01
    rl = -(n * 1.90821492927058770002e-10)
    r = rh + rl
    q = 1.0 / 6 + r * (1.0 / 24 + r * (1.0 / 120 + r * (1.0 / 720 + r * (
        1.0 / 5040 + r * (1.0 / 40320 + r * (1.0 / 362880 + r * (1.0 / 3628800 + r * (
            1.0 / 39916800 + r * (1.0 / 479001600 + r * (1.0 / 6227020800 + r * (
                1.0 / 87178291200)))))))))))
    r2 = r * r
    e = rh + (rl + (r2 * 0.5 + r2 * r * q))  # expm1(r)
    s = _two_to(n)
    em1 = s * e + (s - 1.0)  # expm1(2 |x|)
    y = em1 / (em1 + 2.0)
    y = -y if x < 0.0 else y
    return x if (x != x) | (x == 0.0) else y
'''
