"""Neural-network building blocks: a two-layer MLP, softmax attention, an RNN.

The MLP is ``0.5 sum((tanh(x W1^T + b1) W2^T + b2 - y)^2)``, written with dense layers
as ``replicate`` + ``zip_with`` + ``sum`` and as ``generate`` + indexing + ``sum``.
Attention is ``sum(softmax(q k^T / sqrt(d)) v)^2`` (softmax shifted by the row
maximum, as a user writes it).  The RNN runs ``h <- tanh(W h + U x_t + b)`` over the
rows of ``x`` with ``awhile`` (JAX: ``lax.scan``) and returns ``sum(h_T^2)``.
"""

from __future__ import annotations

import math

import numpy as np

import accel as A

from .program import Program, add, dims, mul, square

# ---------------------------------------------------------------- MLP


def _dense_replicate(x, w, b):
    """(N, I) x (O, I)^T + b -> (N, O)."""
    n, o = x.shape[0], w.shape[0]
    prod = A.zip_with(mul, A.replicate((A.All, o, A.All), x), A.replicate((n, A.All, A.All), w))
    return A.zip_with(add, A.sum(prod), A.replicate((n, A.All), b))


def _dense_generate(x, w, b):
    n, o, i = x.shape[0], w.shape[0], w.shape[1]
    s = A.sum(A.generate((n, o, i), lambda ix: x[ix[0], ix[2]] * w[ix[1], ix[2]]))
    return A.generate((n, o), lambda ix: s[ix[0], ix[1]] + b[ix[1]])


def _mlp(dense):
    def mlp(w1, b1, w2, b2, x, y):
        h = A.map(A.tanh, dense(x, w1, b1))
        out = dense(h, w2, b2)
        return A.sum_all(A.map(lambda r: 0.5 * r * r, A.zip_with(lambda p, t: p - t, out, y)))
    return mlp


mlp_replicate = _mlp(_dense_replicate)
mlp_generate = _mlp(_dense_generate)


def jax_mlp(w1, b1, w2, b2, x, y):
    import jax.numpy as jnp
    h = jnp.tanh(jnp.matmul(x, w1.T) + b1)
    r = jnp.matmul(h, w2.T) + b2 - y
    return 0.5 * jnp.sum(r * r)


def torch_mlp(w1, b1, w2, b2, x, y):
    import torch
    h = torch.tanh(torch.matmul(x, w1.T) + b1)
    r = torch.matmul(h, w2.T) + b2 - y
    return 0.5 * torch.sum(r * r)


def np_mlp(w1, b1, w2, b2, x, y):
    h = np.tanh(x @ w1.T + b1)
    r = h @ w2.T + b2 - y
    return float(0.5 * (r * r).sum())


def _mlp_inputs(size, rng):
    n, i, h, o = dims(size, (4, 3, 5, 2), (200, 20, 32, 4), (2000, 100, 256, 10))
    return (rng.standard_normal((h, i)) / math.sqrt(i), rng.standard_normal(h) * 0.1,
            rng.standard_normal((o, h)) / math.sqrt(h), rng.standard_normal(o) * 0.1,
            rng.standard_normal((n, i)), rng.standard_normal((n, o)))


# ---------------------------------------------------------------- attention


def _softmax_rows(s):
    t = s.shape[1]
    e = A.map(A.exp, A.zip_with(lambda v, m: v - m, s, A.replicate((A.All, t), A.maximum(s))))
    return A.zip_with(lambda v, z: v / z, e, A.replicate((A.All, t), A.sum(e)))


def attention_replicate(q, k, v):
    t, d = q.shape
    scale = 1.0 / A.sqrt(A.to_float(d))
    s = A.sum(A.zip_with(mul, A.replicate((A.All, t, A.All), q),
                         A.replicate((t, A.All, A.All), k)))
    p = _softmax_rows(A.map(lambda x: x * scale, s))
    out = A.sum(A.zip_with(mul, A.replicate((A.All, d, A.All), p),
                           A.replicate((t, A.All, A.All), A.transpose(v))))
    return A.sum_all(A.map(square, out))


