"""ADBench GMM and BA in accel: objectives, gradients and Jacobians against the golden
references (ADBench's metric, 1e-8), the readers (replicate-point rule, malformed files),
the writers and the command line."""

from __future__ import annotations

import copy
import functools
import os
import platform
import subprocess
import sys

import numpy as np
import pytest

import accel as A
from accel.adbench import ba, check, gmm
from accel.adbench import io as aio

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = check.PACKAGE_DATA
GOLD = os.path.join(DATA, "golden")
TOL = 1e-8


def gmm_file(rel):
    return os.path.join(DATA, "gmm", rel)


def golden_gmm(stem):
    return (aio.read_values(os.path.join(GOLD, "gmm", f"{stem}_F_reference.txt"))[0],
            aio.read_values(os.path.join(GOLD, "gmm", f"{stem}_J_reference.txt")))


def gmm_args(inp):
    return (inp.alphas, inp.means, inp.icf, inp.x_stored,
            gmm.constants(inp.d, inp.k, inp.n, inp.gamma, inp.m))


# --------------------------------------------------------------------------- GMM


def test_gmm_test_txt_interpreter_matches_golden_and_adbench_unit_test():
    inp = aio.read_gmm(gmm_file("test.txt"))
    f_ref, j_ref = golden_gmm("test")
    v, g = A.run(gmm.value_and_gradient, *gmm_args(inp), backend="interpreter")
    assert check.max_metric(float(v), f_ref) <= TOL
    assert check.max_metric(gmm.flatten_gradient(*g), j_ref) <= TOL
    # the value hard-coded in ADBench's own unit tests
    assert check.max_metric(float(v), 8.07380408004975791) <= TOL
    # the objective program alone, and the gradient-only program
    assert check.max_metric(float(A.run(gmm.objective, *gmm_args(inp),
                                        backend="interpreter")), f_ref) <= TOL
    g2 = A.run(gmm.gradient, *gmm_args(inp), backend="interpreter")
    assert check.max_metric(gmm.flatten_gradient(*g2), j_ref) <= TOL


@pytest.mark.parametrize("stem", ["1k/gmm_d2_K5", "1k/gmm_d10_K5"])
def test_gmm_1k_fused_matches_golden(stem):
    inp = aio.read_gmm(gmm_file(stem + ".txt"))
    f_ref, j_ref = golden_gmm(stem)
    v, g = gmm.GMMRunner("fused").value_and_gradient(inp)
    assert check.max_metric(v, f_ref) <= TOL
    assert check.max_metric(g, j_ref) <= TOL
    assert check.check_gmm(inp, v, g).ok


def test_gmm_chunked_runner_sums_to_the_whole():
    inp = aio.read_gmm(gmm_file("1k/gmm_d2_K5.txt"))
    f_ref, j_ref = golden_gmm("1k/gmm_d2_K5")
    runner = gmm.GMMRunner("fused", chunk=300)          # 300 + 300 + 300 + 100 points
    assert len(runner.chunks(inp)) == 4
    v, g = runner.value_and_gradient(inp)
    assert check.max_metric(v, f_ref) <= TOL
    assert check.max_metric(g, j_ref) <= TOL
    assert check.max_metric(runner.objective(inp), f_ref) <= TOL


def test_gmm_gradient_kernels_never_build_the_point_component_matrix_products():
    """The fused GMM gradient materialises nothing of rank 4 (points x K x D x D): the
    triangular products and their adjoints fuse into folds (AD's arrays of (adjoint,
    contribution) pairs are split, reshapes to the same shape vanish), and the sums over
    points are interchanged folds.  Its size stays within a budget of kernels."""
    from accel.frontend import arg_type, trace_program
    from accel.fusion.fuse import fuse
    from accel.fusion.kernels import KFold, KGenerate
    from accel.pipeline import optimise
    from accel.backends.cpu.fold import outer_major

    inp = aio.read_gmm(gmm_file("1k/gmm_d10_K5.txt"))
    args = gmm.GMMRunner("fused")._args(inp, inp.x_stored, inp.n, 1.0)
    sig = tuple(arg_type(a, i) for i, a in enumerate(args))
    kp = fuse(optimise(trace_program(gmm.value_and_gradient, sig)))
    steps = kp.body.steps
    gens = [s for s in steps if isinstance(s, KGenerate)]
    folds = [s for s in steps if isinstance(s, KFold)]
    assert max(len(s.shape.type.items) for s in gens) <= 3
    assert len(steps) <= 45
    # sums over points of the (K, D, D) and (K, D) adjoints run interchanged
    assert sum(outer_major(s) for s in folds) >= 3


