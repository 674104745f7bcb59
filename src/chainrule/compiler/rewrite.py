"""The copies of the user's functions that a trace runs.

An int argument that picks an entry of a list (``wte[token]``,
``probs[target]``) is replayed as a gather (:mod:`chainrule.compiler.symbolic`):
the trace needs the subscript to hand back a stand-in Value for "entry
``i`` of this list" instead of the entry. A list's own ``__getitem__``
cannot be asked for that, and the user's list is never touched (another
thread may be reading or training it). So the trace does not run the
user's function itself but a *copy* of it, compiled from its source, in
which

* every subscript that reads, ``a[b]``, is ``_subscript(a, b)``: a gather
  when ``b`` is an int argument and ``a`` a list of Values (or of rows of
  Values), else ``a[b]`` as written;
* every call ``f(...)`` is ``_call(f, ...)``: a function, a bound method
  or an object whose class defines ``__call__`` in Python runs as such a
  copy in turn (so ``gpt()``, ``linear()``, ``model(x)`` are followed),
  anything else (builtins, classes, C code) runs as it is, the traced
  floats it is handed guards where it may read them whole (:func:`opaque`).
  Calls of most builtins' names (``len``, ``max``) are left as written;
  those that read state, take an iterator or call a function they are
  given (``next``, ``open``, ``zip``, ``map``, ``sorted``) go through
  ``_call`` too (:data:`_ROUTED`);
* ``a % b`` is ``_op("%", a, b)`` (printf-style formatting reads a float
  whole: a guard) and the iterable of a ``for`` or a comprehension is
  ``_op("in", it)``.

A call whose result depends on state outside the graph (a random
generator, a clock, a file: :func:`~chainrule.compiler.escapes.hidden_state`),
or that takes items of an iterator made outside the trace (a data loader),
makes the trace one that cannot be replayed: the function runs eagerly,
with a warning naming the call (:func:`hidden`). The list is a deny-list:
such a call inside code that is not copied is not seen.

A copy is a new function object with the original's globals, closure
cells, defaults and keyword defaults; the user's function is not
modified. It is made once per code object, and only when the source is
the code that runs: the function's source (found in its file by its first
line) is compiled again *without* the changes, and its bytecode, names and
constants must be those of the function's ``__code__``; otherwise (no
source, a file edited since the import, ``super()``, a name mangled in a
class) the function runs as it is, and an int argument that reaches a
list subscript inside it holds the trace to its value (a pin).

Only traces run the copies: a replay does not run the function, and an
eager call runs the user's function itself.
"""

from __future__ import annotations

import ast
import builtins
import copy
import functools
import gc
import heapq
import inspect
import itertools
import linecache
import logging
import operator
import os
import random
import sys
import sysconfig
import threading
import time
import traceback
import warnings
from collections.abc import Callable
from types import (
    BuiltinFunctionType,
    CellType,
    CodeType,
    FrameType,
    FunctionType,
    GeneratorType,
    MethodDescriptorType,
    MethodType,
    MethodWrapperType,
    WrapperDescriptorType,
)
from typing import Any

from ..value.engine import Value
from .escapes import all_names, call_method, describe, hidden_state, safe
from .keys import Identity
from .reads import (
    AST_LOCK,
    COPY_CODES,
    PACKAGE_DIR,
    CachedCall,
    Record,
    TracedFloat,
    Whole,
    begin_reduction,
    cached_again,
    contains,
    current,
    flat_items,
    found_at,
    identity_asked,
    live,
    read_whole_by,
    reduced,
    search,
    searching,
    traced,
    user_site,
    winner_of,
)
from .symbolic import SymInt, gather
from .trace import (
    ON_BEHALF,
    StandIn,
    TraceValue,
    by_entry,
    identity,
    same_object,
    stands_in,
    type_of,
)

_SUBSCRIPT = "_chainrule_subscript_"
_CALL = "_chainrule_call_"
_OP = "_chainrule_op_"
_MAKER = "_chainrule_maker_"
_LINK = "_chainrule_link_"  # (and a number: an operand a chained comparison holds)

#: Builtins whose calls go through ``_call`` all the same: those that read
#: state (``next``, ``open``), call a function they are given (``map``,
#: ``sorted``) or take an iterator (``list(it)``); ``max``/``min`` only with
#: ``key=`` (without, they must be called from the user's frame: reads
#: follow them); ``type(x)`` says the user's class (:func:`~chainrule.compiler.trace.type_of`).
_ROUTED = frozenset(
    [
        "next",
        "iter",
        "anext",
        "aiter",
        "open",
        "input",
        "map",
        "filter",
        "sorted",
        "zip",
        "enumerate",
        "reversed",
        "pow",
        "list",
        "tuple",
        "set",
        "frozenset",
        "dict",
        "sum",
        "any",
        "all",
        "setattr",
        "delattr",
        "type",
        "hash",
    ]
)
#: Names whose calls are left as written: the other builtins (shadowed by
#: a user function, that function runs as it is: at worst a pin).
_BUILTIN_NAMES = frozenset(
    name for name in dir(builtins) if not name.startswith("_") and name not in _ROUTED
)

_HERE = os.path.dirname(os.path.abspath(__file__))
_PACKAGE = os.path.dirname(_HERE)
#: Code that is never copied: compile's own, the engines', the standard
#: library's and installed packages'.
_SKIP = tuple(
    {
        _HERE + os.sep,
        os.path.join(_PACKAGE, "value") + os.sep,
        os.path.join(_PACKAGE, "tensor") + os.sep,
        *(
            os.path.abspath(p) + os.sep
            for key in ("stdlib", "platstdlib", "purelib", "platlib")
            if (p := sysconfig.get_paths().get(key))
        ),
    }
)


#: The comparisons a copy asks :func:`_op` (identity, and ``in``: a list
#: finds a nan by identity only).
_ASKED: dict[type, str] = {ast.Is: "is", ast.IsNot: "is not", ast.In: "in?", ast.NotIn: "not in?"}


