"""Vectorized row blocks on the cpu backend: the transposed copies of ``layout`` and LLVM's
SLP vectorizer scoped to accel's kernels (``vectorize``)."""

from __future__ import annotations

import platform
import re

import numba
import numpy as np
import pytest

import accel as A
from accel.fusion.kernels import KFold, KGenerate
from accel.backends.fused import evaluate
from accel.backends.cpu import prepare_kernels
from accel.backends.cpu.transpose import transpose_reads
from accel.ast import nodes as N
from accel.ast.types import float64, int64
from kernel_builders import P, at, av, dim, ix_lam, kernel_asm, kprog, lam, sh


def _matvec_prog(reads_row_last_first: bool, squared: bool = False):
    """y[i, k, r] = sum_j L[k, r, j] * x[i, k, j] (or L[k, j, r] with the flag; with
    ``squared``, x[i, k, j]^2: three reads, so not a matrix product that BLAS would take
    (``contraction``), whose operands are never copied)."""
    lm, x, y = av(float64, 3, "L"), av(float64, 3, "x"), av(float64, 3, "y")

    def src(i, k, r, j):
        lread = at(lm, k, j, r) if reads_row_last_first else at(lm, k, r, j)
        xr = P("mul", at(x, i, k, j), at(x, i, k, j)) if squared else at(x, i, k, j)
        return P("mul", lread, xr)

    fold = KFold(y, sh(dim(x, 0), dim(x, 1), dim(lm, 1)), dim(x, 2),
                 lam((float64, float64), lambda a, b: P("add", a, b)), zero(), ix_lam(4, src))
    return kprog((lm, x), [fold], y), (lm, x)


def zero():
    return N.Const(0.0, float64)