def test_logsumexp_floor_keeps_values_and_drops_only_subnormal_weights():
    """Shifts down to the floor (-700) keep their exact weights; below it the value is
    unchanged and the weight is exactly 0, never a subnormal (a multiply touching one is a
    microcode assist on x86)."""
    v = np.array([[0.0, -5.0, -650.0, -720.0],
                  [3.0, 2.5, -699.0, -1e4],
                  [-1.0, -1.0, -1.0, -1.0]])
    mx = v.max(axis=1, keepdims=True)
    exact = np.exp(v - mx)
    exact_lse = np.log(exact.sum(axis=1)) + mx[:, 0]
    lse = A.run(gmm.logsumexp, v, backend="interpreter")
    np.testing.assert_allclose(lse, exact_lse, rtol=1e-15)
    g = A.run(A.gradientA(lambda a: A.sum_all(gmm.logsumexp(a))), v, backend="interpreter")
    softmax = exact / exact.sum(axis=1, keepdims=True)
    kept = v - mx >= gmm.LSE_FLOOR
    np.testing.assert_allclose(g[kept], softmax[kept], rtol=1e-13)
    assert softmax[0, 2] > 0 and g[0, 2] > 0                 # e^-650 is kept
    assert 0 < softmax[0, 3] < np.finfo(float).tiny          # exactly, e^-720 is subnormal
    assert np.all(g[~kept] == 0.0)
    assert not np.any((g != 0) & (np.abs(g) < np.finfo(float).tiny))


@pytest.mark.parametrize("stem", ["test", "1k/gmm_d2_K5", "1k/gmm_d10_K5"])
def test_numpy_objective_and_manual_gradient_match_golden(stem):
    inp = aio.read_gmm(gmm_file(stem + ".txt"))
    f_ref, j_ref = golden_gmm(stem)
    a = (inp.alphas, inp.means, inp.icf, inp.x, inp.gamma, inp.m)
    assert check.max_metric(gmm.numpy_objective(*a), f_ref) <= TOL
    f, *g = gmm.numpy_gradient(*a)
    assert check.max_metric(f, f_ref) <= TOL
    assert check.max_metric(gmm.flatten_gradient(*g), j_ref) <= TOL


def test_numpy_gradient_on_shared_files_when_available():
    root = os.path.join(check.SHARED_DATA, "golden", "gmm", "1k")
    stem = "gmm_d20_K10"
    if not os.path.exists(os.path.join(root, stem + "_J_reference.txt")):
        pytest.skip("shared ADBench data not available")
    inp = aio.read_gmm(os.path.join(check.SHARED_DATA, "gmm", "1k", stem + ".txt"))
    f, *g = gmm.numpy_gradient(inp.alphas, inp.means, inp.icf, inp.x, inp.gamma, inp.m)
    res = check.check_gmm(inp, f, gmm.flatten_gradient(*g))
    assert res.ok, res.summary()