class _Rewrite(ast.NodeTransformer):
    """``a[b]`` (read) -> ``_subscript(a, b)``; ``f(...)`` -> ``_call(f, ...)``;
    ``a % b`` -> ``_op("%", a, b)``; ``for x in E`` -> ``for x in _op("in", E)``;
    ``a is b`` -> ``_op("is", a, b)`` (and ``is not``, ``in``, ``not in``);
    ``id(x)`` -> ``_op("id", x)``; a set display or comprehension ``S`` ->
    ``_op("hashed", S)``."""

    def __init__(self) -> None:
        self.links = 0  # the chained comparisons' operands held so far
        # inside a comprehension or a class body, where Python refuses a walrus
        # (a comprehension's iterable) or it would bind a name of the class: a
        # chain's operands are held by _op("hold")
        self.comprehensions = 0

    def _comprehension(self, node: ast.AST) -> ast.AST:
        self.comprehensions += 1
        try:
            return self.generic_visit(node)
        finally:
            self.comprehensions -= 1

    visit_ListComp = visit_DictComp = visit_GeneratorExp = _comprehension

    def visit_SetComp(self, node: ast.SetComp) -> ast.AST:
        out = self._comprehension(node)
        return ast.copy_location(_op_call("hashed", out), node)  # type: ignore[arg-type]

    visit_ClassDef = _comprehension  # (a walrus there binds a name in the class: held too)

    def visit_Compare(self, node: ast.Compare) -> ast.AST:
        """``a is b`` -> ``_op("is", a, b)``; a chain with an ``is`` link,
        ``a is b is not c``, -> ``_op("is", a, (t := b)) and _op("is not", t, c)``:
        each operand evaluated once, left to right, the first false link's
        value (or the last's) the result, as Python's chain."""
        self.generic_visit(node)
        if not any(type(op) in _ASKED for op in node.ops):
            return node
        links: list[ast.expr] = []
        left = node.left
        for k, (op, right) in enumerate(zip(node.ops, node.comparators)):
            held: ast.expr | None = None
            if k < len(node.ops) - 1:  # also the next link's left operand
                name = f"{_LINK}{self.links}"
                self.links += 1
                if self.comprehensions:
                    right = _op_call("hold", ast.Constant(name), right)
                    held = _op_call("held", ast.Constant(name))
                else:
                    right = ast.NamedExpr(ast.Name(name, ast.Store()), right)
                    held = ast.Name(name, ast.Load())
            if type(op) in _ASKED:
                link: ast.expr = _op_call(_ASKED[type(op)], left, right)
            else:
                link = ast.Compare(left, [op], [right])
            links.append(link)
            if held is not None:
                left = held
        out = links[0] if len(links) == 1 else ast.BoolOp(ast.And(), links)
        return ast.fix_missing_locations(ast.copy_location(out, node))

    def visit_Set(self, node: ast.Set) -> ast.AST:
        self.generic_visit(node)
        return ast.copy_location(_op_call("hashed", node), node)

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        self.generic_visit(node)
        if not isinstance(node.op, ast.Mod):
            return node
        return ast.copy_location(_op_call("%", node.left, node.right), node)

    def visit_For(self, node: ast.For) -> ast.AST:
        self.generic_visit(node)
        node.iter = ast.copy_location(_op_call("in", node.iter), node.iter)
        return node

    def visit_comprehension(self, node: ast.comprehension) -> ast.AST:
        self.generic_visit(node)
        if not node.is_async:
            node.iter = ast.copy_location(_op_call("in", node.iter), node.iter)
        return node

    def visit_Subscript(self, node: ast.Subscript) -> ast.AST:
        self.generic_visit(node)
        if not isinstance(node.ctx, ast.Load) or isinstance(node.slice, ast.Slice):
            return node
        call = ast.Call(ast.Name(_SUBSCRIPT, ast.Load()), [node.value, node.slice], [])
        return ast.copy_location(call, node)

    def _stores(self, node: Any) -> ast.AST:
        """``x.attr = ...``, ``+=``, ``: T =``, ``del``: see :func:`_watch_store`."""
        self.generic_visit(node)
        for target in getattr(node, "targets", None) or [node.target]:
            _watch_store(target)
        return node

    visit_Assign = visit_AugAssign = visit_AnnAssign = visit_Delete = _stores

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        if (
            isinstance(node.func, ast.Name)
            and node.func.id == "id"
            and len(node.args) == 1
            and not node.keywords
        ):
            return ast.copy_location(_op_call("id", node.args[0]), node)
        if (
            isinstance(node.func, ast.Name)
            and node.func.id == "float"
            and len(node.args) == 1
            and not isinstance(node.args[0], ast.Starred)
            and not node.keywords
        ):  # float(obj): a class's own __float__, followed (the name: float, or yours)
            return ast.copy_location(_op_call("float", node.func, node.args[0]), node)
        if isinstance(node.func, ast.Name) and (
            node.func.id in _BUILTIN_NAMES
            and not (node.func.id in ("max", "min") and node.keywords)
        ):
            if node.func.id in ("max", "min"):  # its result, a reduction's own float
                # (begun first: what a call that raised left at this frame is dropped)
                return ast.copy_location(_op_call("reduced", _op_call("begin"), node), node)
            return node
        call = ast.Call(ast.Name(_CALL, ast.Load()), [node.func, *node.args], node.keywords)
        return ast.copy_location(call, node)


def _watch_store(target: ast.expr) -> None:
    """``obj.attr = ...`` (``+=``, ``del``, in a tuple of targets) ->
    ``_op("store", obj).attr = ...``: a function's attribute written while
    it runs makes the trace one that cannot be replayed."""
    if isinstance(target, ast.Attribute):
        target.value = ast.copy_location(_op_call("store", target.value), target.value)
    elif isinstance(target, (ast.Tuple, ast.List)):
        for elt in target.elts:
            _watch_store(elt)
    elif isinstance(target, ast.Starred):
        _watch_store(target.value)


def _op_call(kind: str, *operands: ast.expr) -> ast.Call:
    return ast.Call(ast.Name(_OP, ast.Load()), [ast.Constant(kind), *operands], [])


#: code object -> (that code object, its copy's code or None: runs as it is)
_copies: dict[CodeType, tuple[CodeType, CodeType | None]] = {}
#: file name -> (its lines, first line -> the functions and lambdas that
#: start there, the module's own imports)
_files: dict[str, tuple[list[str], dict[int, list[ast.AST]], list[ast.stmt]]] = {}


def copied_code(code: CodeType) -> CodeType | None:
    """The code of the rewritten copy of a function whose code is ``code``,
    or None when it runs as it is (see the module)."""
    if code in _copy_codes:  # a function made while a copy runs (a nested def, a
        return code  # lambda): the copy's own code, already rewritten
    found = _copies.get(code)
    if found is not None and found[0] is code:  # (code objects compare by value)
        return found[1]
    with AST_LOCK:  # (see reads.AST_LOCK)
        found = _copies.get(code)
        if found is not None and found[0] is code:  # made by another thread meanwhile
            return found[1]
        start = time.perf_counter()
        try:
            new = _make(code)
        except (SyntaxError, ValueError, TypeError, RecursionError, MemoryError):
            new = None
        COPYING[0] += time.perf_counter() - start
        _copies[code] = (code, new)
        if new is not None:
            _copy_codes.update(_nested(new))
    return new


#: Seconds spent making copies so far, every thread's (each function's is
#: made once: a trace's estimate for the next trace leaves it out).
COPYING = [0.0]

