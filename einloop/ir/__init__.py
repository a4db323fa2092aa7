"""The IR at the bottom of einloop: scalar dtypes, expression nodes (shared by tensor declarations
and the loop IR), loop-IR statements and buffers, one visitor/mutator per IR, the printer and the
structural key.  Everything else builds on it; it imports nothing of einloop but the errors."""
from . import dtypes
from .expr import (Expr, Const, Var, Binary, Compare, Logical, Not, Select, Cast, Call, TensorRead,
                   Reduce, Load, Buffer, Scope, const, as_expr, BinOp, CmpOp, LogicOp)
from .stmt import (Stmt, For, ForKind, Store, IfThenElse, Seq, Allocate, LetStmt, Prefetch,
                   ExternCall, IntrinsicCall, LoweredFunc, seq)
from .visit import (ExprVisitor, ExprMutator, StmtVisitor, StmtMutator, children, rebuild,
                    transform, substitute, walk, walk_stmt, free_vars, reads_of, map_stmt,
                    stmt_exprs, stmt_children, structural_key)
from .printer import expr_str, stmt_str, func_str

__all__ = ["dtypes", "Expr", "Const", "Var", "Binary", "Compare", "Logical", "Not", "Select",
           "Cast", "Call", "TensorRead", "Reduce", "Load", "Buffer", "Scope", "const", "as_expr",
           "BinOp", "CmpOp", "LogicOp",
           "Stmt", "For", "ForKind", "Store", "IfThenElse", "Seq", "Allocate", "LetStmt", "Prefetch",
           "ExternCall", "IntrinsicCall", "LoweredFunc", "seq", "ExprVisitor", "ExprMutator",
           "StmtVisitor", "StmtMutator",
           "children", "rebuild", "transform", "substitute", "walk", "walk_stmt", "free_vars",
           "reads_of", "map_stmt", "stmt_exprs", "stmt_children", "structural_key", "expr_str",
           "stmt_str", "func_str"]
