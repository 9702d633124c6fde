"""Pretty printing and whole-program type checking on hand-built ASTs."""

import numpy as np
import pytest

from accel.ast.nodes import (Acond, ALam, Alet, APrj, ATuple, Avar, Awhile, Backpermute, Cond,
                             Const, Fold, Generate, Index, Lam, Let, Map, Permute, PrimApp, Prj,
                             Program, Replicate, Reshape, Scan, Shape, Slice, Tuple, Unit, Use,
                             Var, While, ZipWith)
from accel.ast.pretty import show, show_program
from accel.ast.typecheck import check, typecheck
from accel.ast.types import ArrayT, ATupleT, TupleT, bool_, float32, float64, int32, int64
from accel.ast.types import shape_type as sht
from accel.errors import ProgramTypeError

F, N = float64, int64
V1, V2 = ArrayT(F, 1), ArrayT(F, 2)


def f64(v):
    return Const(v, F)


def i64(v):
    return Const(v, N)


def prim(op, *args):
    return PrimApp(op, args)


def add_lam(t=F):
    x, y = Var("x1", t), Var("x2", t)
    return Lam((x, y), prim("add", x, y))


def sq_lam():
    x = Var("x3", F)
    return Lam((x,), prim("mul", x, x))


# --------------------------------------------------------------------------- pretty


def test_show_map_fold_program():
    a1, a2 = Avar("a1", V1), Avar("a2", V1)
    p = Program((a1,), Alet(a2, Map(sq_lam(), a1), Fold(add_lam(), f64(0.0), a2)))
    assert show_program(p) == (
        "\\a1 :: Array1 float64 ->\n"
        "  let a2 = Map (\\x3 -> x3 * x3) a1\n"
        "  in Fold (\\x1 x2 -> x1 + x2) 0.0 a2")
    assert show(p) == show_program(p)


def test_show_generate_index_cond():
    a1 = Avar("a1", V1)
    i = Var("x4", sht(1))
    body = Cond(prim("lt", Prj(0, i), i64(3)), Index(a1, i),
                prim("neg", prim("sin", Index(a1, i))))
    g = Generate(Shape(a1), Lam((i,), body))
    assert show(g) == "Generate (shape a1) (\\x4 -> if x4.0 < 3 then a1 ! x4 else -sin (a1 ! x4))"


def test_show_expressions_and_constants():
    x, y = Var("x", F), Var("y", F)
    assert show(prim("mul", prim("add", x, y), prim("sub", x, prim("sub", y, x)))) == \
        "(x + y) * (x - (y - x))"
    assert show(prim("sub", prim("sub", x, y), x)) == "x - y - x"
    assert show(prim("pow", prim("neg", x), prim("pow", x, y))) == "(-x) ** x ** y"
    assert show(prim("max", x, f64(-1.0))) == "max x (-1.0)"
    assert show(Let(Var("z", F), prim("exp", x), Tuple((Var("z", F), x)))) == \
        "let z = exp x in (z, x)"
    assert [show(c) for c in (Const(2.5, float32), Const(3, int32), Const(3, N),
                              Const(True, bool_), f64(2.0))] == ["2.5f", "3i32", "3", "True",
                                                                "2.0"]
    assert show(Use(np.zeros((2, 3)))) == "Use <Array2 float64 shape (2, 3)>"


def test_show_slices_and_let_blocks():
    a1, a2, a3 = Avar("a1", V2), Avar("a2", ArrayT(F, 3)), Avar("a3", V1)
    body = Alet(a2, Replicate((None, i64(4), None), a1),
                Alet(a3, Slice(a1, (i64(0), None)), ATuple((a2, a3))))
    assert show_program(Program((a1,), body)) == (
        "\\a1 :: Array2 float64 ->\n"
        "  let a2 = Replicate (All, 4, All) a1\n"
        "      a3 = Slice a1 (0, All)\n"
        "  in (a2, a3)")


def test_show_long_expression_let_is_multiline():
    xs = [Var(f"long_variable_name_{i}", F) for i in range(6)]
    e = xs[-1]
    for v in reversed(xs[1:]):
        e = Let(v, prim("mul", xs[0], f64(2.0)), e)
    text = show(Lam((xs[0],), e))
    assert "\n" in text and text.splitlines()[1].strip().startswith("let ")
    assert text.splitlines()[-1].strip().startswith("in ")


