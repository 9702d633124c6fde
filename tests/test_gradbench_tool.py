"""accel as a GradBench tool: the protocol, bad input, and every eval against NumPy.

The evals run in-process on the interpreter backend with tiny inputs; one test runs the
tool as a subprocess to check that its stdout carries nothing but one JSON response per
message.  (GradBench's own runner validates the tool against its golden C++ in CI.)
"""

import itertools
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from accel.adbench.gradbench.protocol import Tool


@pytest.fixture(autouse=True)
def interpreter(monkeypatch):
    monkeypatch.setenv("ACCEL_GRADBENCH_BACKEND", "interpreter")


def call(tool, module, function, inp, runs=1):
    if isinstance(inp, dict):
        inp = dict(inp, min_runs=runs, min_seconds=0)
    r = tool.handle({"id": 7, "kind": "evaluate", "module": module, "function": function,
                     "input": inp})
    assert r["id"] == 7
    assert r["success"], r.get("error")
    return r["output"]


def defined(*modules):
    tool = Tool()
    for m in modules:
        assert tool.handle({"id": 0, "kind": "define", "module": m}) == {"id": 0,
                                                                         "success": True}
    return tool


# --------------------------------------------------------------------------- protocol


def test_start_and_analysis_answer_with_the_id():
    tool = Tool()
    assert tool.handle({"id": 0, "kind": "start", "eval": "hello"}) == {"id": 0,
                                                                       "tool": "accel"}
    assert tool.handle({"id": 5, "kind": "analysis", "of": 4, "valid": True}) == {"id": 5}


def test_timings_follow_min_runs_and_report_compile_once():
    tool = defined("lse")
    msg = {"id": 1, "kind": "evaluate", "module": "lse", "function": "primal",
           "input": {"x": [1.0, 2.0], "min_runs": 3, "min_seconds": 0}}
    first = tool.handle(msg)
    names = [t["name"] for t in first["timings"]]
    assert names == ["compile", "evaluate", "evaluate", "evaluate"]
    assert all(isinstance(t["nanoseconds"], int) for t in first["timings"])
    again = tool.handle(dict(msg, input={"x": [1.0, 2.0, 3.0], "min_runs": 2,
                                         "min_seconds": 0}))
    assert [t["name"] for t in again["timings"]] == ["evaluate", "evaluate"]


def test_bad_input_fails_and_the_tool_keeps_serving():
    tool = defined("gmm", "kmeans", "det")
    assert tool.handle({"id": 1, "kind": "define", "module": "nosuch"}) == {
        "id": 1, "success": False}
    bad = [
        tool.handle_line("{not json"),
        tool.handle_line("[1, 2]"),
        tool.handle({"id": 2, "kind": "evaluate", "module": "nosuch", "function": "f",
                     "input": {}}),
        tool.handle({"id": 3, "kind": "evaluate", "module": "det", "function": "nosuch",
                     "input": {}}),
        tool.handle({"id": 4, "kind": "evaluate", "module": "det", "function": "primal",
                     "input": {"A": [1.0, 2.0, 3.0], "ell": 2}}),
        tool.handle({"id": 5, "kind": "evaluate", "module": "det", "function": "primal",
                     "input": {"ell": 2}}),
        tool.handle({"id": 6, "kind": "evaluate", "module": "kmeans", "function": "cost",
                     "input": {"points": [[1.0, 2.0]], "centroids": [[1.0]]}}),
        tool.handle({"id": 7, "kind": "evaluate", "module": "gmm", "function": "objective",
                     "input": dict(_gmm_input(2, 3, 4), mu=[[0.0, 1.0]])}),
        tool.handle({"id": 8, "kind": "evaluate", "module": "det", "function": "primal",
                     "input": {"A": [["x"]], "ell": 1}}),
    ]
    for r in bad:
        assert r["success"] is False and r["error"], r
    assert "nosuch" in bad[3]["error"] and "primal" in bad[3]["error"]
    assert "mu" in bad[7]["error"]
    assert call(tool, "det", "primal", {"A": [2.0, 0.0, 0.0, 3.0], "ell": 2}) == 6.0