def test_gmm_constants_and_layout():
    assert gmm.multigammaln(1.5, 1) == pytest.approx(np.log(np.sqrt(np.pi) / 2))
    # multigammaln(a, 2) = log(pi)/2 + lgamma(a) + lgamma(a - 1/2)
    from math import lgamma, log, pi
    assert gmm.multigammaln(2.5, 2) == pytest.approx(0.5 * log(pi) + lgamma(2.5) + lgamma(2.0))
    flat = np.arange(3 + 6 + 9, dtype=float)
    a, m, i = gmm.unflatten_gradient(flat, 2, 3)
    assert a.shape == (3,) and m.shape == (3, 2) and i.shape == (3, 3)
    np.testing.assert_array_equal(gmm.flatten_gradient(a, m, i), flat)


# --------------------------------------------------------------------------- replicate


def test_reader_replicate_point_rule_does_not_materialise():
    inp = aio.read_gmm(gmm_file("2.5M/gmm_d2_K5.txt"))
    assert (inp.d, inp.k, inp.n) == (2, 5, 2_500_000) and inp.replicated
    assert inp.x_stored.shape == (1, 2)
    x = inp.x
    assert x.shape == (2_500_000, 2)
    assert x.strides[0] == 0 and not x.flags.writeable      # a broadcast view, no copy
    np.testing.assert_array_equal(x[0], x[-1])
    np.testing.assert_array_equal(x[1_234_567], [1.270848, 0.066009])
    # the 2.5M point is the first point of the matching 1k file, parameters are shared
    one_k = aio.read_gmm(gmm_file("1k/gmm_d2_K5.txt"))
    assert not one_k.replicated and one_k.x_stored.shape == (1000, 2)
    np.testing.assert_array_equal(one_k.x[0], inp.x_stored[0])
    np.testing.assert_array_equal(one_k.icf, inp.icf)
    # forcing "all points stored" on a replicate file is a clear error
    with pytest.raises(aio.InputFormatError, match=r"gmm_d2_K5\.txt:1[0-9]"):
        aio.read_gmm(gmm_file("2.5M/gmm_d2_K5.txt"), replicate=False)


def _write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def test_replicate_program_equals_explicit_points(tmp_path):
    """The accel program generates x[i mod S]; on a small replicate file it must equal
    the same instance with every point written out."""
    src = open(gmm_file("2.5M/gmm_d2_K5.txt")).read().split("\n")
    rep = _write(tmp_path, "rep.txt", "\n".join(["2 5 7"] + src[1:]))
    point = src[16]
    full = _write(tmp_path, "full.txt", "\n".join(["2 5 7"] + src[1:16] + [point] * 7
                                                  + src[17:]))
    r, f = aio.read_gmm(rep), aio.read_gmm(full)
    assert r.replicated and not f.replicated and r.n == f.n == 7
    vr, gr = gmm.GMMRunner("fused", chunk=3).value_and_gradient(r)
    vf, gf = gmm.GMMRunner("fused").value_and_gradient(f)
    assert check.max_metric(vr, vf) <= 1e-13 and check.max_metric(gr, gf) <= 1e-13
    fn, *gn = gmm.numpy_gradient(f.alphas, f.means, f.icf, f.x, f.gamma, f.m)
    assert check.max_metric(vr, fn) <= TOL
    assert check.max_metric(gr, gmm.flatten_gradient(*gn)) <= TOL


# --------------------------------------------------------------------------- BA


def ba_arrays(inp):
    return inp.cams, inp.points, inp.weights, inp.features, inp.obs


# Compiling BA's Jacobian (forward mode over the reprojection, then the optimiser) takes
# 10-30 s per program even on the fused and interpreter backends, so the tests share one
# compiled program per backend (a compiled program runs any instance of its types) instead
# of compiling the same one in every test.


@functools.cache
def ba_runner(backend, chunk=None):
    """A ``BARunner`` on ``backend``; runners of other chunk sizes share its programs."""
    if chunk is None:
        return ba.BARunner(backend)
    runner = copy.copy(ba_runner(backend))
    runner.chunk = chunk
    return runner


@functools.cache
def whole_jacobian():
    """``ba.jacobian``, the whole CSR as one program, compiled for the fused backend."""
    return A.compile(ba.jacobian, backend="fused")