def _inputs(n=37, k=3, d=19, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((k, d, d)), rng.standard_normal((n, k, d))


def test_fold_reading_a_matrix_across_its_rows_gets_one_transposed_copy():
    kp, _ = _matvec_prog(False, squared=True)
    out = transpose_reads(kp)
    gens = [s for s in out.body.steps if isinstance(s, KGenerate)]
    (fold,) = [s for s in out.body.steps if isinstance(s, KFold)]
    assert len(gens) == 1 and out.body.steps.index(gens[0]) == 0
    assert gens[0].outs[0].name in repr(fold.src)  # the fold reads the copy
    lmat, x = _inputs()
    want = np.einsum("krj,ikj->ikr", lmat, x * x)
    np.testing.assert_allclose(evaluate(out, [lmat, x]), want, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(prepare_kernels(kp)([lmat, x]), want, rtol=1e-13, atol=1e-13)


def test_no_copy_when_the_read_is_already_contiguous_or_not_reused():
    kp, _ = _matvec_prog(True)  # L[k, j, r]: the rows' reads are adjacent already
    assert transpose_reads(kp) is kp
    # a[i, r, j] read by rows (i, r): every row dimension indexes it, no reuse
    a, y = av(float64, 3, "a"), av(float64, 2, "y")
    fold = KFold(y, sh(dim(a, 0), dim(a, 1)), dim(a, 2),
                 lam((float64, float64), lambda p, q: P("add", p, q)), zero(),
                 ix_lam(3, lambda i, r, j: at(a, i, r, j)))
    kp2 = kprog((a,), [fold], y)
    assert transpose_reads(kp2) is kp2


def test_folds_of_one_block_share_the_copy():
    kp, (lm, x) = _matvec_prog(False, squared=True)
    (fold,) = kp.body.steps
    y2 = av(float64, 3, "y2")
    fold2 = KFold(y2, fold.shape, fold.n, fold.f, fold.z,
                  ix_lam(4, lambda i, k, r, j: P("sub", at(lm, k, r, j), at(x, i, k, j))))
    kp2 = kprog((lm, x), [fold, fold2], (fold.out, y2))
    out = transpose_reads(kp2)
    assert sum(isinstance(s, KGenerate) for s in out.body.steps) == 1
    lmat, xv = _inputs(n=5, k=2, d=9)
    got = prepare_kernels(kp2)([lmat, xv])
    np.testing.assert_allclose(got[0], np.einsum("krj,ikj->ikr", lmat, xv * xv), rtol=1e-13)
    np.testing.assert_allclose(got[1], (lmat[None] - xv[:, :, None, :]).sum(-1), rtol=1e-13)


def test_gmm_style_products_on_the_cpu_backend_match_the_interpreter():
    """Both products of the GMM (L x and its transpose) and the sum of outer products over
    points, through the user API, at sizes with block leftovers (d = 19: 16 + 2 + 1)."""
    def f(lm, x):
        n, k, d = x.shape
        lx = A.sum(A.zip_with(lambda a, b: a * b, A.replicate((n, A.All, A.All, A.All), lm),
                              A.replicate((A.All, A.All, d, A.All), x)))
        return A.sum_all(A.map(lambda v: v * v, lx))

    lmat, x = _inputs()
    g = A.gradientA(f, wrt=(0, 1))
    got = A.run(g, lmat, x, backend="cpu")
    want = A.run(g, lmat, x, backend="interpreter")
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


def test_slp_is_enabled_for_accel_kernels_only():
    kp, _ = _matvec_prog(True)
    runner = prepare_kernels(kp)
    lmat, x = _inputs()
    runner([lmat, x])
    assert numba.config.SLP_VECTORIZE == 0  # the user's setting is untouched
    assert all(getattr(d.compile, "_accel_slp", False) for d in vars(runner.module).values()
               if isinstance(d, numba.core.registry.CPUDispatcher))


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86 assembly")
def test_row_blocks_compile_to_packed_vector_instructions():
    """The regression this guards against: block reads that LLVM cannot see as adjacent
    (e.g. each masked separately) silently fall back to scalar code.  The generated
    block function is compiled here again, uncached (numba cannot inspect cached code),
    through the same SLP wrapper."""
    kp, _ = _matvec_prog(True)
    runner = prepare_kernels(kp)
    _, asm = kernel_asm(runner, r"k\d+_b")
    packed = len(re.findall(r"\bv(?:mul|add|fmadd\d+)pd\s[^\n]*%[yz]mm", asm))
    scalar = len(re.findall(r"\bv(?:mul|add|fmadd\d+)sd\s", asm))
    # measured (before FMAs): 18 packed, 10 scalar (rows left over in
    # pairs and singles); with each row's read masked separately 18 and 22, and the GMM
    # gradient 35% slower
    assert packed >= 8 and scalar < packed, f"row blocks not vectorized: {packed}, {scalar}"
    # a product summed is one fused multiply-add (FLAGS' ``contract``)
    assert re.search(r"\bvfmadd\d+pd\s", asm), "no FMA in the row blocks"
    assert numba.config.SLP_VECTORIZE == 0



@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86 assembly")
def test_elementwise_kernels_over_several_arrays_compile_to_vector_instructions():
    """``o[i] = tanh(w[i] * h[i] + x[t, i])`` with ``t`` read from a one-element array (a
    loop counter): LLVM vectorizes the element loop only if it may assume that the store
    to ``o`` changes neither ``t`` nor the other inputs (``noalias``:
    ``vectorize.as_kernel``).  Without it the serial kernel stayed scalar, 5x slower than
    the same loop inside a parallel driver (whose body numba compiles with ``noalias``)."""
    w, h, x, o = av(float64, 1, "w"), av(float64, 1, "h"), av(float64, 2, "x"), \
        av(float64, 1, "o")
    t = av(int64, 0, "t")
    f = ix_lam(1, lambda i: P("tanh", P("add", P("mul", at(w, i), at(h, i)),
                                        at(x, N.Index(t, N.Tuple(())), i))))
    kp = kprog((w, h, x, t), [KGenerate((o,), sh(dim(w, 0)), f)], o)
    runner = prepare_kernels(kp)
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(40), rng.standard_normal(40), rng.standard_normal((5, 40)),
            np.array(3)]
    np.testing.assert_allclose(runner(args), np.tanh(args[0] * args[1] + args[2][3]),
                               rtol=1e-15, atol=1e-15)
    _, asm = kernel_asm(runner, r"k\d+_g")
    packed = len(re.findall(r"\bv(?:mul|add|fmadd\d+|div)pd\s[^\n]*%[xyz]mm", asm))
    scalar = len(re.findall(r"\bv(?:mul|add|fmadd\d+|div)sd\s", asm))
    # measured: 23 packed (and as many scalar, the loop's remainder); without noalias 0
    assert packed >= 10, f"element loop not vectorized: {packed} packed, {scalar} scalar"


def _outer_prog(fold_first: bool, op: str = "add", seeded: bool = True):
    """g[k, r, c] = op_j x[.., c] * y[.., r]: with ``fold_first`` the reads are
    ``x[j, k, c]``, ``y[j, k, r]`` (a sum over points: the interchanged phases ``o``),
    else ``x[k, c, j]``, ``y[k, r, j]`` (row blocks, phase ``b``)."""
    x, y, g = av(float64, 3, "x"), av(float64, 3, "y"), av(float64, 3, "g")

    def src(k, r, c, j):
        if fold_first:
            return P("mul", at(x, j, k, c), at(y, j, k, r))
        return P("mul", at(x, k, c, j), at(y, k, r, j))

    if fold_first:
        shape, n = sh(dim(x, 1), dim(y, 2), dim(x, 2)), dim(x, 0)
    else:
        shape, n = sh(dim(x, 0), dim(y, 1), dim(x, 1)), dim(x, 2)
    fold = KFold(g, shape, n, lam((float64, float64), lambda a, b: P(op, a, b)),
                 N.Const(0.5, float64) if seeded else None, ix_lam(4, src))
    return kprog((x, y), [fold], g)


@pytest.mark.parametrize("fold_first", [True, False])
def test_sums_of_outer_products_fold_in_plane_blocks(fold_first):
    """Blocks of ``FOLD_PLANES`` rows of the second to last dimension (``_plane_block``):
    every row lands in its place when the planes do not divide that dimension, the last
    dimension is not a multiple of the block widths, tiles and tasks start mid-row, and
    the fold has no seed; ``max`` folds too (on the serial phases only: the parallel
    ones differ from the sum's by the combination alone, and take 15-25 s to compile)."""
    from accel.backends.cpu import fold as fold_step
    rng = np.random.default_rng(7)
    serial = [(70, 3, 19), (5, 2, 4), (1, 1, 9), (9, 40, 6)]
    for op, seeded in (("add", False), ("max", True)):  # (seeded sums: the other tests)
        kp = _outer_prog(fold_first, op, seeded)
        (fold,) = kp.body.steps
        assert fold_step.plane_blocked(fold)
        runner = prepare_kernels(kp)
        # (phase b's x[k, c, j] is first copied transposed: ``layout``)
        assert [p.outer for p in runner.gen.plans.values()][-1] == fold_first
        shapes = serial + [(130, 7, 33), (5000, 2, 6)] if op == "add" else serial
        for n, k, d in shapes:
            if fold_first:
                x, y = rng.standard_normal((n, k, d)), rng.standard_normal((n, k, d))
                xs, ys = x.transpose(1, 2, 0), y.transpose(1, 2, 0)  # (k, d, n)
            else:
                x, y = rng.standard_normal((k, d, n)), rng.standard_normal((k, d, n))
                xs, ys = x, y
            prods = xs[:, None, :, :] * ys[:, :, None, :]  # (k, r, c, n)
            if op == "add":
                want = prods.sum(-1) + (0.5 if seeded else 0.0)
            else:
                want = np.maximum(prods.max(-1), 0.5)
            got = runner([x, y])
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
        launches = runner.stats()["launches"]
        assert sum(v for key, v in launches.items() if key[0] in "ob") >= 1
        if fold_first and op == "add":  # 5000 points into 72 rows: the chunked phase too
            assert launches.get("oc_parallel", 0) + launches.get("oc_serial", 0) >= 1


def test_plane_blocks_only_for_outer_products():
    """A matrix-vector product (every read depends on the rows' second to last index,
    or none on the last) keeps one plane per block."""
    from accel.backends.cpu import fold as fold_step
    kp, _ = _matvec_prog(True)
    (fold,) = kp.body.steps
    assert not fold_step.plane_blocked(fold)


def _guarded_prog(component: int):
    """``g[k, c] = sum_j if ix OP size(x, 1) then (x[j, c] - y[k, c]) * w[j, k] else 0``
    with ``ix`` the row index ``c`` (``component`` 1) or ``k`` (0): the gradient of a
    ``zip_with`` of two replicated arrays (k-means' centroids) has it, the test against
    the meet of its arguments' shapes."""
    x, y, w, g = (av(float64, 2, n) for n in ("x", "y", "w", "g"))

    def src(k, c, j):
        ix = (k, c)[component]
        val = P("mul", P("sub", at(x, j, c), at(y, k, c)), at(w, j, k))
        return N.Cond(P("lt", ix, dim(x, 1)), val, zero())
    fold = KFold(g, sh(dim(y, 0), dim(y, 1)), dim(x, 0),
                 lam((float64, float64), lambda a, b: P("add", a, b)), zero(), ix_lam(3, src))
    return kprog((x, y, w), [fold], g)


@pytest.mark.parametrize("component", [1, 0])
def test_a_branch_on_a_row_index_is_decided_per_block_of_rows(component):
    """Row blocks with the branch going one way for all their rows fold with it decided
    (``fold._uniform_rows``); blocks across the bound fall back to narrower ones.  Bounds
    before, inside (mid-block) and after the rows, interchanged and row-by-row phases."""
    kp = _guarded_prog(component)
    runner = prepare_kernels(kp)
    rng = np.random.default_rng(3)
    for n, k, d, dx in [(300, 5, 19, 19), (300, 5, 19, 11), (300, 5, 19, 30), (40, 3, 19, 0),
                        (7, 20, 18, 3), (5000, 30, 21, 21)]:
        x, y, w = rng.standard_normal((n, dx)), rng.standard_normal((k, d)), \
            rng.standard_normal((n, k))
        want = np.zeros((k, d))
        lim = min(d, dx)
        if component == 1:
            want[:, :lim] = np.einsum("jkc,jk->kc", x[:, None, :lim] - y[None, :, :lim], w)
        else:
            kk = min(k, dx)
            want[:kk] = np.einsum("jkc,jk->kc", x[:, None, :d] - y[None, :kk], w[:, :kk]) \
                if dx >= d else 0.0
        if component == 0 and dx < d:
            continue  # x[j, c] would be read out of bounds (not this test's subject)
        np.testing.assert_allclose(runner([x, y, w]), want, rtol=1e-12, atol=1e-12)


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86 assembly")
def test_row_blocks_with_a_decided_branch_compile_to_vector_instructions():
    """Undecided, the branch in each of a block's rows kept its loads from being
    executed speculatively, and the block from being vectorized (k-means' centroid
    gradient: 20 -> 4 ms for 10^4 points, K = 100, D = 20)."""
    runner = prepare_kernels(_guarded_prog(1))
    rng = np.random.default_rng(0)
    runner([rng.standard_normal((300, 19)), rng.standard_normal((5, 19)),
            rng.standard_normal((300, 5))])
    name = [n for n in vars(runner.module) if re.fullmatch(r"k\d+_(o|b)", n)][0]
    _, asm = kernel_asm(runner, name)
    packed = len(re.findall(r"\bv(?:mul|add|sub|fmadd\d+|fmsub\d+)pd\s[^\n]*%[yz]mm", asm))
    assert packed >= 8, f"row blocks not vectorized: {packed} packed"


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86 assembly")
def test_window_reads_of_a_column_block_compile_to_vector_loads():
    """A 2-D convolution written as a fold over (rows, columns, window): the block of 16
    output columns reads ``img[i + a, (j + c) + b]`` for c = 0..15, consecutive only if
    LLVM sees each position as one offset plus c.  Positions are converted to unsigned
    (``kernelgen.at``) rather than masked: masking each position separately hid that
    (measured on this kernel: 5 packed multiply-adds reading memory, i.e. vector loads,
    when masked, 20 unsigned; the 512 x 512 convolution 3.7 -> 0.6 ms)."""
    from accel.fusion.fuse import fuse
    from accel.pipeline import arg_type, optimise, trace_program

    def conv(img, ker):
        kh, kw = ker.shape
        prods = A.generate((img.shape[0] - kh + 1, img.shape[1] - kw + 1, kh, kw),
                           lambda ix: img[ix[0] + ix[2], ix[1] + ix[3]] * ker[ix[2], ix[3]])
        return A.sum(A.sum(prods))

    rng = np.random.default_rng(0)
    img, ker = rng.standard_normal((40, 70)), rng.standard_normal((3, 4))
    kp = fuse(optimise(trace_program(conv, (arg_type(img, 0), arg_type(ker, 1)))))
    runner = prepare_kernels(kp)
    want = sum(ker[a, b] * img[a:a + 38, b:b + 67] for a in range(3) for b in range(4))
    np.testing.assert_allclose(runner([img, ker]), want, rtol=1e-12, atol=1e-12)
    _, asm = kernel_asm(runner, r"k\d+_b")
    loads = len(re.findall(r"\bvfmadd\d+pd\s+-?\w*\(%[^\n]*%[yz]mm", asm))
    assert loads >= 12, f"window reads not loaded as vectors: {loads} packed FMAs from memory"


def test_unrolled_rows_reuse_the_offsets_and_reads_they_share():
    """``KernelGen.reusing``: in a straight-line block an offset or read already emitted
    is reused (the 32 rows of a plane block read one operand's element once per plane,
    not once per row: numba typed every copy); outside a block, or once the block's
    indentation changed (a name bound in a branch), everything is emitted again."""
    from accel.ast import nodes as N
    from accel.ast.types import ArrayT, int64 as i64t
    from accel.backends.cpu.emitter import KernelGen
    x = N.Avar(N.fresh("x"), ArrayT(float64, 2))
    p, q = N.Var(N.fresh("p"), i64t), N.Var(N.fresh("q"), i64t)
    read = N.Index(x, N.Tuple((p, q)))

    def loads(g):
        return sum(line.count("_ld(a0_0,") for line in g.body)
    for reuse in (False, True):
        g = KernelGen(False)
        g.begin("g")
        g.bind(p, "pp")
        g.bind(q, "qq")
        if reuse:
            with g.reusing():
                a, b = g.exp(read), g.exp(read)
                assert a == b
                assert loads(g) == 1 and sum(" = (pp)" in line for line in g.body) == 1
                g.ind += 1  # a nested block: names bound there are not reused outside
                g.exp(read)
                g.ind -= 1
                g.exp(read)
                assert loads(g) == 3
        else:
            g.exp(read), g.exp(read)
            assert loads(g) == 2
    # the plane-block phase of a sum of outer products: x[j, k, c] * y[j, k, r] over
    # 2 planes x 16 columns per block; y's element is read once per plane and block
    kp = _outer_prog(True)
    src = prepare_kernels(kp).gen.source
    body = src[src.index("def k0_o("):]
    body = body[:body.index("\n@")] if "\n@" in body else body
    assert body.count("_ld(a1_0,") <= 16, body.count("_ld(a1_0,")  # (13; was 82: once per row)