def test_show_deep_let_chain_does_not_recurse():
    n = 5000
    vs = [Avar(f"a{i}", V1) for i in range(n)]
    body = vs[-1]
    for k in range(n - 1, 0, -1):
        body = Alet(vs[k], Map(sq_lam(), vs[k - 1]), body)
    text = show_program(Program((vs[0],), body))
    assert text.count("\n") == n
    assert typecheck(Program((vs[0],), body)) == V1


# --------------------------------------------------------------------------- typecheck: accept


def _everything_program():
    """One program using every node kind."""
    a1, a2 = Avar("a1", V1), Avar("a2", V2)
    b = [Avar(f"b{i}", t) for i, t in enumerate(
        [V1, ArrayT(F, 0), V2, ArrayT(F, 0), V1, V1, V1, V1, V1, V1, V1, V1, V2, ArrayT(F, 3),
         V1, V1, V1, ATupleT((V1, V2)), V1])]
    x, i, s = Var("x", F), Var("i", sht(1)), Var("s", TupleT((N, F)))
    n = Prj(0, Shape(a1))
    lets = [
        Use(np.arange(3.0)),
        Unit(Let(Var("t", F), f64(1.0), prim("add", Var("t", F), f64(2.0)))),
        Generate(Tuple((i64(2), i64(3))), Lam((Var("j", sht(2)),), Index(
            a2, Var("j", sht(2))))),
        Fold(add_lam(), f64(0.0), b[0]),
        Map(Lam((x,), prim("mul", x, Index(b[3], Tuple(())))), a1),
        ZipWith(add_lam(), b[4], a1),
        Fold(add_lam(), None, a2),
        Scan(add_lam(), f64(0.0), a1, True),
        Scan(add_lam(), None, a1, False),
        Permute(add_lam(), Generate(Tuple((n,)), Lam((i,), f64(0.0))),
                Lam((i,), Tuple((prim("gt", Index(a1, i), f64(0.0)), i))), a1),
        Backpermute(Shape(a1), Lam((i,), Tuple((prim("sub", prim("sub", n, Prj(0, i)),
                                                        i64(1)),))), a1),
        Reshape(Tuple((n,)), Reshape(Tuple((i64(1), n)), a1)),
        Replicate((i64(2), None), a1),
        Replicate((None, None, i64(2)), a2),
        Slice(a2, (None, i64(0))),
        Acond(prim("gt", n, i64(0)), a1, b[14]),
        Awhile(ALam(Avar("w", V1), Unit(prim("lt", Index(Avar("w", V1), Tuple((i64(0),))),
                                                 f64(10.0)))),
               ALam(Avar("w", V1), Map(Lam((x,), prim("add", x, f64(1.0))), Avar("w", V1))),
               a1),
        ATuple((a1, a2)),
        APrj(0, b[17]),
    ]
    loop = While(Lam((s,), prim("lt", Prj(0, s), i64(5))),
                 Lam((s,), Tuple((prim("add", Prj(0, s), i64(1)),
                                  prim("mul", Prj(1, s), f64(2.0))))),
                 Tuple((i64(0), x)))
    last = Map(Lam((x,), Cond(prim("gt", x, f64(0.0)), Prj(1, loop), prim("neg", x))), b[18])
    body = ATuple((last, b[1], b[5], b[6], b[16]))
    for var, bound in reversed(list(zip(b, lets))):
        body = Alet(var, bound, body)
    return Program((a1, a2), body)


def test_typecheck_accepts_every_node_kind():
    p = _everything_program()
    t = typecheck(p)
    assert t == p.type and isinstance(t, ATupleT) and t.items[0] == V1
    assert check(p) == t
    text = show_program(p)
    for word in ("Use <", "Unit", "Generate", "Fold (", "Fold1", "Scanl", "Scanr1", "Permute",
                 "Backpermute", "Reshape", "Replicate (2, All)", "Slice a2 (All, 0)", "Acond",
                 "Awhile", "while", "if ", "let t = 1.0 in", "b17.0", "a2 ! j", "shape a1"):
        assert word in text, word


