"""Random well-typed accel programs, as readable Python source over the public API.

A program is drawn from a *choice source* (``Source``): every decision is one bounded
integer, and the smallest integer is always the simplest choice (a leaf, the most
recent variable, the first option).  So the same generator serves

- hypothesis (``HypothesisSource``): hypothesis shrinks the integers, hence the program;
- a seeded ``random.Random`` (``RandomSource``), which records the choices so that
  ``ReplaySource`` can replay a shrunk choice sequence (the soak's shrinker).

The result is a ``ProgramDesc``: the source text of ``def prog(a0, ...)`` (plus ``def
loss`` for differentiable programs, summing the float results to a scalar), the input
arrays, and the set of language features used.  Its ``repr`` is a self-contained
reproducer; ``build()`` executes the source, so the program is traced exactly like user
code.

Invariants (by construction, so that a failure is accel's fault, not the generator's):

- well-typed: every expression is generated for a known type; Python constants are
  rendered with their type (``np.float32(0.5)``), never mixed without conversion;
- in bounds: every index component is ``e % a.shape[d]`` or ``A.min(A.max(e, 0),
  a.shape[d] - 1)`` of an array known to be non-empty in that dimension (sizes are
  tracked as lower bounds); permute targets are reduced modulo the defaults' shape or
  ``A.ignore``;
- no domain errors: ``log``/``sqrt`` of ``x * x + 1``, division by ``y * y + 1``,
  ``asin``/``acos`` of ``0.9 * tanh``/``sin``, integer ``//``/``%`` by ``max(|y|, 1)``;
- bounded: loops are counted (``s[0] < n`` with ``n <= 3``), arrays have at most ~10
  elements per dimension and rank <= 2;
- permute combinations are ``+ * max min`` or a projection (``\\new old -> new``, a scatter
  in which colliding targets are common: the last write wins; ``\\new old -> old``);
- fold and scan operators are associative (``+ * max min``, first/last, ``p + q + pq``,
  log-add-exp, affine composition, argmax on pairs), several of them non-commutative;
- permute operators are associative and commutative: ``+ * max min`` (the fast paths) and
  general ones (``p * q * 2``, log-add-exp, a (sum, count) pair read back as the mean).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .sources import Source
from .statements import StatementGen


# --------------------------------------------------------------------------- descriptions


def _array_source(x: np.ndarray) -> str:
    dt = f"np.{x.dtype.name}" if x.dtype != np.bool_ else "np.bool_"
    if x.ndim == 0:
        return f"np.array({x.item()!r}, dtype={dt})"
    if x.size == 0:
        return f"np.zeros({x.shape!r}, dtype={dt})"
    return f"np.array({x.tolist()!r}, dtype={dt})"


@dataclass
class ProgramDesc:
    """A generated program: source text, inputs, and what it exercises.

    ``repr`` prints a runnable reproducer; ``build()`` returns ``(prog, loss)`` (``loss``
    is None unless ``differentiable``).
    """

    source: str
    inputs: tuple
    param_types: tuple  # ((elt, rank), ...) with elt one of SCALARS
    differentiable: bool
    features: frozenset = field(default_factory=frozenset)
    choices: tuple = ()  # the recorded choice sequence (RandomSource/ReplaySource only)

    def args_source(self) -> str:
        inner = ", ".join(_array_source(x) for x in self.inputs)
        return f"args = ({inner}{',' if len(self.inputs) == 1 else ''})"

    def reproducer(self) -> str:
        return ("import numpy as np\nimport accel as A\n\n" + self.source + "\n"
                + self.args_source() + "\n")

    def __repr__(self) -> str:
        return "ProgramDesc(\n" + self.reproducer() + ")"

    def _repr_pretty_(self, p, cycle):  # hypothesis prints falsifying examples this way
        p.text(repr(self))

    def build(self):
        import accel
        ns = {"A": accel, "np": np}
        exec(compile(self.source, "<generated program>", "exec"), ns)  # noqa: S102
        return ns["prog"], ns.get("loss")

    def args(self) -> list:
        """Fresh copies of the inputs."""
        return [np.array(x, copy=True) for x in self.inputs]


# --------------------------------------------------------------------------- generator


class Gen(StatementGen):
    """One program being generated (see the module docstring for the invariants)."""

    def program(self) -> ProgramDesc:
        types, inputs = self.gen_inputs()
        params = ", ".join(f"a{i}" for i in range(len(types)))
        n = self.src.int(1, self.max_stmts)
        made = 0
        for _ in range(4 * n):
            if made >= n:
                break
            statement = self.src.weighted(self.STATEMENTS)
            before = (len(self.top.lines), len(self.top.vars), len(self.arrays))
            out = statement(self)
            if out is None:  # abandoned: forget its lines and what they bound
                del self.top.lines[before[0]:]
                del self.top.vars[before[1]:]
                del self.arrays[before[2]:]
                continue
            made += 1
        n_in = len(types)
        # the last array, and (so that no statement is dead code) the unused ones
        results = [self.arrays[-1]]
        for a in reversed(self.arrays[n_in:-1]):
            if a.name not in self.used and len(results) < 3:
                results.append(a)
        if len(results) == 1 and len(self.arrays) > 1 and self.src.flag(0.1):
            results.append(self.src.choice(self.arrays[:-1]))
        if self.diff:
            results = [self.float_result(a) for a in results]
        if len(results) > 1:
            self.feat("tuple_result")
        ret = results[0].name if len(results) == 1 else \
            "(" + ", ".join(r.name for r in results) + ")"
        lines = [f"def prog({params}):"] + self.top.lines + [f"    return {ret}"]
        if self.diff:
            if len(results) == 1:
                lines += ["", "", f"def loss({params}):", f"    return A.sum_all(prog({params}))"]
            else:
                terms = " + ".join(f"A.the(A.sum_all(r[{i}]))" for i in range(len(results)))
                lines += ["", "", f"def loss({params}):", f"    r = prog({params})",
                          f"    return A.unit({terms})"]
        source = "\n".join(lines) + "\n"
        choices = tuple(getattr(self.src, "choices", ()))
        return ProgramDesc(source, inputs, types, self.diff, frozenset(self.features), choices)


def generate_program(src: Source, *, differentiable: bool = False, max_stmts: int = 6,
                     allow_empty: bool = True, depth: int = 3,
                     avoid_known_bugs: bool = True) -> ProgramDesc:
    """Draw one random well-typed program (with inputs) from ``src``.

    ``differentiable=True`` makes a program over float64 (and integer) arrays whose
    results are float64 arrays, plus ``def loss`` summing them to a rank-0 float64 array.
    ``avoid_known_bugs`` leaves out the constructs of the open (xfail) regressions in
    ``tests/regressions`` so that the properties test everything else.

    >>> desc = generate_program(RandomSource(0))
    >>> prog, _ = desc.build(); A.run(prog, *desc.args(), backend="interpreter")
    """
    return Gen(src, differentiable, max_stmts, allow_empty, depth, avoid_known_bugs).program()


#: Every feature the generator can produce (checked by the coverage test).
ALL_FEATURES = frozenset(
    ["map", "zip_with", "zip", "generate", "fill", "unit", "use", "iota", "fold", "fold1",
     "sum", "product", "maximum", "minimum", "fold_all", "sum_all", "scanl", "scanr",
     "scanl1", "scanr1", "backpermute", "permute", "permute_add", "permute_max", "permute_scatter",
     "permute_keep", "permute_mul2",
     "permute_logaddexp", "permute_sum_count", "ignore",
     "replicate", "slice", "reshape", "transpose", "flatten", "acond", "awhile", "the",
     "top_scalar", "shape", "size", "index", "index_clamp", "cond", "while_", "let", "share",
     "tuple", "tuple_result", "to_float", "to_int", "compare", "logic", "nan_inf_input",
     "add", "sub", "mul", "div", "floordiv", "mod", "pow", "neg", "abs", "max", "min",
     "and", "or", "xor", "not", "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh",
     "tanh", "exp", "expm1", "log", "log1p", "sqrt", "atan2", "floor", "ceil", "round",
     "truncate", "fold_add", "fold_mul", "fold_max", "fold_min", "fold_first", "fold_last",
     "fold_pq", "fold_logaddexp", "fold_affine", "fold_argmax", "fold_pair_add"])
