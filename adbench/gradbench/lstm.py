"""GradBench's ``lstm`` eval: ADBench's diagonal LSTM over a character sequence.

Inputs (``b`` = bits per character, ``l`` layers, ``c`` characters): ``main_params``
``(2l, 4b)`` (row ``2k`` the forget/input/output/change weights of layer ``k``, row
``2k+1`` their biases), ``extra_params`` ``(3, b)`` (input weight, output weight, output
bias), ``state`` ``(2l, b)`` (row ``2k`` layer ``k``'s hidden, ``2k+1`` its cell) and
``sequence`` ``(c, b)``.  For each ``t < c - 1`` the layers run in order on
``sequence[t] * in_weight``; the last hidden state, scaled and shifted, is normalised with
``log(sum(exp(y)) + 2)`` (ADBench's "logsumexp") and scored against ``sequence[t + 1]``;
the objective is ``-total / ((c - 1) b)``.  ``jacobian`` is its gradient with respect to
``main_params`` and ``extra_params``, each flattened row by row, concatenated.

The eval's two nested loops (time, then layers within a step) are one ``A.awhile`` over
the flat step number ``s = t l + k``: its state carries the layer states, the current
layer input and the running total, and each step updates one layer's two state rows.
Flattening keeps a single loop for ``A.gradientA`` to differentiate, and one compiled
program serves every ``l`` and ``c``.  The loop keeps every 32nd state on its reverse-mode
tape (``checkpoint=32``): writing each state into the tape costs time proportional to the
tape's length on every step, which made the gradient quadratic in ``(c - 1) l`` (cpu,
``l=2, b=7``: 21 s for ``c=512`` with every state taped, 4.3 s with ``checkpoint=32``).
"""

from __future__ import annotations

import numpy as np

import accel as A

from .evalfn import PROGRAMS, EvalFunction, InputError, field, floats, scalar


def _sigmoid(x):
    return 1.0 / (1.0 + A.exp(-x))


def objective(main_params, extra_params, state, sequence):
    """The LSTM loss (rank 0)."""
    b = sequence.shape[1]
    layers = main_params.shape[0] // 2
    steps = (sequence.shape[0] - 1) * layers

    def step(st):
        hc, x, ss, total = st
        s = A.the(ss)
        k, t = s % layers, s // layers
        # The layer's input: the scaled character for the first layer, else the
        # previous layer's new hidden state.
        x_in = A.generate((b,), lambda j: A.cond(k == 0, sequence[t, j] * extra_params[0, j],
                                                 x[j]))

        def cell(j):
            w, bias = 2 * k, 2 * k + 1
            hid = hc[2 * k, j]
            forget = _sigmoid(x_in[j] * main_params[w, j] + main_params[bias, j])
            ingate = _sigmoid(hid * main_params[w, b + j] + main_params[bias, b + j])
            change = A.tanh(hid * main_params[w, 3 * b + j] + main_params[bias, 3 * b + j])
            return hc[2 * k + 1, j] * forget + ingate * change

        c_new = A.generate((b,), cell)
        h_new = A.generate((b,), lambda j: _sigmoid(
            x_in[j] * main_params[2 * k, 2 * b + j] + main_params[2 * k + 1, 2 * b + j])
            * A.tanh(c_new[j]))
        hc_new = A.generate(hc.shape, lambda ix: A.cond(
            ix[0] == 2 * k, h_new[ix[1]],
            A.cond(ix[0] == 2 * k + 1, c_new[ix[1]], hc[ix[0], ix[1]])))
        # The prediction after the last layer, scored against the next character (its
        # value counts only on the last layer's step).
        ypred = A.generate((b,), lambda j: h_new[j] * extra_params[1, j] + extra_params[2, j])
        lse = A.the(A.map(lambda v: A.log(v + 2.0), A.sum(A.map(A.exp, ypred))))
        score = A.sum(A.generate((b,), lambda j: sequence[t + 1, j] * (ypred[j] - lse)))
        total_new = A.zip_with(lambda a, v: a + A.cond(k == layers - 1, v, 0.0), total, score)
        return hc_new, h_new, A.map(lambda v: v + 1, ss), total_new

    init = (state, A.generate((b,), lambda j: 0.0 * sequence[0, j]),
            A.unit(A.to_int(0)), A.unit(0.0 * sequence[0, 0]))
    _, _, _, total = A.awhile(lambda st: A.unit(A.the(st[2]) < steps), step, init,
                              checkpoint=32)
    count = A.to_float((sequence.shape[0] - 1) * b)
    return A.map(lambda v: -v / count, total)


jacobian = A.gradientA(objective, wrt=(0, 1))


def _decode(inp) -> tuple:
    main = floats(field(inp, "main_params"), "main_params", 2)
    extra = floats(field(inp, "extra_params"), "extra_params", 2)
    state = floats(field(inp, "state"), "state", 2)
    seq = floats(field(inp, "sequence"), "sequence", 2)
    b = seq.shape[1]
    layers = main.shape[0] // 2
    want = {"main_params": (2 * layers, 4 * b), "extra_params": (3, b),
            "state": (2 * layers, b)}
    got = {"main_params": main.shape, "extra_params": extra.shape, "state": state.shape}
    bad = [f"{f} {got[f]} (expected {want[f]})" for f in want if got[f] != want[f]]
    if layers < 1 or seq.shape[0] < 2:
        bad.append(f"need at least one layer and two characters, got main_params "
                   f"{main.shape}, sequence {seq.shape}")
    if bad:
        raise InputError("lstm: wrong shapes: " + ", ".join(bad))
    return main, extra, state, seq


def _encode_jacobian(g) -> list:
    g_main, g_extra = g
    return np.concatenate([g_main.ravel(), g_extra.ravel()]).tolist()


FUNCTIONS = {
    "objective": EvalFunction(decode=_decode, encode=scalar,
                              run=lambda *a: PROGRAMS.get(("lstm", "objective"),
                                                          lambda: objective)(*a)),
    "jacobian": EvalFunction(decode=_decode, encode=_encode_jacobian,
                             run=lambda *a: PROGRAMS.get(("lstm", "jacobian"),
                                                         lambda: jacobian)(*a)),
}