#: The code objects of the copies and of what they nest (generator
#: expressions, comprehensions): a generator running one of them was made
#: by a trace (only traces run copies).
_copy_codes = COPY_CODES  # (reads: a max() there returns through reduced)


def _nested(code: CodeType) -> list[CodeType]:
    found = [code]
    for c in code.co_consts:
        if isinstance(c, CodeType):
            found.extend(_nested(c))
    return found


def _make(code: CodeType) -> CodeType | None:
    filename = code.co_filename
    # ("<cell 3>", "<ipython-input-...>": linecache may hold their source)
    if not filename or filename.startswith(_SKIP):
        return None
    if "super" in all_names(code) or "__class__" in code.co_freevars:
        return None
    return recompiled(code, _Rewrite, [_SUBSCRIPT, _CALL, _OP])


def recompiled(
    code: CodeType, change: Callable[[], ast.NodeTransformer], helpers: list[str]
) -> CodeType | None:
    """The code of ``code``'s function compiled again from its source,
    changed by a ``change()`` transformer, as the function of a maker whose
    parameters are ``helpers`` and ``code``'s free variables (each a free
    variable of the result, in its ``co_freevars`` order); None when the
    source, compiled unchanged, is not ``code`` (see the module)."""
    if {*helpers, _MAKER} & set(code.co_varnames + code.co_freevars + code.co_names):
        return None
    starts, imports = _file(code.co_filename)
    for node in starts.get(code.co_firstlineno, []):
        if _name_of(node) != code.co_name:
            continue
        plain = _compile(node, code, imports, None, helpers)
        if plain is None or not same_code(plain, code):
            continue
        return _compile(node, code, imports, change, helpers)
    return None


def _name_of(node: ast.AST) -> str:
    return "<lambda>" if isinstance(node, ast.Lambda) else getattr(node, "name", "")


def _file(filename: str) -> tuple[dict[int, list[ast.AST]], list[ast.stmt]]:
    """The functions and lambdas of a file by first line, and its
    module-level imports (Python compiles ``math.sqrt(x)`` differently
    when ``math`` is a module's import)."""
    linecache.checkcache(filename)  # (a file edited and reloaded: %autoreload)
    lines = linecache.getlines(filename)
    known = _files.get(filename)
    if known is None or known[0] is not lines:
        index: dict[int, list[ast.AST]] = {}
        imports: list[ast.stmt] = []
        try:
            tree: ast.Module | None = ast.parse("".join(lines), filename)
        except (SyntaxError, ValueError):
            tree = None
        for node in ast.walk(tree) if tree is not None else ():
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                index.setdefault(first, []).append(node)
            elif isinstance(node, ast.Lambda):
                index.setdefault(node.lineno, []).append(node)
        _module_imports(tree.body if tree is not None else [], imports)
        known = _files[filename] = (lines, index, imports)
    return known[1], known[2]


def _module_imports(body: list[ast.stmt], into: list[ast.stmt]) -> None:
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            into.append(node)
        elif not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            for field in ("body", "orelse", "finalbody", "handlers"):
                inner = getattr(node, field, None)
                if isinstance(inner, list):
                    _module_imports([x for x in inner if isinstance(x, ast.stmt)], into)
                    for h in inner:
                        if isinstance(h, ast.ExceptHandler):
                            _module_imports(h.body, into)


def _compile(
    node: ast.AST,
    code: CodeType,
    imports: list[ast.stmt],
    change: Callable[[], ast.NodeTransformer] | None,
    helpers: list[str],
) -> CodeType | None:
    """The code of ``node`` compiled alone, inside a function whose
    parameters are the helpers and ``code``'s free variables (so they stay
    free variables), changed or not."""
    rewrite = change is not None
    node = copy.deepcopy(node)
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        node.decorator_list = []
        body: list[ast.stmt] = [node]
        if node.name not in code.co_freevars:  # a function that names itself (f.calls)
            body.insert(0, ast.Global([node.name]))  # reads a global, as in its module
    else:
        body = [ast.Return(node)]  # type: ignore[arg-type]
    if change is not None:
        body = [change().visit(stmt) for stmt in body]
    params = [*helpers, *code.co_freevars]
    maker = ast.FunctionDef(
        name=_MAKER,
        args=ast.arguments(
            posonlyargs=[],
            args=[ast.arg(p) for p in params],
            vararg=None,
            kwonlyargs=[],
            kw_defaults=[],
            kwarg=None,
            defaults=[],
        ),
        body=body,
        decorator_list=[],
        returns=None,
    )
    ast.copy_location(maker, node)
    module = ast.fix_missing_locations(ast.Module(body=[*imports, maker], type_ignores=[]))
    flags = code.co_flags & _FUTURE_FLAGS
    top = compile(module, code.co_filename, "exec", flags=flags, dont_inherit=True)
    made = _const_code(top, _MAKER)
    made = None if made is None else _const_code(made, code.co_name)
    if made is None or not rewrite:
        return made
    shared: dict[tuple[type, str], Any] = {}
    for c in _nested(code):
        shared.update({_constant_key(x): x for x in c.co_consts if _shared(x)})
    return _with_constants(made, shared)


#: The types of constants whose objects the copy takes from the code it
#: copies: eagerly, equal literals of one module are one object
#: (``1e-8 is EPS`` for a global ``EPS = 1e-8``), where the copy, compiled
#: alone, would make its own.
_LITERALS = frozenset((float, int, complex, str, bytes, tuple, frozenset))


def _constant_key(x: Any) -> tuple[type, str]:
    return (type(x), repr(x))  # (repr: -0.0 is not 0.0, (1,) is not (True,))


def _shared(x: Any) -> bool:
    """Whether the constant ``x`` is taken from the code copied: a literal
    without a nan in it (two nans are never one constant, and their reprs
    are alike: ``1e999 - 1e999`` and ``-(1e999 - 1e999)``)."""
    return type(x) in _LITERALS and (type(x) in (str, bytes) or "nan" not in repr(x))


def _with_constants(code: CodeType, shared: dict[tuple[type, str], Any]) -> CodeType:
    """``code`` (and the code it nests) with each constant that ``shared``
    holds an equal of (by :func:`_constant_key`) replaced by that object."""
    consts = tuple(
        _with_constants(x, shared)
        if isinstance(x, CodeType)
        else shared.get(_constant_key(x), x)
        if _shared(x)
        else x
        for x in code.co_consts
    )
    return code.replace(co_consts=consts)


_FUTURE_FLAGS = 0
for _feature in ("annotations", "generator_stop", "barry_as_FLUFL"):
    _flag = getattr(__import__("__future__"), _feature, None)
    if _flag is not None:
        _FUTURE_FLAGS |= _flag.compiler_flag