def test_typecheck_bare_terms_and_env():
    a = Avar("a", V1)
    assert typecheck(Map(sq_lam(), a), env=(a,)) == V1
    assert typecheck(add_lam()) == F
    assert typecheck(prim("add", f64(1.0), f64(2.0))) == F


def test_shared_subtrees_are_checked_once_per_scope():
    a = Avar("a", V1)
    m = Map(sq_lam(), a)
    for _ in range(60):  # a DAG with 2**60 paths
        m = ZipWith(add_lam(), m, m)
    assert typecheck(Program((a,), m)) == V1


# --------------------------------------------------------------------------- typecheck: reject


def test_rejects_unbound_array_variable():
    a, b = Avar("a", V1), Avar("b", V1)
    with pytest.raises(ProgramTypeError, match="map: array variable b : Array1 float64 is "
                                               "not in scope"):
        typecheck(Program((a,), Map(sq_lam(), b)))


def test_rejects_unbound_expression_variable():
    a, x, y = Avar("a", V1), Var("x", F), Var("y", F)
    with pytest.raises(ProgramTypeError, match="variable y : float64 is not in scope"):
        typecheck(Program((a,), Map(Lam((x,), prim("add", x, y)), a)))


def test_rejects_variable_used_at_wrong_type():
    a = Avar("a", V1)
    x = Var("x", F)
    with pytest.raises(ProgramTypeError, match="variable x is used at type float32 but bound "
                                               "at type float64"):
        typecheck(Program((a,), Map(Lam((x,), Var("x", float32)), a)))
    with pytest.raises(ProgramTypeError, match="array variable a is used at type Array2"):
        typecheck(Program((a,), Avar("a", V2)))


def test_rejects_expression_variable_escaping_its_lambda():
    a, x = Avar("a", V1), Var("x", N)
    shape = Tuple((x,))
    escaped = Alet(Avar("m", ArrayT(N, 1)), Map(Lam((x,), x), Avar("a2", ArrayT(N, 1))),
                   Generate(shape, Lam((Var("i", sht(1)),), f64(0.0))))
    with pytest.raises(ProgramTypeError, match="generate: expression variable x : int64 is "
                                               "used outside the function"):
        typecheck(Program((a, Avar("a2", ArrayT(N, 1))), escaped))
    y = Var("y", F)
    inner = Fold(add_lam(), y, a)  # y is bound by the outer let below, not at array level
    with pytest.raises(ProgramTypeError, match="fold: expression variable y"):
        typecheck(Program((a,), Alet(Avar("u", ArrayT(F, 0)),
                                     Unit(Let(y, f64(1.0), y)), inner)))


def test_rejects_index_on_unbound_array():
    a, ghost = Avar("a", V1), Avar("ghost", V1)
    i = Var("i", sht(1))
    bad = Generate(Shape(a), Lam((i,), Index(ghost, i)))
    with pytest.raises(ProgramTypeError, match="index: array variable ghost : Array1 float64 "
                                               "is not in scope"):
        typecheck(Program((a,), bad))
    with pytest.raises(ProgramTypeError, match="shape: array variable ghost"):
        typecheck(Program((a,), Generate(Shape(ghost), Lam((i,), f64(0.0)))))


def test_rejects_awhile_state_outside_its_function():
    a, w = Avar("a", V1), Avar("w", V1)
    loop = Awhile(ALam(w, Unit(Const(False, bool_))), ALam(w, w), a)
    with pytest.raises(ProgramTypeError, match="array variable w"):
        typecheck(Program((a,), ATuple((loop, w))))


def test_rejects_nodes_in_the_wrong_position():
    a = Avar("a", V1)
    with pytest.raises(ProgramTypeError, match="unit: expected an expression, got Avar"):
        typecheck(Program((a,), Unit(a)))


def test_rejects_a_node_whose_local_rule_no_longer_holds():
    a = Avar("a", V1)
    m = Map(sq_lam(), a)
    object.__setattr__(m, "a", Avar("a", ArrayT(int64, 1)))  # corrupt it behind the checks
    with pytest.raises(ProgramTypeError, match="map"):
        typecheck(Program((Avar("a", ArrayT(int64, 1)),), m))