def test_subprocess_stdout_is_only_responses():
    env = dict(os.environ, ACCEL_GRADBENCH_BACKEND="interpreter")
    msgs = [{"id": 0, "kind": "start", "eval": "hello"},
            {"id": 1, "kind": "define", "module": "hello"},
            {"id": 2, "kind": "evaluate", "module": "hello", "function": "square",
             "input": 3.0},
            "this is not JSON",
            {"id": 4, "kind": "evaluate", "module": "hello", "function": "double",
             "input": 9.0},
            {"id": 5, "kind": "define", "module": "unknown"}]
    text = "\n".join(m if isinstance(m, str) else json.dumps(m) for m in msgs) + "\n"
    p = subprocess.run([sys.executable, "-m", "accel.adbench.gradbench"], input=text,
                       capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 0, p.stderr
    out = [json.loads(line) for line in p.stdout.splitlines()]
    assert [r["id"] for r in out] == [0, 1, 2, None, 4, 5]
    assert out[2]["output"] == 9.0 and out[4]["output"] == 18.0
    assert out[3]["success"] is False and out[5] == {"id": 5, "success": False}


# --------------------------------------------------------------------------- evals


def test_hello():
    tool = defined("hello")
    assert call(tool, "hello", "square", 1.5) == 2.25
    assert call(tool, "hello", "double", 1.5) == 3.0


def test_lse():
    x = np.array([0.3, -1.0, 2.5, 2.5, 0.0])
    tool = defined("lse")
    ref = np.log(np.sum(np.exp(x)))
    assert math.isclose(call(tool, "lse", "primal", {"x": x.tolist()}), ref, rel_tol=1e-12)
    np.testing.assert_allclose(call(tool, "lse", "gradient", {"x": x.tolist()}),
                               np.exp(x - ref), rtol=1e-12)


def test_llsq():
    x, n = np.array([0.5, -0.25, 1.0, 0.125]), 7
    t = -1.0 + np.arange(n) * 2.0 / (n - 1)
    vander = t[:, None] ** np.arange(x.size)[None, :]
    r = np.sign(t) - vander @ x
    tool = defined("llsq")
    inp = {"x": x.tolist(), "n": n}
    assert math.isclose(call(tool, "llsq", "primal", inp), 0.5 * r @ r, rel_tol=1e-12)
    np.testing.assert_allclose(call(tool, "llsq", "gradient", inp), -vander.T @ r,
                               rtol=1e-12, atol=1e-14)


def test_kmeans():
    rng = np.random.default_rng(1)
    points = rng.random((9, 3))
    centroids = points[-3:]
    d2 = ((points[:, None, :] - centroids[None, :, :]) ** 2).sum(-1)
    near = d2.argmin(1)
    tool = defined("kmeans")
    inp = {"points": points.tolist(), "centroids": centroids.tolist()}
    assert math.isclose(call(tool, "kmeans", "cost", inp), d2.min(1).sum(), rel_tol=1e-12)
    means = np.array([points[near == j].mean(0) for j in range(3)])
    np.testing.assert_allclose(call(tool, "kmeans", "dir", inp), centroids - means,
                               rtol=1e-10, atol=1e-14)


def test_det():
    rng = np.random.default_rng(2)
    tool = defined("det")
    for ell in (1, 2, 4, 5):
        m = rng.random((ell, ell))
        inp = {"A": m.ravel().tolist(), "ell": ell}
        ref = np.linalg.det(m)
        assert math.isclose(call(tool, "det", "primal", inp), ref, rel_tol=1e-10)
        cofactors = ref * np.linalg.inv(m).T
        np.testing.assert_allclose(call(tool, "det", "gradient", inp), cofactors.ravel(),
                                   rtol=1e-9, atol=1e-13)


def _gmm_input(d, k, n, seed=3):
    rng = np.random.default_rng(seed)
    return {"d": d, "k": k, "n": n, "m": 2, "gamma": 1.5, "x": rng.random((n, d)).tolist(),
            "alpha": rng.normal(size=k).tolist(), "mu": rng.random((k, d)).tolist(),
            "q": (0.3 * rng.normal(size=(k, d))).tolist(),
            "l": rng.normal(size=(k, d * (d - 1) // 2)).tolist()}


def _gmm_numpy(inp, alpha, mu, q, ltri):
    """GradBench's corrected GMM log posterior, written from its README."""
    d, k, n, m, gamma = inp["d"], inp["k"], inp["n"], inp["m"], inp["gamma"]
    x = np.array(inp["x"])
    qmat = np.zeros((k, d, d))
    for kk in range(k):
        qmat[kk][np.diag_indices(d)] = np.exp(q[kk])
        rows, cols = zip(*[(r, c) for c in range(d) for r in range(c + 1, d)]) if d > 1 \
            else ((), ())
        qmat[kk][list(rows), list(cols)] = ltri[kk]
    z = np.einsum("kij,nkj->nki", qmat, x[:, None, :] - mu[None])
    beta = alpha + q.sum(1) - 0.5 * (z ** 2).sum(-1)

    def lse(v, axis=None):
        mx = v.max(axis=axis, keepdims=True)
        return (np.log(np.exp(v - mx).sum(axis=axis, keepdims=True)) + mx).squeeze()

    nn = d + m + 1
    multigammaln = d * (d - 1) / 4 * math.log(math.pi) + sum(
        math.lgamma(0.5 * nn + (1 - j) / 2) for j in range(1, d + 1))
    prior = (0.5 * gamma ** 2 * ((np.exp(q) ** 2).sum() + (ltri ** 2).sum())
             - m * q.sum())
    const = k * (nn * d * math.log(gamma / math.sqrt(2)) - multigammaln)
    return (-n * d * 0.5 * math.log(2 * math.pi) + lse(beta, 1).sum() - n * lse(alpha)
            - prior + const)


def test_gmm_against_numpy_and_central_differences():
    inp = _gmm_input(3, 2, 5)
    theta = [np.array(inp[f], dtype=float) for f in ("alpha", "mu", "q", "l")]
    tool = defined("gmm")
    assert math.isclose(call(tool, "gmm", "objective", inp), _gmm_numpy(inp, *theta),
                        rel_tol=1e-11)
    grad = call(tool, "gmm", "jacobian", inp)
    h = 1e-6
    for f, arr in zip(("alpha", "mu", "q", "l"), theta):
        got = np.array(grad[f])
        assert got.shape == arr.shape
        for idx in itertools.product(*map(range, arr.shape)):
            plus = [t.copy() for t in theta]
            minus = [t.copy() for t in theta]
            plus[("alpha", "mu", "q", "l").index(f)][idx] += h
            minus[("alpha", "mu", "q", "l").index(f)][idx] -= h
            fd = (_gmm_numpy(inp, *plus) - _gmm_numpy(inp, *minus)) / (2 * h)
            assert math.isclose(got[idx], fd, rel_tol=1e-6, abs_tol=1e-6), (f, idx)


def test_ba_against_the_numpy_reference():
    from accel.adbench.ba import numpy_jacobian, numpy_residuals
    inp = {"n": 2, "m": 3, "p": 12, "w": 0.8, "feat": [271.7, 834.2],
           "cam": [-0.75, -1.1, -0.84, 34.5, 39.6, 53.8, 419.1, 5.8, -8.5, 0.08, 0.002],
           "x": [7.2, 0.001, 3.02]}
    tool = defined("ba")
    i = np.arange(12)
    cams, pts = np.tile(inp["cam"], (2, 1)), np.tile(inp["x"], (3, 1))
    ws, feats = np.full(12, 0.8), np.tile(inp["feat"], (12, 1))
    obs = np.stack([i % 2, i % 3], axis=1)
    reproj, werr = numpy_residuals(cams, pts, ws, feats, obs)
    got = call(tool, "ba", "objective", inp)
    assert got["reproj_error"]["repeated"] == 12 and got["w_err"]["repeated"] == 12
    np.testing.assert_allclose(got["reproj_error"]["elements"], reproj[0], rtol=1e-12)
    assert math.isclose(got["w_err"]["element"], werr[0], rel_tol=1e-12)
    jac = call(tool, "ba", "jacobian", inp)
    ref = numpy_jacobian(cams, pts, ws, feats, obs)
    for name in ("rows", "cols", "vals"):
        full = np.asarray(getattr(ref, name))
        want = np.concatenate([full[:30], full[-1:]])
        np.testing.assert_allclose(jac[name], want, rtol=1e-10, atol=1e-12, err_msg=name)


def _ode_numpy(x, s):
    h, y = 2.0 / s, np.zeros_like(x)

    def f(y):
        return np.concatenate([x[:1], x[1:] * y[:-1]])

    for _ in range(s):
        k1 = f(y)
        k2 = f(y + h * k1 / 2)
        k3 = f(y + h * k2 / 2)
        k4 = f(y + h * k3)
        y = y + h * (k1 + 2 * k2 + 2 * k3 + k4) / 6
    return y


def test_ode_against_numpy_and_central_differences():
    x, s = np.array([0.4, 0.9, 0.2, 0.7]), 3
    tool = defined("ode")
    inp = {"x": x.tolist(), "s": s}
    np.testing.assert_allclose(call(tool, "ode", "primal", inp), _ode_numpy(x, s),
                               rtol=1e-13)
    h, eye = 1e-6, np.eye(x.size)
    fd = [(_ode_numpy(x + h * e, s)[-1] - _ode_numpy(x - h * e, s)[-1]) / (2 * h) for e in eye]
    np.testing.assert_allclose(call(tool, "ode", "gradient", inp), fd, rtol=1e-7, atol=1e-9)


def _central(f, x, h=1e-6):
    """Central differences of ``f`` (a vector or scalar) along each entry of ``x``."""
    cols = []
    for idx in np.ndindex(x.shape):
        d = np.zeros_like(x)
        d[idx] = h
        cols.append((np.asarray(f(x + d)) - np.asarray(f(x - d))) / (2 * h))
    return np.stack(cols, axis=-1)


def _lstm_numpy(main, extra, state, seq):
    layers, b = main.shape[0] // 2, seq.shape[1]
    st, total = state.copy(), 0.0

    def sig(v):
        return 1 / (1 + np.exp(-v))

    for t in range(seq.shape[0] - 1):
        x = seq[t] * extra[0]
        for k in range(layers):
            w, bias, h, c = main[2 * k], main[2 * k + 1], st[2 * k], st[2 * k + 1]
            gate = [w[g * b:(g + 1) * b] for g in range(4)], [bias[g * b:(g + 1) * b]
                                                             for g in range(4)]
            c = (c * sig(x * gate[0][0] + gate[1][0])
                 + sig(h * gate[0][1] + gate[1][1]) * np.tanh(h * gate[0][3] + gate[1][3]))
            h = sig(x * gate[0][2] + gate[1][2]) * np.tanh(c)
            st[2 * k], st[2 * k + 1], x = h, c, h
        y = x * extra[1] + extra[2]
        total += np.sum(seq[t + 1] * (y - np.log(np.sum(np.exp(y)) + 2)))
    return -total / ((seq.shape[0] - 1) * b)


def test_lstm_against_numpy_and_central_differences():
    rng = np.random.default_rng(3)
    layers, b, c = 2, 3, 4
    main, extra, state = rng.random((2 * layers, 4 * b)), rng.random((3, b)), rng.random(
        (2 * layers, b))
    seq = rng.integers(0, 2, (c, b)).astype(float)
    tool = defined("lstm")
    inp = {"main_params": main.tolist(), "extra_params": extra.tolist(),
           "state": state.tolist(), "sequence": seq.tolist()}
    assert math.isclose(call(tool, "lstm", "objective", inp),
                        _lstm_numpy(main, extra, state, seq), rel_tol=1e-13)
    fd = np.concatenate([_central(lambda m: _lstm_numpy(m, extra, state, seq), main),
                         _central(lambda e: _lstm_numpy(main, e, state, seq), extra)])
    np.testing.assert_allclose(call(tool, "lstm", "jacobian", inp), fd, rtol=1e-6,
                               atol=1e-9)


def _ht_numpy(theta, us, model, corr, triangles, points):
    """ADBench's hand residuals (GradBench's ht.hpp) in NumPy."""
    from accel.adbench.gradbench.ht import pose_map
    rel, inv, base, weights = (np.array(model[k]) for k in (
        "base_relatives", "inverse_base_absolutes", "base_positions", "weights"))
    parents, nb = model["parents"], len(model["parents"])
    pmap = pose_map(nb)
    pose = np.where(pmap >= 0, theta[np.maximum(pmap, 0)], 0.0)
    pose[:, 1] = 1.0

    def rot(axis, a):
        i, j = [(1, 2), (0, 2), (0, 1)][axis]
        r = np.eye(3)
        r[i, i] = r[j, j] = np.cos(a)
        r[i, j], r[j, i] = -np.sin(a), np.sin(a)
        if axis == 1:
            r[i, j], r[j, i] = r[j, i], r[i, j]
        return r

    absolutes, pos = [], np.zeros((base.shape[0], 3))
    for b in range(nb):
        tr = np.eye(4)
        tr[:3, :3] = rot(2, pose[1, b + 3]) @ rot(1, pose[2, b + 3]) @ rot(0, pose[0, b + 3])
        r = rel[b] @ tr
        absolutes.append(r if parents[b] < 0 else absolutes[parents[b]] @ r)
        pos += (base @ (absolutes[b] @ inv[b]).T)[:, :3] * weights[:, b:b + 1]
    if model["is_mirrored"]:
        pos[:, 0] *= -1
    n = np.linalg.norm(pose[:, 0])
    k = pose[:, 0] / n
    cross = np.array([[0, -k[2], k[1]], [k[2], 0, -k[0]], [-k[1], k[0], 0]])
    glob = np.eye(3) + np.sin(n) * cross + (1 - np.cos(n)) * cross @ cross
    pos = pos @ glob.T + pose[:, 2]
    if us is None:
        hand = pos[corr]
    else:
        v = np.asarray(triangles)[corr]
        u0, u1 = us[:, :1], us[:, 1:]
        hand = u0 * pos[v[:, 0]] + u1 * pos[v[:, 1]] + (1 - u0 - u1) * pos[v[:, 2]]
    return (points - hand).ravel()


@pytest.mark.parametrize("variant", ["simple", "complicated"])
def test_ht_against_numpy_and_central_differences(variant):
    rng = np.random.default_rng(4)
    nb, nv, n = 22, 5, 3
    parents = [-1] + [0 if i % 4 == 1 else i - 1 for i in range(1, nb)]

    def transforms():
        m = np.tile(np.eye(4), (nb, 1, 1))
        m[:, :3, :] += 0.3 * rng.standard_normal((nb, 3, 4))
        return m.tolist()

    model = {"bone_count": nb, "bone_names": [f"b{i}" for i in range(nb)],
             "parents": parents, "base_relatives": transforms(),
             "inverse_base_absolutes": transforms(),
             "base_positions": np.c_[rng.random((nv, 3)), np.ones(nv)].tolist(),
             "weights": rng.random((nv, nb)).tolist(),
             "triangles": [[0, 1, 2], [2, 3, 4], [4, 0, 1]], "is_mirrored": True}
    theta = 0.5 * rng.standard_normal(26)
    corr = [2, 0, 1] if variant == "complicated" else [4, 0, 3]
    points = rng.random((n, 3))
    us = rng.random((n, 2)) if variant == "complicated" else None
    inp = {"theta": theta.tolist(), "us": [] if us is None else us.tolist(),
           "data": {"model": model, "correspondences": corr, "points": points.tolist()}}
    tool = defined("ht")

    def ref(th, u=us):
        return _ht_numpy(th, u, model, corr, model["triangles"], points)

    np.testing.assert_allclose(call(tool, "ht", "objective", inp), ref(theta), rtol=1e-12,
                               atol=1e-12)
    fd = _central(ref, theta)
    if us is not None:
        # Every residual depends on its own point's u only: the u0 and u1 columns.
        du = _central(lambda u: ref(theta, u), us)
        fd = np.concatenate([du[:, 0::2].sum(axis=1, keepdims=True),
                             du[:, 1::2].sum(axis=1, keepdims=True), fd], axis=1)
    jac = np.array(call(tool, "ht", "jacobian", inp))
    assert jac.shape == (3 * n, 26 + (2 if us is not None else 0))
    np.testing.assert_allclose(jac, fd, rtol=1e-6, atol=1e-8)