def test_ba_test_txt_blocks_match_golden():
    inp = aio.read_ba(os.path.join(DATA, "ba", "test.txt"))
    runner = ba_runner("fused")
    reproj, w_err = runner.residuals(inp)
    J = runner.jacobian(inp)
    res = check.check_ba(inp, reproj, w_err, J)
    assert res.ok, res.summary()
    assert res.worst <= TOL
    ref = check.read_ba_reference(os.path.join(GOLD, "ba", "ba_reference_block.txt"))
    block = np.concatenate([ref["test.txt"]["J_row0"], ref["test.txt"]["J_row1"]])
    assert check.max_metric(J.vals[:30], block) <= TOL
    assert (J.nrows, J.ncols, len(J.rows), len(J.cols)) == (30, 62, 31, 310)


def _explicit_csr(inp, blk, dw):
    """ADBench's BASparseMat insertion order, written out with loops."""
    n, m, p = inp.n, inp.m, inp.p
    rows, cols, vals = [0], [], []
    for i in range(p):
        cam, pt = i % n, i % m
        for r in range(2):
            rows.append(rows[-1] + 15)
            cols.extend([11 * cam + j for j in range(11)] + [11 * n + 3 * pt + j
                                                               for j in range(3)]
                        + [11 * n + 3 * m + i])
            vals.extend(blk[i, r])
    for i in range(p):
        rows.append(rows[-1] + 1)
        cols.append(11 * n + 3 * m + i)
        vals.append(dw[i])
    return np.array(rows), np.array(cols), np.array(vals)


@pytest.mark.parametrize("chunk", [3, 10])
def test_ba_jacobian_in_chunks_equals_one_program(chunk):
    """The runner's chunked Jacobian (blocks written into place chunk by chunk, int32
    indices) equals ``ba.jacobian``, the whole CSR as one accel program (int64)."""
    inp = aio.read_ba(os.path.join(DATA, "ba", "test.txt"))
    J = ba_runner("fused", chunk).jacobian(inp)
    rows, cols, vals = whole_jacobian()(*ba_arrays(inp))
    assert J.cols.dtype == J.rows.dtype == np.int32 and cols.dtype == np.int64
    np.testing.assert_array_equal(J.rows, rows)
    np.testing.assert_array_equal(J.cols, cols)
    np.testing.assert_array_equal(J.vals, vals)
    want_rows, want_cols = ba.csr_structure(inp.n, inp.m, inp.p, inp.obs)
    np.testing.assert_array_equal(J.cols, want_cols)
    np.testing.assert_array_equal(J.rows, want_rows)


@pytest.mark.parametrize("backend", ["fused", "interpreter"])
def test_ba_csr_structure_on_a_tiny_expanded_instance(tmp_path, backend):
    src = open(os.path.join(DATA, "ba", "ba1_n49_m7776_p31843.txt")).read().split("\n")
    path = _write(tmp_path, "tiny.txt", "\n".join(["3 4 7"] + src[1:]))
    inp = aio.read_ba(path)
    np.testing.assert_array_equal(inp.obs, [[i % 3, i % 4] for i in range(7)])
    J = ba_runner(backend).jacobian(inp)
    assert (J.nrows, J.ncols, J.nnz) == (21, 11 * 3 + 3 * 4 + 7, 31 * 7)
    ref = check.read_ba_reference(os.path.join(GOLD, "ba", "ba_reference_block.txt"))
    r = ref["ba1..ba20"]
    blk = np.broadcast_to(np.stack([r["J_row0"], r["J_row1"]]), (7, 2, 15))
    rows, cols, vals = _explicit_csr(inp, blk, np.full(7, r["dwerr_dw"][0]))
    np.testing.assert_array_equal(J.rows, rows)
    np.testing.assert_array_equal(J.cols, cols)
    assert check.max_metric(J.vals, vals) <= TOL
    # the NumPy reference agrees with the structure and the values
    Jn = ba.numpy_jacobian(*ba_arrays(inp))
    np.testing.assert_array_equal(Jn.rows, rows)
    np.testing.assert_array_equal(Jn.cols, cols)
    assert check.max_metric(Jn.vals, vals) <= TOL