_CO_NESTED = 0x10


def _const_code(code: CodeType, name: str) -> CodeType | None:
    for c in code.co_consts:
        if isinstance(c, CodeType) and c.co_name == name:
            return c
    return None


def same_code(a: CodeType, b: CodeType) -> bool:
    """The same bytecode, names, variables, flags and constants (nested code
    objects in turn; other constants by type and repr)."""
    if (
        a.co_code != b.co_code
        or a.co_names != b.co_names
        or a.co_varnames != b.co_varnames
        or a.co_freevars != b.co_freevars
        or a.co_cellvars != b.co_cellvars
        or a.co_argcount != b.co_argcount
        or a.co_posonlyargcount != b.co_posonlyargcount
        or a.co_kwonlyargcount != b.co_kwonlyargcount
        or (a.co_flags | _CO_NESTED) != (b.co_flags | _CO_NESTED)
        or len(a.co_consts) != len(b.co_consts)
    ):
        return False
    for x, y in zip(a.co_consts, b.co_consts):
        if isinstance(x, CodeType) and isinstance(y, CodeType):
            if not same_code(x, y):
                return False
        elif type(x) is not type(y) or repr(x) != repr(y):
            return False
    return True


# --------------------------------------------------------------------------
# What the copies call
# --------------------------------------------------------------------------


def copy_of(f: FunctionType) -> FunctionType:
    """The rewritten copy of ``f`` (a new function), or ``f`` itself."""
    new = copied_code(f.__code__)
    if new is None:
        return f
    cells = {_SUBSCRIPT: _subscript_cell, _CALL: _call_cell, _OP: _op_cell}
    if f.__closure__:
        cells.update(zip(f.__code__.co_freevars, f.__closure__))
    g = FunctionType(
        new, f.__globals__, f.__name__, f.__defaults__, tuple(cells[n] for n in new.co_freevars)
    )
    g.__kwdefaults__ = f.__kwdefaults__
    g.__qualname__ = f.__qualname__
    g.__module__ = f.__module__
    return g


def target(f: Any) -> Any:
    """What a copy calls for ``f``: the copy of a function, of a bound
    method's function, of a callable object's ``__call__``; else ``f``."""
    t = type(f)
    if t is FunctionType:
        return copy_of(f)
    if t is MethodType:
        func = f.__func__
        if type(func) is FunctionType:
            g = copy_of(func)
            return f if g is func else MethodType(g, f.__self__)
        return f
    if t is BuiltinFunctionType or isinstance(f, type):
        return f
    call = call_method(f)
    if type(call) is FunctionType:
        g = copy_of(call)
        return f if g is call else MethodType(g, f)
    return f


def _call(f: Any, /, *args: Any, **kwargs: Any) -> Any:
    """``f(*args, **kwargs)`` in a copy (C functions are called from this
    frame on the user's behalf: :class:`~chainrule.compiler.escapes.CCalls`
    sees them). A function the trace cannot see into (:func:`opaque`) gets
    the traced floats it is handed, and those made while it runs, as
    guards (:func:`~chainrule.compiler.reads.read_whole_by`). A call whose
    result depends on state outside the graph (:func:`hidden`) makes the
    trace one that cannot be replayed. A function handed to ``map``,
    ``sorted(key=)``, ``functools.reduce`` ... is called through ``_call``
    in turn."""
    t = type(f)
    if t is functools.partial:  # its function called as the copies call it
        return _call(f.func, *f.args, *args, **{**f.keywords, **kwargs})
    if f is _OPERATOR_CALL and args:  # operator.call(g, ...): g called as the copies call it
        return _call(args[0], *args[1:], **kwargs)
    if t is operator.methodcaller and len(args) == 1 and not kwargs:
        made, named = f.__reduce__()
        if made is operator.methodcaller:  # (one with keywords reduces to a partial)
            return _call(getattr(args[0], named[0]), *named[1:])
    if isinstance(f, type):
        made = _made_by_copies(f)
        if made is not None:
            return _construct(f, *made, args, kwargs)
    inner = _inlined(f)
    if inner is not None:
        return _call(inner, *args, **kwargs)
    func = f.__func__ if t is MethodType else f  # (a logger's method: its function)
    if (type(func) is BuiltinFunctionType or type(func) is FunctionType) and func in _STACK_CALLS:
        out = _stack_call(f, args, kwargs)
        if out is not _NOT_MINE:
            record = current()  # (what it finds there a replay would not: eagerly from now on)
            why = None if record is None else hidden(f, args, kwargs, record)
            if f in _NAMESPACE_CALLS:
                why = f"reads its namespace ({f.__name__} called by another name)"
            if record is not None and f is warnings.warn:
                record.problems.append(f"{user_site()}: {WARNS}")
            elif record is not None and why is not None:
                record.problems.append(f"{user_site()}: {why}; a replay would reuse it")
            return out
    record = current()
    if record is None:
        g = target(f)
        return read_whole_by(f, args, kwargs) if g is f and opaque(f) else g(*args, **kwargs)
    if (f is builtins.setattr or f is builtins.delattr) and args and _is_function(args[0]):
        record.problems.append(f"{user_site()}: {FUNCTION_ATTRIBUTE}")
    if f is builtins.hash or (t is MethodWrapperType and f.__name__ == "__hash__"):
        identity_asked(*args, getattr(f, "__self__", None))  # (a Value's hash is its id)
    if (t is BuiltinFunctionType or t is WrapperDescriptorType) and f in BY_IDENTITY:
        return by_entry(f, args, 2) if not kwargs else f(*args, **kwargs)  # the entries'
    if f is builtins.type and len(args) == 1 and not kwargs:
        return type_of(args[0])  # a node made while tracing: Value, as eagerly
    why = hidden(f, args, kwargs, record)
    if why is None:
        method = _cache_method(f, args)
        if method == "cache_info":
            why = "reads a functools cache's counters (cache_info()), which change at every call"
        elif method == "cache_clear":
            why = "clears a functools cache (cache_clear()), which a replay would not do"
    if why is not None:
        record.problems.append(f"{user_site(package=True)}: {why}; a replay would not call it")
    if f is builtins.iter and len(args) == 2 and not kwargs:  # iter(clock, None): called back
        args = (_relay(args[0]), args[1])
    slots = _callbacks(f)
    if slots is not None:  # map(math.exp, xs): math.exp is called through _call
        positions, names = slots
        args = tuple(_relay(a) if k in positions else a for k, a in enumerate(args))
        kwargs = {k: _relay(a) if k in names else a for k, a in kwargs.items()}
        out = f(*args, **kwargs)
    elif f is builtins.pow and len(args) + len(kwargs) > 2:  # pow(i, 2, 5): ints whole
        out = read_whole_by(f, args, kwargs)
    elif _cache_of(f) is not None:
        out = _cached_call(f, args, kwargs, record)
    else:
        g = target(f)
        if g is f and searching(f, args, kwargs):
            out = search(f, args)  # (a nan is found by identity only)
        elif g is f and _hashes_a_nan(f, args, kwargs):
            out = read_whole_by(f, args, kwargs)  # (the objects: a set finds a nan by identity)
        else:
            out = read_whole_by(f, args, kwargs) if g is f and opaque(f) else g(*args, **kwargs)
    if type(out) is set or type(out) is frozenset:
        _hashed(out)
    _filled(f, args)
    if (
        f is builtins.sum
        and type(out) is TracedFloat
        and any(out is x for x in (*args[1:], *kwargs.values()))
    ):
        # sum([], x): eagerly a new float (a traced float's sum hands back x itself)
        out = traced(float.__float__(out), out.recipe)
    if _iterator_types.get(type(out), True) and hasattr(type(out), "__next__"):
        record.iterators.add(Identity(out))  # an iterator made here: the trace's own
    elif f is itertools.tee:  # (the iterators it makes)
        record.iterators.update(map(Identity, out))
    return out


