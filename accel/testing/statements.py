"""Generating the array statements of random programs (``StatementGen``): one method
``s_<construct>`` per construct, weighted in ``STATEMENTS``; shapes, inputs and the
float results of differentiable programs.
"""

from __future__ import annotations

import numpy as np

from .expressions import (A_DTYPE, B, F32, F64, I32, I64, MAX_DIM, NP_DTYPE, Arr, Block,
                          E, ExpressionGen, is_float, is_int, is_num, is_pair)


class StatementGen(ExpressionGen):
    """Array statements over the expressions of ``ExpressionGen``."""

    def gen_shape(self, rank: int, nonempty: bool = False):
        """(code, lo, hi) of a shape of ``rank``: constants or sizes of arrays in scope."""
        codes, lo, hi = [], [], []
        for _ in range(rank):
            cands = [(a, d) for a in self.arrays for d in range(a.rank)
                     if a.hi[d] <= MAX_DIM and (a.lo[d] >= 1 or not nonempty)]
            kind = self.src.weighted([(3, "const"), (3 if cands else 0, "size"),
                                      (1 if cands else 0, "size+1")])
            if kind == "const":
                n = self.src.int(1, 4)
                codes.append(str(n))
                lo.append(n)
                hi.append(n)
            else:
                a, d = self.src.recent(cands)
                plus = 1 if kind == "size+1" else 0
                codes.append(f"{a.name}.shape[{d}]" + (" + 1" if plus else ""))
                lo.append(a.lo[d] + plus)
                hi.append(a.hi[d] + plus)
                self.feat("shape")
        code = "(" + ", ".join(codes) + ("," if rank == 1 else "") + ")"
        return code, tuple(lo), tuple(hi)

    def result_type_for(self, a_elt=None):
        """An element type for a new array: mostly float64 (or the source's type)."""
        opts = [(5, F64)]
        if a_elt is not None:
            opts.append((3, a_elt))
        opts.append((2, None))
        t = self.src.weighted(opts)
        return self.elt_type() if t is None else t

    def s_map(self):
        a = self.pick()
        out = self.result_type_for(a.elt)
        f = self.gen_fun(self.top, [a.elt], out)
        self.feat("map")
        return self.bind(f"A.map({f}, {a.name})", out, a.rank, a.lo, a.hi)

    def s_zip_with(self):
        a = self.pick()
        b = self.pick(lambda x: x.rank == a.rank)
        out = self.result_type_for(a.elt)
        if not (is_pair(a.elt) or is_pair(b.elt)) and self.src.flag(0.15):
            self.feat("zip")
            code, out = f"A.zip({a.name}, {b.name})", (a.elt, b.elt)
        else:
            f = self.gen_fun(self.top, [a.elt, b.elt], out)
            code = f"A.zip_with({f}, {a.name}, {b.name})"
            self.feat("zip_with")
        return self.bind(code, out, a.rank, tuple(map(min, a.lo, b.lo)),
                         tuple(map(min, a.hi, b.hi)))

    def s_generate(self):
        rank = self.src.weighted([(3, 1), (2, 2), (1, 0)])
        shape, lo, hi = self.gen_shape(rank)
        out = self.result_type_for()
        f = self.gen_fun(self.top, [], out, index_rank=rank)
        self.feat("generate")
        return self.bind(f"A.generate({shape}, {f})", out, rank, lo, hi)

    def s_fill(self):
        rank = self.src.weighted([(3, 1), (2, 2), (1, 0)])
        shape, lo, hi = self.gen_shape(rank)
        t = self.scalar_type()
        e = self.top_exp(t)
        self.feat("fill")
        return self.bind(f"A.fill({shape}, {e})", t, rank, lo, hi)

    def s_unit(self):
        t = self.scalar_type()
        e = self.top_exp(t, depth=2)
        self.feat("unit")
        return self.bind(f"A.unit({e})", t, 0, (), ())

    def s_use(self):
        rng = np.random.default_rng(self.src.int(0, 1000))
        n = self.src.int(1, 4)
        vals = [float(round(v, 3)) for v in rng.uniform(-2, 2, n)]
        self.feat("use")
        return self.bind(f"A.use(np.array({vals!r}))", F64, 1, (n,), (n,))

    def s_iota(self):
        shape, lo, hi = self.gen_shape(1)
        n = shape[1:-2]
        self.feat("iota")
        if self.src.flag(0.5):
            return self.bind(f"A.iota({n}, A.float64)", F64, 1, lo, hi)
        return self.bind(f"A.iota({n})", I64, 1, lo, hi)

    # folds and scans

    def fold_ops(self, t):
        """Associative operators on ``t``: [(feature, code, non-commutative)]."""
        if is_pair(t):
            a, b = t
            ops = []
            if is_num(a) and is_num(b):
                ops.append(("fold_pair_add", "lambda p, q: (p[0] + q[0], p[1] + q[1])"))
            if is_num(a) and a != B:
                ops.append(("fold_argmax", "lambda p, q: A.cond(q[0] > p[0], q, p)"))
            if a == b and is_float(a):
                ops.append(("fold_affine", "lambda p, q: (p[0] * q[0], p[1] * q[0] + q[1])"))
            ops.append(("fold_first", "lambda p, q: p"))
            return ops
        if t == B:
            return [("fold_and", "lambda p, q: p & q"), ("fold_or", "lambda p, q: p | q"),
                    ("fold_xor", "lambda p, q: p != q"), ("fold_last", "lambda p, q: q")]
        ops = [("fold_add", "lambda p, q: p + q"), ("fold_max", "lambda p, q: A.max(p, q)"),
               ("fold_mul", "lambda p, q: p * q"), ("fold_min", "lambda p, q: A.min(p, q)"),
               ("fold_first", "lambda p, q: p"), ("fold_last", "lambda p, q: q")]
        if is_float(t):
            ops += [("fold_pq", "lambda p, q: p + q + p * q"),
                    ("fold_logaddexp", "lambda p, q: A.max(p, q) + A.log1p(A.exp(-abs(p - q)))")]
        else:
            ops += [("fold_and", "lambda p, q: p & q"), ("fold_xor", "lambda p, q: p ^ q")]
        return ops

    def fold_seed(self, t) -> E:
        if is_pair(t):
            return E(f"({self.top_exp(t[0], 0)}, {self.top_exp(t[1], 0)})")
        return self.top_exp(t, depth=1)

    def _maybe_zip(self, a: Arr) -> Arr:
        """Sometimes ``A.zip(a, b)`` instead of ``a``, to fold and scan pairs."""
        if is_pair(a.elt) or not is_num(a.elt) or not self.src.flag(0.2):
            return a
        b = self.pick(lambda x: x.rank == a.rank and is_num(x.elt))
        self.feat("zip")
        return self.bind(f"A.zip({a.name}, {b.name})", (a.elt, b.elt), a.rank,
                         tuple(map(min, a.lo, b.lo)), tuple(map(min, a.hi, b.hi)))

    def s_fold(self):
        a = self.pick(lambda x: x.rank >= 1)
        if a is None:
            return None
        a = self._maybe_zip(a)
        inner_ok = a.lo[-1] >= 1
        num = is_num(a.elt)
        kind = self.src.weighted([(3, "fold"), (2 if num else 0, "sum"),
                                  (2 if inner_ok else 0, "fold1"),
                                  (1 if num else 0, "product"),
                                  (1 if num and inner_ok else 0, "maximum"),
                                  (1 if num and inner_ok else 0, "minimum"),
                                  (1, "fold_all"), (1 if num else 0, "sum_all")])
        self.feat(kind)
        if kind in ("sum", "product", "maximum", "minimum"):
            return self.bind(f"A.{kind}({a.name})", a.elt, a.rank - 1, a.lo[:-1], a.hi[:-1])
        if kind == "sum_all":
            return self.bind(f"A.sum_all({a.name})", a.elt, 0, (), ())
        feat, op = self.src.choice(self.fold_ops(a.elt))
        self.feat(feat)
        if kind == "fold1":
            return self.bind(f"A.fold1({op}, {a.name})", a.elt, a.rank - 1, a.lo[:-1],
                             a.hi[:-1])
        z = self.fold_seed(a.elt)
        if kind == "fold_all":
            return self.bind(f"A.fold_all({op}, {z}, {a.name})", a.elt, 0, (), ())
        return self.bind(f"A.fold({op}, {z}, {a.name})", a.elt, a.rank - 1, a.lo[:-1],
                         a.hi[:-1])

    def s_scan(self):
        a = self.pick(lambda x: x.rank >= 1 and x.hi[-1] <= MAX_DIM)
        if a is None:
            return None
        a = self._maybe_zip(a)
        kind = self.src.choice(["scanl", "scanr", "scanl1", "scanr1"])
        feat, op = self.src.choice(self.fold_ops(a.elt))
        self.feat(kind, feat)
        if kind.endswith("1"):
            return self.bind(f"A.{kind}({op}, {a.name})", a.elt, a.rank, a.lo, a.hi)
        z = self.fold_seed(a.elt)
        lo = a.lo[:-1] + (a.lo[-1] + 1,)
        hi = a.hi[:-1] + (a.hi[-1] + 1,)
        return self.bind(f"A.{kind}({op}, {z}, {a.name})", a.elt, a.rank, lo, hi)

    # index-space transformations

    def _target(self, blk: Block, a: Arr, depth=1) -> str:
        """An in-bounds index of ``a`` (a tuple, or bare for rank 1)."""
        comps = []
        for d in range(a.rank):
            e = self.gen_exp(blk, I64, depth)
            comps.append(f"({e}) % {a.name}.shape[{d}]")
        if a.rank == 1 and self.src.flag(0.5):
            return comps[0]
        return "(" + ", ".join(comps) + ("," if a.rank == 1 else "") + ")"

    def _index_fun(self, rank: int, make_body) -> str:
        """An index function (``lambda i:`` or ``def``) whose body is ``make_body(blk)``."""
        blk = Block(self.top.indent + 1, self.top.vars)
        if rank == 1:
            name = self.fresh("i")
            blk.vars.append((name, I64))
        else:
            name = self.fresh("ix")
            blk.vars += [(f"{name}[{d}]", I64) for d in range(rank)]
        body = make_body(blk)
        if not blk.lines:
            return f"lambda {name}: {body}"
        fname = self.fresh("f")
        self.top.emit(f"def {fname}({name}):")
        self.top.lines.extend(blk.lines)
        self.top.emit(f"    return {body}")
        return fname

    def s_backpermute(self):
        a = self.pick(lambda x: x.nonempty())
        if a is None:
            return None
        rank = self.src.weighted([(3, 1), (2, 2), (1, 0)])
        shape, lo, hi = self.gen_shape(rank)
        f = self._index_fun(rank, lambda blk: self._target(blk, a))
        self.feat("backpermute")
        return self.bind(f"A.backpermute({shape}, {f}, {a.name})", a.elt, rank, lo, hi)

    def s_permute(self):
        src = self.pick(lambda x: is_num(x.elt))
        if src is None:
            return None
        t = src.elt
        d = self.pick(lambda x: x.elt == t and x.nonempty())
        if d is None or self.src.flag(0.4):
            rank = self.src.weighted([(3, 1), (1, 2), (1, 0)])
            shape, lo, hi = self.gen_shape(rank, nonempty=True)
            d = self.bind(f"A.fill({shape}, {self.top_exp(t, 0)})", t, rank, lo, hi)
            self.feat("fill")
        general = 1 if is_float(t) else 0  # general operators (reverse: the grouped rule)
        comb_feat, comb = self.src.weighted([
            (4, ("permute_add", "lambda p, q: p + q")),
            (3, ("permute_max", "lambda p, q: A.max(p, q)")),
            (1, ("permute_min", "lambda p, q: A.min(p, q)")),
            (1, ("permute_mul", "lambda p, q: p * q")),
            (3, ("permute_scatter", "lambda new, old: new")),
            (1, ("permute_keep", "lambda new, old: old")),
            (general, ("permute_mul2", "lambda p, q: p * q * 2")),
            (general, ("permute_logaddexp",
                       "lambda p, q: A.max(p, q) + A.log1p(A.exp(-abs(p - q)))")),
            (general, ("permute_sum_count", "lambda p, q: (p[0] + q[0], p[1] + q[1])"))])
        if comb_feat == "permute_sum_count":
            # a (sum, count) histogram of (value, 1) pairs, read back as the mean
            pair = (t, I64)
            d = self.bind(f"A.map(lambda v: (v, np.int64(1)), {d.name})", pair, d.rank, d.lo,
                          d.hi)
            src = self.bind(f"A.map(lambda v: (v, np.int64(1)), {src.name})", pair,
                            src.rank, src.lo, src.hi)

        def body(blk):
            tgt = self._target(blk, d)
            if self.src.flag(0.4):
                ivars = self.vars_of(blk, I64)
                if ivars and self.src.flag(0.7):
                    op = self.src.choice(["<", ">=", "!=", "=="])
                    c = E(f"({self.src.recent(ivars)} % 2 {op} {self.src.int(0, 1)})"
                          if self.src.flag(0.5) else
                          f"({self.src.recent(ivars)} {op} {self.src.int(0, 3)})")
                else:
                    c = self.gen_exp(blk, B, 1)
                if not c.const:  # A.cond(False, t, A.ignore) would always ignore
                    self.feat("ignore")
                    return f"A.cond({c}, {tgt}, A.ignore)"
            return tgt

        f = self._index_fun(src.rank, body)
        self.feat("permute", comb_feat)
        r = self.bind(f"A.permute({comb}, {d.name}, {f}, {src.name})", d.elt, d.rank, d.lo,
                      d.hi)
        if comb_feat != "permute_sum_count":
            return r
        return self.bind(f"A.map(lambda p: p[0] / A.to_float(p[1], dtype={A_DTYPE[t]}), "
                         f"{r.name})", t, d.rank, d.lo, d.hi)

    def _size_code(self):
        cands = [(a, d) for a in self.arrays for d in range(a.rank) if a.hi[d] <= 4]
        if cands and self.src.flag(0.3):
            a, d = self.src.recent(cands)
            return f"{a.name}.shape[{d}]", a.lo[d], a.hi[d]
        n = self.src.int(1, 3)
        return str(n), n, n

    def s_replicate(self):
        a = self.pick(lambda x: x.rank <= 1)
        if a is None:
            return None
        if a.rank == 0:
            n1, l1, h1 = self._size_code()
            if self.src.flag(0.5):
                spec, lo, hi = f"({n1},)", (l1,), (h1,)
            else:
                n2, l2, h2 = self._size_code()
                spec, lo, hi = f"({n1}, {n2})", (l1, l2), (h1, h2)
        else:
            n1, l1, h1 = self._size_code()
            if self.src.flag(0.5):
                spec, lo, hi = f"({n1}, A.All)", (l1, a.lo[0]), (h1, a.hi[0])
            else:
                spec, lo, hi = f"(A.All, {n1})", (a.lo[0], l1), (a.hi[0], h1)
        self.feat("replicate")
        return self.bind(f"A.replicate({spec}, {a.name})", a.elt, len(lo), lo, hi)

    def s_slice(self):
        a = self.pick(lambda x: x.rank >= 1)
        if a is None:
            return None
        spec, lo, hi = [], [], []
        for d in range(a.rank):
            if a.lo[d] >= 1 and self.src.flag(0.5):
                k = self.src.weighted([(3, str(self.src.int(0, a.lo[d] - 1))),
                                       (1, f"{a.name}.shape[{d}] - 1"),
                                       (1, f"{a.name}.shape[{d}] // 2")])
                spec.append(k)
            else:
                spec.append("A.All")
                lo.append(a.lo[d])
                hi.append(a.hi[d])
        self.feat("slice")
        code = "(" + ", ".join(spec) + ("," if a.rank == 1 else "") + ")"
        return self.bind(f"A.slice({a.name}, {code})", a.elt, len(lo), tuple(lo), tuple(hi))

    def s_reshape(self):
        a = self.pick()
        n = a.name
        if a.rank == 0:
            shape, lo, hi = self.src.choice([("(1,)", (1,), (1,)), ("(1, 1)", (1, 1), (1, 1))])
        elif a.rank == 1:
            shape, lo, hi = self.src.choice([(f"(1, {n}.shape[0])", (1, a.lo[0]), (1, a.hi[0])),
                                             (f"({n}.shape[0], 1)", (a.lo[0], 1), (a.hi[0], 1)),
                                             (f"({n}.shape[0],)", a.lo, a.hi)])
        else:
            (l0, l1), (h0, h1) = a.lo, a.hi
            opts = [(f"({n}.shape[1], {n}.shape[0])", (l1, l0), (h1, h0)),
                    (f"({n}.shape[0] * {n}.shape[1],)", (l0 * l1,), (h0 * h1,))]
            if h0 * h1 <= MAX_DIM:
                opts.append((f"(1, {n}.shape[0] * {n}.shape[1])", (1, l0 * l1), (1, h0 * h1)))
            shape, lo, hi = self.src.choice(opts)
            if "*" in shape and hi[-1] > MAX_DIM:
                shape, lo, hi = opts[0]
        self.feat("reshape")
        return self.bind(f"A.reshape({shape}, {n})", a.elt, len(lo), lo, hi)

    def s_transpose(self):
        a = self.pick(lambda x: x.rank == 2)
        if a is None:
            return None
        if self.src.flag(0.4) and np.prod(a.hi) <= MAX_DIM:
            self.feat("flatten")
            return self.bind(f"A.flatten({a.name})", a.elt, 1, (int(np.prod(a.lo)),),
                             (int(np.prod(a.hi)),))
        self.feat("transpose")
        return self.bind(f"A.transpose({a.name})", a.elt, 2, a.lo[::-1], a.hi[::-1])

    def top_condition(self) -> str:
        fl = [a for a in self.arrays if a.elt == F64]
        kind = self.src.weighted([(2, "exp"), (2 if fl else 0, "sum"),
                                  (1 if any(a.rank for a in self.arrays) else 0, "size")])
        if kind == "sum":
            a = self.src.recent(fl)
            return f"A.the(A.sum_all({a.name})) > {self.src.choice(['0.0', '1.0', '-1.0'])}"
        if kind == "size":
            a = self.src.recent([a for a in self.arrays if a.rank])
            return f"{a.name}.shape[0] > {self.src.int(0, 3)}"
        return self.top_exp(B, 2).code

    def s_acond(self):
        a = self.pick()
        c = self.top_condition()
        others = [x for x in self.arrays if x.elt == a.elt and x.rank == a.rank]
        if self.src.flag(0.5):
            b = self.src.recent(others)
            self.used.add(b.name)
            b_code, blo, bhi = b.name, b.lo, b.hi
        else:
            f = self.gen_fun(self.top, [a.elt], a.elt)
            b_code, blo, bhi = f"A.map({f}, {a.name})", a.lo, a.hi
        if self.src.flag(0.5):
            a_code, b_code = b_code, a.name
        else:
            a_code = a.name
        self.feat("acond")
        return self.bind(f"A.acond({c}, {a_code}, {b_code})", a.elt, a.rank,
                         tuple(map(min, a.lo, blo)), tuple(map(max, a.hi, bhi)))

    def s_awhile(self):
        x = self.pick()
        n = self.src.int(0, 3)
        ac, ab, k, s = self.fresh("ac"), self.fresh("ab"), self.fresh("k"), self.fresh("x")
        body = Block(2, self.top.vars)
        others = [o for o in self.arrays if o.rank == x.rank and o is not x]
        lo = x.lo
        if others and self.src.flag(0.3):
            o = self.src.recent(others)
            self.used.add(o.name)
            f = self.gen_fun(body, [x.elt, o.elt], x.elt)
            step = f"A.zip_with({f}, {s}, {o.name})"
            lo = tuple(map(min, x.lo, o.lo))
        else:
            f = self.gen_fun(body, [x.elt], x.elt)
            step = f"A.map({f}, {s})"
        self.top.emit(f"def {ac}(s):")
        self.top.emit(f"    return A.the(s[0]) < {n}")
        self.top.emit(f"def {ab}(s):")
        self.top.emit(f"    {k}, {s} = s")
        self.top.lines.extend(body.lines)
        self.top.emit(f"    return (A.map(lambda c: c + 1, {k}), {step})")
        self.feat("awhile")
        return self.bind(f"A.awhile({ac}, {ab}, (A.unit(0), {x.name}))[1]", x.elt, x.rank,
                         lo, x.hi)

    def s_scalar(self):
        """A scalar computed at the top level (``A.the``, ``a.shape[d]``, ``a[...]``)."""
        r0 = [a for a in self.arrays if a.rank == 0 and not is_pair(a.elt)]
        if r0 and self.src.flag(0.6):
            a = self.src.recent(r0)
            self.used.add(a.name)
            code, t = f"A.the({a.name})", a.elt
            self.feat("the")
        else:
            t = self.scalar_type()
            e = self.top_exp(t, depth=2)
            if e.const:  # a Python number: it would not behave as an Exp (s > s is a bool)
                return None
            code = e.code
        name = self.fresh("s")
        self.top.emit(f"{name} = {code}")
        self.top.vars.append((name, t))
        self.feat("top_scalar")
        return True

    #: (weight, statement generator), simplest first
    STATEMENTS = [
        (6, s_map), (4, s_zip_with), (3, s_generate), (4, s_fold), (3, s_scan),
        (2, s_backpermute), (2, s_permute), (1, s_replicate), (1, s_slice),
        (1, s_reshape), (1, s_transpose), (1, s_acond), (1, s_awhile), (1, s_unit),
        (1, s_fill), (1, s_scalar), (1, s_use), (1, s_iota),
    ]

    # -- programs

    def gen_inputs(self):
        n = self.src.int(1, 3)
        types, inputs = [], []
        seed = self.src.int(0, 2 ** 20)
        special = self.src.flag(0.15 if self.diff else 0.3)
        rng = np.random.default_rng(seed)
        for i in range(n):
            if self.diff:
                t = F64 if i == 0 else self.src.weighted([(4, F64), (1, I64), (1, I32)])
            else:
                t = self.src.weighted([(6, F64), (2, I64), (1, F32), (1, I32), (1, B)])
            rank = self.src.weighted([(3, 1), (2, 2), (1, 0)])
            shape = []
            for _ in range(rank):
                d = self.src.int(1, 6)
                if self.allow_empty and self.src.flag(0.07):
                    d = 0
                shape.append(d)
            shape = tuple(shape)
            if is_float(t):
                x = rng.uniform(-2.0, 2.0, shape)
                if special and x.size:
                    pool = [0.0, 1.0, -1.0, 0.5, 2.0, -0.5, -0.0]
                    if not self.diff and self.src.flag(0.25):
                        pool += [np.nan, np.inf, -np.inf]
                        self.feat("nan_inf_input")
                    mask = rng.random(shape) < 0.4
                    x = np.where(mask, rng.choice(pool, shape), x)
            elif is_int(t):
                x = rng.integers(-4, 6, shape)
            else:
                x = rng.random(shape) < 0.5
            x = np.asarray(x, dtype=NP_DTYPE[t])
            types.append((t, rank))
            inputs.append(x)
            self.arrays.append(Arr(f"a{i}", t, rank, shape, shape))
        self.count = n
        return tuple(types), tuple(inputs)

    def float_result(self, a: Arr) -> Arr:
        """``a`` converted to float64 elementwise (for a differentiable result)."""
        if a.elt == F64:
            return a
        x = self.fresh("x")
        if is_pair(a.elt):
            parts = [self._to_f64(f"{x}[{i}]", t) for i, t in enumerate(a.elt)]
            body = " + ".join(parts)
        else:
            body = self._to_f64(x, a.elt)
        return self.bind(f"A.map(lambda {x}: {body}, {a.name})", F64, a.rank, a.lo, a.hi)

    @staticmethod
    def _to_f64(code, t) -> str:
        if t == F64:
            return code
        if t == B:
            return f"A.cond({code}, 1.5, -0.5)"
        return f"A.to_float({code})"