def _zero_rotation_arrays():
    inp = aio.read_ba(os.path.join(DATA, "ba", "test.txt"))
    arr = ba_arrays(inp)
    cams = arr[0].copy()
    cams[1, :3] = 0.0          # camera 1 has r == 0 exactly: ADBench's `y + r x y` branch
    return (cams,) + arr[1:]


def test_ba_numpy_reference_and_zero_rotation():
    inp = aio.read_ba(os.path.join(DATA, "ba", "test.txt"))
    reproj, w_err = ba.numpy_residuals(*ba_arrays(inp))
    np.testing.assert_allclose(reproj[3], [-2.69048849235189402e-01, 2.59944792677901881e-01],
                               rtol=1e-12)
    np.testing.assert_allclose(w_err, 8.26092651515999976e-01, rtol=1e-14)
    arr0 = _zero_rotation_arrays()
    (rx, ry), _ = A.run(ba.residuals, *arr0, backend="fused")
    rn, _ = ba.numpy_residuals(*arr0)
    assert check.max_metric(np.stack([rx, ry], 1), rn) <= 1e-12
    assert np.all(np.isfinite(ba.numpy_jacobian(*arr0).vals))


def test_ba_jacobian_zero_rotation():
    """The untaken branch of a cond (sqrt(0) in Rodrigues' formula) must not leak nan."""
    arr0 = _zero_rotation_arrays()
    rows, cols, vals = whole_jacobian()(*arr0)
    assert np.all(np.isfinite(vals))
    assert check.max_metric(vals, ba.numpy_jacobian(*arr0).vals) <= 1e-12


def test_ba_writers_round_trip(tmp_path):
    inp = aio.read_ba(os.path.join(DATA, "ba", "test.txt"))
    J = ba.numpy_jacobian(*ba_arrays(inp))
    reproj, w_err = ba.numpy_residuals(*ba_arrays(inp))
    fpath, jpath = aio.output_names(inp.path, str(tmp_path))
    assert fpath.endswith("test_F_accel.txt") and jpath.endswith("test_J_accel.txt")
    aio.write_ba_objective(fpath, reproj, w_err)
    aio.write_ba_jacobian(jpath, J)
    lines = open(fpath).read().split("\n")
    assert lines[0] == "Reprojection error:" and lines[21] == "Zach weight error:"
    assert len([ln for ln in lines if ln]) == 2 + 20 + 10
    jl = open(jpath).read().split("\n")
    assert jl[0] == "30 62" and jl[1] == "31" and jl[3] == "310"
    assert len(jl[2].split()) == 31 and len(jl[4].split()) == 310 and len(jl[5].split()) == 310
    back = aio.read_ba_jacobian(jpath)
    np.testing.assert_array_equal(back.rows, J.rows)
    np.testing.assert_array_equal(back.cols, J.cols)
    np.testing.assert_array_equal(back.vals, J.vals)     # repr round-trips exactly
    np.testing.assert_array_equal(aio.read_values(fpath), np.concatenate([reproj.ravel(),
                                                                          w_err]))


def test_gmm_writers(tmp_path):
    g = np.array([1.0, -2.5e-17, 3.0])
    aio.write_gmm_objective(tmp_path / "f.txt", -1.25)
    aio.write_gmm_gradient(tmp_path / "j.txt", g)
    assert open(tmp_path / "f.txt").read() == "-1.25\n"
    assert open(tmp_path / "j.txt").read().split("\n") == ["1.0", "-2.5e-17", "3.0", ""]


def test_ba_header_p_wins(tmp_path):
    src = open(os.path.join(DATA, "ba", "test.txt")).read().split("\n")
    path = _write(tmp_path, "ba9_n2_m10_p99.txt", "\n".join(["2 10 12"] + src[1:]))
    inp = aio.read_ba(path)
    assert inp.p == 12 and "header p = 12" in inp.note
    assert inp.shape == (36, 22 + 30 + 12, 31 * 12)