#: ``operator.call`` (Python 3.11 on).
_OPERATOR_CALL = getattr(operator, "call", None)


def _cache_method(f: Any, args: tuple[Any, ...]) -> str | None:
    """The functools cache's method that calling ``f(*args)`` calls
    (``table.cache_info()``, ``type(table).cache_info(table)``,
    ``operator.methodcaller("cache_clear")(table)``), or None."""
    if type(f) is operator.methodcaller:
        named = f.__reduce__()[1][0]
    elif type(getattr(f, "__self__", None)) is _LRU_WRAPPER:
        return str(getattr(f, "__name__", ""))
    elif getattr(f, "__objclass__", None) is _LRU_WRAPPER:
        named = getattr(f, "__name__", "")
    else:
        return None
    return named if args and type(args[0]) is _LRU_WRAPPER else None


def _filled(f: Any, args: tuple[Any, ...]) -> None:
    """A set's method called (``s.add(p)``, ``s.update(ps)``, ``set.add(s, p)``,
    ``s.pop()``): the set, filled in place, iterates in its members' hash
    order, asked of them as a set display's (:func:`_hashed`)."""
    t = type(f)
    if t is BuiltinFunctionType:
        held = f.__self__
    elif t is MethodDescriptorType and args:
        held = args[0]
    else:
        return
    if isinstance(held, (set, frozenset)):
        _hashed(held)


def _keyed_by_value(x: Any) -> bool:
    """Whether ``x`` is an object a call's key holds by value only: a
    string, bytes, a NumPy scalar or array (among the arguments, two equal
    ones make one key, so ``id(x)`` asks what a replay cannot tell)."""
    t = type(x)
    if t is str or t is bytes:
        return True
    numpy = sys.modules.get("numpy")
    return numpy is not None and isinstance(x, (numpy.generic, numpy.ndarray))


def _hashed(members: Any) -> None:
    """A set made while tracing: the order it iterates in is its members'
    hashes, a Value's its identity (which a Value argument then holds)."""
    identity_asked(*[x for x in members if isinstance(x, Value)])


def _inlined(f: Any) -> Any:
    """The function a compiled function (``chainrule.compile`` without an
    optimizer: its class's ``_chainrule_inlined``) runs, bound as ``f`` is:
    called while another one traces, it is part of that trace, as its own
    ``__call__`` makes it (its copy followed as any helper's); None for
    anything else."""
    bound = None
    if type(f) is MethodType:
        bound, f = f.__self__, f.__func__
    inlined = getattr(type(f), "_chainrule_inlined", None)
    fn = None if inlined is None else inlined(f)
    return fn if fn is None or bound is None else MethodType(fn, bound)


#: C functions that tell objects apart by identity: called from a copy
#: (directly, or handed to ``map``, ``sorted(key=)``, a ``functools.partial``),
#: a pick ``W[i]`` among their arguments is the entry it picks
#: (:func:`~chainrule.compiler.trace.by_entry`; the function then runs eagerly).
BY_IDENTITY = frozenset(
    (builtins.id, operator.is_, operator.is_not)
    + (object.__hash__, object.__repr__, object.__eq__, object.__ne__)
    + (gc.get_referrers, gc.get_referents)
)


def _made_by_copies(cls: type) -> tuple[Any, Any] | None:
    """The ``__new__`` and ``__init__`` a call of the class ``cls`` runs, when
    ``type.__call__`` runs it (no metaclass ``__call__``) and at least one of
    them is a Python function with a copy (its random draws, calls and
    picks are then seen); else None: the class runs as it is."""
    if call_method(cls) is not _TYPE_CALL:
        return None
    new, init = cls.__new__, cls.__init__  # type: ignore[misc]
    plain_new = new is object.__new__
    if not (plain_new or type(new) is FunctionType):
        return None  # a C base's (list, Exception): runs as it is
    if not (init is object.__init__ or type(init) is FunctionType):
        return None
    if plain_new and init is object.__init__:
        return None
    if (plain_new or copied_code(new.__code__) is None) and (
        type(init) is not FunctionType or copied_code(init.__code__) is None
    ):
        return None  # nothing to follow
    return new, init


_TYPE_CALL = vars(type)["__call__"]


def _construct(cls: type, new: Any, init: Any, args: Any, kwargs: Any) -> Any:
    """``cls(*args, **kwargs)`` as ``type.__call__`` runs it, its ``__new__``
    and ``__init__`` called through :func:`_call` (their copies)."""
    obj = object.__new__(cls) if new is object.__new__ else _call(new, cls, *args, **kwargs)
    made = type(obj)
    if not issubclass(made, cls):
        return obj  # (type.__call__ calls no __init__)
    if made is not cls:
        init = made.__init__
    if init is not object.__init__:
        out = _call(init, obj, *args, **kwargs)
        if out is not None:
            raise TypeError(f"__init__() should return None, not '{type(out).__name__}'")
    return obj


def _own_float(x: Any) -> Any:
    """The ``__float__`` of ``x``'s class where it is code of the user's
    (a wrapper holding a Value: ``float(temp)`` returns ``self.v.data``),
    else None."""
    t = type(x)
    if t is float or t is int or t is bool or isinstance(x, float):
        return None
    own = getattr(t, "__float__", None)
    return own if type(own) is FunctionType else None


def _cache_of(f: Any) -> Any:
    """The ``functools.lru_cache``/``cache`` wrapper that ``f`` is (or a
    method of), or None."""
    if type(f) is MethodType:
        f = f.__func__
    return f if type(f) is _LRU_WRAPPER else None