def attention_generate(q, k, v):
    t, d = q.shape
    scale = 1.0 / A.sqrt(A.to_float(d))
    s = A.sum(A.generate((t, t, d), lambda ix: q[ix[0], ix[2]] * k[ix[1], ix[2]] * scale))
    p = _softmax_rows(s)
    out = A.sum(A.generate((t, d, t), lambda ix: p[ix[0], ix[2]] * v[ix[2], ix[1]]))
    return A.sum_all(A.map(square, out))


def jax_attention(q, k, v):
    import jax
    import jax.numpy as jnp
    p = jax.nn.softmax(jnp.matmul(q, k.T) / math.sqrt(q.shape[1]), axis=-1)
    return jnp.sum(jnp.matmul(p, v) ** 2)


def torch_attention(q, k, v):
    import torch
    p = torch.softmax(torch.matmul(q, k.T) / math.sqrt(q.shape[1]), dim=-1)
    return torch.sum(torch.matmul(p, v) ** 2)


def np_attention(q, k, v):
    s = q @ k.T / math.sqrt(q.shape[1])
    e = np.exp(s - s.max(axis=1, keepdims=True))
    return float(((e / e.sum(axis=1, keepdims=True) @ v) ** 2).sum())


def _attention_inputs(size, rng):
    t, d = dims(size, (4, 3), (64, 16), (256, 64))
    return tuple(rng.standard_normal((t, d)) for _ in range(3))


# ---------------------------------------------------------------- RNN


def rnn_awhile(w, u, b, xs, h0):
    steps, hdim = xs.shape[0], h0.shape[0]

    def matvec(m, v):
        return A.sum(A.zip_with(mul, m, A.replicate((hdim, A.All), v)))

    def body(state):
        h, t = state
        xt = A.slice(xs, (A.the(t), A.All))
        pre = A.zip_with(add, A.zip_with(add, matvec(w, h), matvec(u, xt)), b)
        return A.map(A.tanh, pre), A.map(lambda i: i + 1, t)

    h, _ = A.awhile(lambda s: A.map(lambda i: i < steps, s[1]), body, (h0, A.unit(0)))
    return A.sum_all(A.map(square, h))


def jax_rnn(w, u, b, xs, h0):
    import jax.numpy as jnp
    from jax import lax

    def step(h, x):
        return jnp.tanh(jnp.matmul(w, h) + jnp.matmul(u, x) + b), None

    h, _ = lax.scan(step, h0, xs)
    return jnp.sum(h * h)


def torch_rnn(w, u, b, xs, h0):
    import torch
    h = h0
    for x in xs:
        h = torch.tanh(torch.matmul(w, h) + torch.matmul(u, x) + b)
    return torch.sum(h * h)


def np_rnn(w, u, b, xs, h0):
    h = h0
    for x in xs:
        h = np.tanh(w @ h + u @ x + b)
    return float((h * h).sum())


def _rnn_inputs(size, rng):
    t, h, i = dims(size, (3, 4, 2), (20, 16, 8), (100, 128, 32))
    return (rng.standard_normal((h, h)) / math.sqrt(h), rng.standard_normal((h, i)) / math.sqrt(i),
            rng.standard_normal(h) * 0.1, rng.standard_normal((t, i)), rng.standard_normal(h))


PROGRAMS = [
    Program(name="mlp", accel={"replicate": mlp_replicate, "generate": mlp_generate},
            jax={"matmul": jax_mlp}, torch={"matmul": torch_mlp}, inputs=_mlp_inputs,
            wrt=(0, 1, 2, 3), reference=np_mlp, note="2000 x 100 -> 256 (tanh) -> 10"),
    Program(name="attention", accel={"replicate": attention_replicate,
                                     "generate": attention_generate},
            jax={"matmul+softmax": jax_attention}, torch={"matmul+softmax": torch_attention},
            inputs=_attention_inputs, wrt=(0, 1, 2), reference=np_attention,
            note="T = 256, d = 64"),
    Program(name="rnn", accel={"awhile": rnn_awhile}, jax={"lax.scan": jax_rnn},
            torch={"loop": torch_rnn}, inputs=_rnn_inputs, wrt=(0, 1, 2), reference=np_rnn,
            note="100 steps, hidden 128, input 32"),
]