# --------------------------------------------------------------------------- malformed


GMM_OK = open(os.path.join(DATA, "gmm", "test.txt")).read()
BA_OK = open(os.path.join(DATA, "ba", "test.txt")).read()


def _lines(text):
    return text.rstrip("\n").split("\n")


MALFORMED = [
    ("gmm", "", 1, "end of file"),
    ("gmm", "2 x 1\n", 1, "integer"),
    ("gmm", "2 3\n", 1, "header"),
    ("gmm", "0 3 1\n", 1, "D must be positive"),
    ("gmm", "\n".join(_lines(GMM_OK)[:6]) + "\n", 7, "end of file"),           # truncated
    ("gmm", "\n".join(_lines(GMM_OK)[:8]) + "\n0.1 0.2 \n", 9, "icf row 2 of 3"),
    ("gmm", GMM_OK.replace("0.345561 0.396767", "0.345561"), 6, "mean 2 of 3"),
    ("gmm", GMM_OK.replace("1.175171 2.029160", "1.175171 abc"), 11, "'abc'"),
    ("gmm", GMM_OK.replace("1.000000 0", "1.000000 zero"), 12, "integer m"),
    ("gmm", GMM_OK.rstrip("\n") + "\n1 2\n", 13, "extra data"),
    ("gmm", "\n".join(_lines(GMM_OK)[:11]) + "\n", 12, "gamma m"),            # no last line
    ("gmm", GMM_OK.replace("0.166813 -1.965419 -1.270071",
                           "0.166813 -1.965419 -1.2700"), None, None),        # still fine
    ("gmm", GMM_OK.replace("-0.758453", "nan"), 4, "non-finite"),
    ("ba", "", 1, "end of file"),
    ("ba", "\n".join(_lines(BA_OK)[:4]) + "\n", 5, "feature"),
    ("ba", BA_OK.replace("90.859550", "9O.859550"), 2, "'9O.859550'"),
    ("ba", BA_OK.replace("0.417022", "0.417022 1"), 4, "weight"),
    ("ba", BA_OK.replace("2 10 10", "2 10 -1"), 1, "p must be positive"),
    ("ba", BA_OK.rstrip("\n") + "\njunk\n", 6, "extra data"),
]


@pytest.mark.parametrize("kind,text,line,what", MALFORMED)
def test_malformed_files_name_the_file_and_line(tmp_path, kind, text, line, what):
    path = _write(tmp_path, f"bad_{kind}.txt", text)
    reader = aio.read_gmm if kind == "gmm" else aio.read_ba
    if line is None:
        reader(path)
        return
    with pytest.raises(aio.InputFormatError) as ei:
        reader(path)
    msg = str(ei.value)
    assert msg.startswith(f"{path}:{line}: "), msg
    assert what in msg
    assert isinstance(ei.value, A.AccelError) and isinstance(ei.value, ValueError)
    assert ei.value.path == path and ei.value.line == line


def test_missing_and_binary_files(tmp_path):
    with pytest.raises(aio.InputFormatError, match="nope.txt: cannot read"):
        aio.read_gmm(str(tmp_path / "nope.txt"))
    p = tmp_path / "bin.txt"
    p.write_bytes(b"2 3 1\n\xff\xfe\n")
    with pytest.raises(aio.InputFormatError, match=r"bin.txt:2: not a plain ASCII"):
        aio.read_ba(str(p))


# --------------------------------------------------------------------------- CLI