_LRU_WRAPPER = functools._lru_cache_wrapper


def _cached_call(f: Any, args: Any, kwargs: Any, record: Record) -> Any:
    """A call of a ``functools`` cache while tracing (C code: the floats it
    hashes are guards). An entry it adds that holds nodes made by the trace
    (its result, or its arguments as the key) outlives the call: eagerly a
    later call gets those nodes back as they were made (their ``.data``, and
    ``backward()`` through them), where a replay would recompute them. A
    replay reuses what it returned while the cache gives it again: the
    guard calls the cache before every replay, as eagerly (each call once,
    by its arguments: :func:`~chainrule.compiler.reads.cached_again`), so a
    cache cleared or an entry evicted and recomputed to another number
    traces again."""
    cache = _cache_of(f)
    misses = cache.cache_info().misses
    out = read_whole_by(f, args, kwargs)
    missed = cache.cache_info().misses - misses
    if _keeps(cache):
        # a replay reuses `out` while the cache gives it (cached_again): a cache
        # cleared between calls (cache_clear()) recomputes eagerly, and traces again
        whole = Whole()
        plain = tuple(map(whole.numbers, args))
        named = {k: whole.numbers(x) for k, x in kwargs.items()}
        key = (f, plain, tuple(map(type, plain)), tuple(named.items()))
        if key not in record.cache_calls:
            record.cache_calls[key] = None
            cached = CachedCall(f, plain, named, out)
            record.guards.append((cached_again, cached, None, True))
            if cached.contents is not None and not cached.contents.complete:
                record.problems.append(
                    f"{user_site()}: a functools cache's result, which a replay would reuse, "
                    f"cannot be checked ({cached.contents.why})"
                )
        if any(isinstance(x, Value) for x in (*plain, *named.values())):
            record.problems.append(
                f"{user_site()}: calls a functools cache with a Value, a key by identity; a "
                "replay would call it with the traced one"
            )
    if missed and _keeps(cache):
        record.cache_misses[id(cache)] = record.cache_misses.get(id(cache), 0) + missed
        made = [
            x
            for x in flat_items((args, kwargs, out), float("inf")) or ()
            if type(x) is TraceValue or type(x) is StandIn
        ]
        if made:
            record.problems.append(f"{user_site()}: {CACHED_NODES % describe(f)}")
            record.cached.extend(made)
    return out


def caches_in(objects: Any) -> dict[int, tuple[Any, int]]:
    """The ``functools`` caches among ``objects`` (a snapshot of what the
    function reads: :mod:`~chainrule.compiler.sources`), by id, with their
    misses so far."""
    return {
        id(x): (x, x.cache_info().misses) for x in objects if type(x) is _LRU_WRAPPER and _keeps(x)
    }


def _keeps(cache: Any) -> bool:
    """Whether a miss of ``cache`` adds an entry (``lru_cache(maxsize=0)``
    keeps none: a plain wrapper)."""
    return bool(cache.cache_info().maxsize != 0)


def unseen_miss(caches: dict[int, tuple[Any, int]], record: Record) -> str | None:
    """Why a trace runs eagerly when one of ``caches`` (:func:`caches_in`
    before it) added an entry that no call the trace saw added (a call from
    code compile runs as it is: the entry may hold the trace's nodes), or None."""
    for key, (cache, misses) in caches.items():
        if cache.cache_info().misses - misses > record.cache_misses.get(key, 0):
            return (
                f"{describe(cache)}, a functools.lru_cache/cache function, is called from code "
                "compile runs as it is (no source to copy): the entry it adds may keep Values "
                "made inside the function, which later calls would get back as they were "
                "made, where a replay would recompute them"
            )
    return None


#: Why a function whose trace puts its nodes in a functools cache runs eagerly.
CACHED_NODES = (
    "calls %s, a functools.lru_cache/cache function, which keeps Values made inside the "
    "function: eagerly later calls reuse those nodes as they were made, where a replay "
    "would recompute them; cache numbers (or parameters), not computed Values"
)


def _relay(fn: Any) -> Any:
    """``fn`` called through :func:`_call` (a function handed to ``map``)."""
    if fn is None or not callable(fn):
        return fn

    def relay(*args: Any, **kwargs: Any) -> Any:
        return _call(fn, *args, **kwargs)

    return relay


#: Functions that call a function they are given: the positions and
#: keywords where it is handed to them.
_CALLBACKS: dict[Any, tuple[frozenset[int], frozenset[str]]] = {
    **dict.fromkeys(
        (map, filter, itertools.starmap, functools.reduce, itertools.filterfalse)
        + (itertools.takewhile, itertools.dropwhile),
        (frozenset((0,)), frozenset()),
    ),
    **dict.fromkeys(
        (sorted, builtins.max, builtins.min, itertools.groupby, heapq.nlargest, heapq.nsmallest),
        (frozenset(), frozenset(("key",))),
    ),
    itertools.accumulate: (frozenset((1,)), frozenset(("func",))),
}


def _callbacks(f: Any) -> tuple[frozenset[int], frozenset[str]] | None:
    if type(f) is BuiltinFunctionType and type(f.__self__) is list and f.__name__ == "sort":
        return frozenset(), frozenset(("key",))
    if type(f) is BuiltinFunctionType or isinstance(f, type):
        try:
            return _CALLBACKS.get(f)
        except TypeError:  # unhashable
            return None
    return None


def hands_on(f: Any) -> bool:
    """Whether ``f`` only compares the items it is given and hands them to
    the functions it is given (``functools.reduce``, ``sorted``,
    ``list.sort``): called by :func:`_call`, those functions are called
    through it in turn, so ``f`` itself reads no float whole; and
    ``object.__new__``, which :func:`_construct` calls for a class."""
    return f is _OBJECT_NEW or _callbacks(f) is not None


_OBJECT_NEW = object.__new__


def _user_frame(depth: int) -> FrameType:
    """The frame ``depth`` calls above the copy that called :func:`_call`,
    counting the user's frames only (compile's own between them left out),
    as ``sys._getframe(depth)`` called there eagerly gives."""
    frame: FrameType | None = sys._getframe(3)  # (_user_frame, _stack_call, _call)
    while True:
        while frame is not None and frame.f_code.co_filename.startswith(_HERE + os.sep):
            frame = frame.f_back
        if frame is None:
            raise ValueError("call stack is not deep enough")
        if depth == 0:
            return frame
        depth, frame = depth - 1, frame.f_back


_NOT_MINE = object()


def _stack_call(f: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """A function that reads its caller's frame, called from a copy by
    another name than its own (``sys._getframe(d)``,
    ``inspect.currentframe()``, ``inspect.stack()``,
    ``traceback.extract_stack()``, ``G = globals; G()``, ``builtins.eval(s)``,
    ``warnings.warn``), as eagerly: the user's frames, not compile's
    (``_NOT_MINE`` for other arguments: the call as it is)."""
    n = len(args) + len(kwargs)
    if f is sys._getframe and not kwargs and n <= 1:
        return _user_frame(args[0] if args else 0)
    if f is inspect.currentframe and n == 0:
        return _user_frame(0)
    if f is inspect.stack and n <= 1:
        return [i for i in f(*args, **kwargs) if not i.filename.startswith(_HERE + os.sep)]
    if f is traceback.extract_stack and n == 0:
        return traceback.StackSummary.from_list(
            [s for s in f() if not s.filename.startswith(_HERE + os.sep)]
        )
    if f is builtins.globals and n == 0:
        return _user_frame(0).f_globals
    if (f is builtins.locals or f is builtins.vars) and n == 0:
        return _user_frame(0).f_locals
    if f is builtins.dir and n == 0:
        return sorted(_user_frame(0).f_locals)
    if (f is builtins.eval or f is builtins.exec) and len(args) == 1 and not kwargs:
        frame = _user_frame(0)
        return f(args[0], frame.f_globals, frame.f_locals)
    if f is warnings.warn and "skip_file_prefixes" not in kwargs and len(args) <= 4:
        named = dict(zip(("message", "category", "stacklevel", "source"), args), **kwargs)
        level = _raw_level(named.pop("stacklevel", 1))
        warn: Any = f
        warn(**named, stacklevel=level)
        return None
    if getattr(f, "__func__", f) in _LOG_CALLS:  # (read_whole_by calls it: one frame more)
        level = _raw_level(kwargs.get("stacklevel", 1)) + 1
        return read_whole_by(f, args, {**kwargs, "stacklevel": level})
    return _NOT_MINE


def _raw_level(level: Any) -> Any:
    """The ``stacklevel`` that, passed by the caller of this function
    (:func:`_stack_call`) to ``warnings.warn`` or a logger, names the user's
    frame that ``level`` names in the user's code (compile's frames
    between counted)."""
    if not isinstance(level, int):
        return level  # (as eagerly: warn or the logger says what is wrong with it)
    target = _user_frame(max(operator.index(level), 1) - 1)  # (an int argument: pinned)
    raw: FrameType | None = sys._getframe(1)
    depth = 1  # (the caller's frame: level 1, as warn and a logger count)
    while raw is not None and raw is not target:
        raw, depth = raw.f_back, depth + 1
    return depth


#: Why a function that calls ``warnings.warn`` runs eagerly.
WARNS = (
    "warns (warnings.warn): a replay would not warn again, and under a filter set to "
    '"error" the warning is an exception'
)

#: Functions that read their caller's namespace: called by another name
#: (``G = globals``, ``builtins.eval``), the code does not name them, and the
#: function runs eagerly.
_NAMESPACE_CALLS = frozenset(
    (builtins.globals, builtins.locals, builtins.vars, builtins.dir, builtins.eval, builtins.exec)
)
#: The logging calls that name their caller's line in a record (a logger's
#: methods, the module's functions, a LoggerAdapter's).
_LOG_CALLS = frozenset(
    getattr(owner, name)
    for owner in (logging, logging.Logger, logging.LoggerAdapter)
    for name in ("debug", "info", "warning", "warn", "error", "exception", "critical", "fatal")
    + ("log",)
    if hasattr(owner, name)
)
_STACK_CALLS = frozenset((sys._getframe, inspect.currentframe, inspect.stack))
_STACK_CALLS |= {traceback.extract_stack, warnings.warn} | _NAMESPACE_CALLS | _LOG_CALLS

#: Modules whose deny-listed functions read the call stack (escapes.hidden_state).
_STACK_MODULES = frozenset(("inspect", "traceback"))


def hidden(f: Any, args: Any, kwargs: Any, record: Record) -> str | None:
    """Why a call of ``f`` gives a result a replay cannot give again: a
    function of the deny-list (:func:`~chainrule.compiler.escapes.hidden_state`),
    the next item of an iterator made outside the trace, or such an
    iterator handed to the call; else None."""
    if hidden_state(f):
        name = describe(f)
        if getattr(f, "__self__", None) is getattr(random, "_inst", None):  # random.random
            name = f"random.{f.__name__}"
        if getattr(f, "__module__", None) in _STACK_MODULES or name.startswith("sys."):
            return f"inspects the call stack ({name}), where a trace runs compile's own frames"
        return f"calls {name}, whose result or effect changes from call to call"
    if (f is builtins.next and args and _outside(args[0], record)) or (
        type(f) is not FunctionType
        and getattr(f, "__name__", None) in ("__next__", "send", "throw")
        and _outside(getattr(f, "__self__", None), record)
    ):
        return "takes the next item of an iterator made outside the function"
    for x in (*args, *kwargs.values()):
        if _outside(x, record):
            return (
                f"hands {describe(f)} an iterator made outside the function "
                "(a data loader, a counter), which it may advance"
            )
    return None


def _outside(x: Any, record: Record) -> bool:
    """Whether ``x`` is an iterator (it has state: each item is taken once)
    not made while this trace runs."""
    t = type(x)
    stateful = _iterator_types.get(t)
    if stateful is None:
        stateful = _iterator_types[t] = hasattr(t, "__next__")
    if not stateful:
        return False
    code = getattr(x, "gi_code", None)
    if code is not None and t is GeneratorType:
        return code not in _copy_codes
    return Identity(x) not in record.iterators


def _own_contains(b: Any) -> Any:
    """The ``__contains__`` that ``x in b`` calls, bound, where its class
    defines it in Python (a function, a staticmethod's or classmethod's);
    else None."""
    raw = inspect.getattr_static(type(b), "__contains__", None)
    func = getattr(raw, "__func__", raw)
    if type(func) is not FunctionType:
        return None
    return raw.__get__(b, type(b))


#: A chain's operands held in comprehensions (``_op("hold")``), per thread.
_HELD = threading.local()

#: type -> whether it is an iterator's (it has ``__next__``)
_iterator_types: dict[type, bool] = {}


def _op(kind: str, a: Any = None, b: Any = None) -> Any:
    """``a % b`` (``kind`` "%"), the iterable of a ``for`` (``kind`` "in"),
    ``a is b``, ``a is not b``, ``id(a)`` in a copy: printf-style formatting
    reads a float whole (a guard); a loop over an iterator made outside the
    trace makes it one that cannot be replayed; identity asks about an entry
    picked by an int argument, not its stand-in (the function then runs
    eagerly: :func:`~chainrule.compiler.trace.same_object`), and about the
    float object a traced float stands for (:func:`~chainrule.compiler.reads.identical`)."""
    if kind in ("is", "is not", "id"):  # (a max()/min() result: the winner it stands for)
        a, b = winner_of(a), winner_of(b)
    if kind == "is":
        return same_object(a, b, 2)
    if kind == "is not":
        return not same_object(a, b, 2)
    if kind == "id":
        if stands_in(a) or live(a) or type(a) is SymInt:
            return identity(a, 2)
        identity_asked(a)
        record = current()
        if record is not None and _keyed_by_value(a):
            record.problems.append(
                f"{user_site()}: asks the identity (id) of a {type(a).__name__}, which the "
                "trace's key compares by value (two equal ones are one key)"
            )
        return id(a)
    if kind == "float":  # float(b), a: the name float's value (the builtin, or yours)
        own = _own_float(b) if a is builtins.float else None
        if own is not None:  # a class of yours: its __float__, followed (a read float)
            out = _call(own, b)
            if isinstance(out, float):  # (as eagerly: float(obj) is what it returns)
                return out
        return a(b)
    if kind == "in?" or kind == "not in?":  # a in b (a float: by the objects it stands for)
        contains_of = _own_contains(b)  # (a class's own, in Python: its copy)
        found = bool(_call(contains_of, a)) if contains_of is not None else contains(b, a)
        return found if kind == "in?" else not found
    if kind == "hashed":  # a set made: its order is its members' hashes (a Value's: its id)
        _hashed(a)
        return a
    if kind == "hold":  # a chain's operand, in a comprehension: held for the next link
        held = _HELD.__dict__.setdefault("by_frame", {})
        if len(held) > 1024:  # (links a false one before cut short: never read)
            held.clear()
        held[(id(sys._getframe(1)), a)] = b
        return b
    if kind == "held":
        return _HELD.by_frame.pop((id(sys._getframe(1)), a))
    if kind == "begin":  # a max()/min() of a copy starts: the frame's own left behind dropped
        begin_reduction(sys._getframe(1))
        return None
    if kind == "reduced":  # (a: begin's None)
        return reduced(b)
    record = current()
    if kind == "store":  # obj.attr = ... : obj
        if record is not None and _is_function(a) and not _named_by_us(a):
            record.problems.append(f"{user_site()}: {FUNCTION_ATTRIBUTE}")
        return a
    if kind == "in":
        if record is not None and _outside(a, record):
            record.problems.append(
                f"{user_site()}: iterates over an iterator made outside the function (a data "
                "loader, a counter); a replay would reuse its traced items"
            )
        return a
    t = type(a)
    if record is not None and (t is str or t is bytes or t is bytearray):
        if type(b) is tuple:  # '%.*f' % (i, x): C takes an int argument itself (pinned)
            b = tuple(int(x) if type(x) is SymInt else x for x in b)
        return read_whole_by(operator.mod, (a, b), {})
    return a % b


#: Why a function that writes an attribute of a function runs eagerly.
FUNCTION_ATTRIBUTE = (
    "changes an attribute of a function while it runs (a counter kept as f.calls?); "
    "a replay would not change it again"
)


def _named_by_us(f: Any) -> bool:
    """A function of chainrule's own (``chainrule.grad(f)``'s wrapper, made
    inside ``fn``), whose name and doc it sets as it makes it: not state."""
    code = getattr(f, "__code__", None)
    return code is not None and code.co_filename.startswith(PACKAGE_DIR)


def _is_function(x: Any) -> bool:
    """A function, a bound method or a compiled function (``f.calls += 1``)."""
    t = type(x)
    return (
        t is FunctionType
        or t is MethodType
        or (t.__name__ == "Compiled" and t.__module__ == "chainrule.compiler")
    )


#: Types whose constructors reach a number only through its methods (or
#: not at all): ``float(x)`` calls ``x.__float__``, a guard.
_PLAIN_TYPES = frozenset(
    (float, int, bool, str, list, tuple, dict, set, frozenset, range, enumerate, zip, map)
    + (filter, reversed, slice, object, type, property, staticmethod, classmethod, iter)
)


def opaque(f: Any) -> bool:
    """Whether a call of ``f`` runs code the trace cannot follow that may
    read a float whole: a C function not known to use only the float's
    methods (``math.exp``, ``struct.pack``, ``np.float64``), or Python code
    that runs without a copy (the standard library's, an installed
    package's, code without source, a class's ``__init__``); never
    chainrule's own."""
    if type(f) is MethodType:
        f = f.__func__
    if type(f) is FunctionType:
        return not f.__code__.co_filename.startswith(_PACKAGE + os.sep)
    if isinstance(f, type):
        return f not in _PLAIN_TYPES and not f.__module__.startswith("chainrule.")
    if type(f) is BuiltinFunctionType:
        return not safe(f)
    return True  # a callable object without a copy of its __call__


def _subscript(container: Any, key: Any) -> Any:
    """``container[key]`` in a copy: a gather's stand-in where ``key`` is an
    int argument and ``container`` a list (see :mod:`chainrule.compiler.symbolic`);
    a nan key, the object it stands for (a dict finds a nan by identity)."""
    if type(container) is list and type(key) is SymInt:
        return gather(container, key)
    if type(key) is TracedFloat and float.__ne__(key, key):
        return read_whole_by(operator.getitem, (container, key), {})
    return container[key]


#: Where a nan is looked up by identity only: sets and dicts made, or asked.
_HASHED = (set, frozenset, dict)


def _hashes_a_nan(f: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether ``f`` makes or asks a set or dict (``set(xs)``,
    ``table.get(x)``, ``dict.fromkeys(xs)``) with a nan among its arguments."""
    owner = getattr(f, "__self__", None)
    if not any(f is t or owner is t or type(owner) is t for t in _HASHED):
        return False
    items = flat_items((args, kwargs))
    return items is None or any(isinstance(x, float) and float.__ne__(x, x) for x in items)


_subscript_cell = CellType(_subscript)
_call_cell = CellType(_call)
_op_cell = CellType(_op)


def call(fn: Any, *args: Any) -> Any:
    """``fn(*args)`` as a trace runs it: its copy (as :func:`_call`)."""
    return _call(fn, *args)


#: The code of :func:`_call` and :func:`call`: C functions called from
#: their frames, or below them, are the user's (escapes.CCalls).
RELAY = frozenset(
    (_call.__code__, call.__code__, _relay(len).__code__, _op.__code__, _construct.__code__)
)
# (read_whole_by: called from _call, _op; _subscript: a dict keyed by Values
# that a pick subscripts, LR[W[i]], compares the pick as the user's code does;
# contains, search: ``x in xs``, ``xs.count(x)``, compare as the user's code)
ON_BEHALF.update(
    RELAY | {f.__code__ for f in (read_whole_by, _subscript, contains, search, found_at)}
)