def _cli(*args, env_extra=None):
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-m", "accel.adbench", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("task,n_files", [("gmm", 3), ("ba", 2)])
def test_cli_check_on_shipped_data(tmp_path, task, n_files):
    # a fresh machine: no shared data set, only the copies shipped in adbench/data
    r = _cli(task, "--check", "--backend", "fused", "--out", str(tmp_path),
             env_extra={"ADBENCH_DATA": str(tmp_path / "absent")})
    assert r.returncode == 0, r.stdout + r.stderr
    passes = [ln for ln in r.stdout.splitlines() if ln.startswith("PASS")]
    assert len(passes) == n_files and "FAIL" not in r.stdout, r.stdout
    assert all("shipped" in ln for ln in passes)
    outs = sorted(os.listdir(tmp_path))
    assert len([o for o in outs if o.endswith("_J_accel.txt")]) == n_files
    if task == "gmm":
        got = aio.read_values(tmp_path / "test_J_accel.txt")
        assert check.max_metric(got, golden_gmm("test")[1]) <= TOL


def test_cli_check_fails_without_reference_and_on_bad_input(tmp_path):
    src = open(gmm_file("1k/gmm_d2_K5.txt")).read().split("\n")
    odd = _write(tmp_path, "gmm_d2_K5.txt", "\n".join(["2 5 3"] + src[1:19] + src[-2:]))
    bad = _write(tmp_path, "broken.txt", "2 5\n")
    r = _cli("gmm", odd, bad, "--check", "--backend", "fused", "--out", str(tmp_path))
    assert r.returncode == 1
    assert "FAIL" in r.stdout and "no reference" in r.stdout
    assert "ERROR" in r.stdout and "broken.txt:1" in r.stdout


def test_cli_bench_writes_csv(tmp_path):
    files = [gmm_file("test.txt"), os.path.join(DATA, "ba", "test.txt")]
    r = _cli("bench", "--files", *files, "--tools", "accel,numpy", "--backend", "fused",
             "--max-runs", "2", "--max-seconds", "0.5", "--out", str(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    import csv
    rows = list(csv.DictReader(open(tmp_path / "bench.csv")))
    got = {(x["task"], x["tool"], x["what"]) for x in rows}
    assert got == {(t, tool, w) for t, ws in (("gmm", ("objective", "gradient")),
                                              ("ba", ("objective", "jacobian")))
                   for tool in ("accel-fused", "numpy") for w in ws}
    assert all(float(x["max_metric_vs_numpy"]) <= TOL for x in rows)
    assert "time / numpy time" in r.stdout
    assert "time / accel-fused time" in r.stdout
    assert "accel-fused faster than numpy on" in r.stdout
    assert "GMM gradient/objective <= 3 on 1 of 1" in r.stdout or \
        "GMM gradient/objective <= 3 on 0 of 1" in r.stdout


def test_bench_names_the_flush_mode(monkeypatch):
    from accel.adbench.bench import accel_tool_name
    monkeypatch.delenv("ACCEL_FLUSH_SUBNORMALS", raising=False)
    assert accel_tool_name("cpu") == "accel-cpu"
    monkeypatch.setenv("ACCEL_FLUSH_SUBNORMALS", "1")
    if platform.machine().lower() in ("x86_64", "amd64"):
        assert accel_tool_name("cpu") == "accel-cpu+ftz"
    assert accel_tool_name("fused") == "accel-fused"  # NumPy's exact arithmetic


def test_cli_bench_times_both_jax_gmm_formulations_and_keeps_one(tmp_path):
    pytest.importorskip("jax")
    r = _cli("bench", "--files", gmm_file("test.txt"), "--tools", "numpy,jax", "--no-memory",
             "--max-runs", "2", "--max-seconds", "0.5", "--out", str(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    import csv
    rows = [x for x in csv.DictReader(open(tmp_path / "bench.csv")) if x["tool"] == "jax"]
    assert {x["what"] for x in rows} == {"objective", "gradient"}
    assert all(float(x["max_metric_vs_numpy"]) <= TOL for x in rows)
    note = rows[0]["note"]
    assert note.startswith("GMM formulation batched matmul") or \
        note.startswith("GMM formulation einsum"), note
    assert "batched matmul" in note and "einsum" in note and "GMM formulation" in r.stdout
