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
  Calls of a builtin's name (``len``, ``max``, ``zip``) are left as written.

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
import linecache
import os
import sysconfig
from types import BuiltinFunctionType, CellType, CodeType, FunctionType, MethodType
from typing import Any

from .escapes import all_names, call_method, safe
from .reads import AST_LOCK, read_whole_by
from .symbolic import SymInt, gather

_SUBSCRIPT = "_chainrule_subscript_"
_CALL = "_chainrule_call_"
_MAKER = "_chainrule_maker_"

#: Names whose calls are left as written: the builtins (shadowed by a user
#: function, that function runs as it is: at worst a pin). The builtin
#: ``max``/``min`` must be called from the user's frame (reads follow them).
_BUILTIN_NAMES = frozenset(name for name in dir(builtins) if not name.startswith("_"))

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


class _Rewrite(ast.NodeTransformer):
    """``a[b]`` (read) -> ``_subscript(a, b)``; ``f(...)`` -> ``_call(f, ...)``."""

    def visit_Subscript(self, node: ast.Subscript) -> ast.AST:
        self.generic_visit(node)
        if not isinstance(node.ctx, ast.Load) or isinstance(node.slice, ast.Slice):
            return node
        call = ast.Call(ast.Name(_SUBSCRIPT, ast.Load()), [node.value, node.slice], [])
        return ast.copy_location(call, node)

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.func, ast.Name) and node.func.id in _BUILTIN_NAMES:
            return node
        call = ast.Call(ast.Name(_CALL, ast.Load()), [node.func, *node.args], node.keywords)
        return ast.copy_location(call, node)


#: code object -> (that code object, its copy's code or None: runs as it is)
_copies: dict[CodeType, tuple[CodeType, CodeType | None]] = {}
#: file name -> (its lines, first line -> the functions and lambdas that
#: start there, the module's own imports)
_files: dict[str, tuple[list[str], dict[int, list[ast.AST]], list[ast.stmt]]] = {}


def copied_code(code: CodeType) -> CodeType | None:
    """The code of the rewritten copy of a function whose code is ``code``,
    or None when it runs as it is (see the module)."""
    found = _copies.get(code)
    if found is not None and found[0] is code:  # (code objects compare by value)
        return found[1]
    with AST_LOCK:  # (see reads.AST_LOCK)
        found = _copies.get(code)
        if found is not None and found[0] is code:  # made by another thread meanwhile
            return found[1]
        try:
            new = _make(code)
        except (SyntaxError, ValueError, TypeError, RecursionError, MemoryError):
            new = None
        _copies[code] = (code, new)
    return new


def _make(code: CodeType) -> CodeType | None:
    filename = code.co_filename
    # ("<cell 3>", "<ipython-input-...>": linecache may hold their source)
    if not filename or filename.startswith(_SKIP):
        return None
    if "super" in all_names(code) or "__class__" in code.co_freevars:
        return None
    if {_SUBSCRIPT, _CALL, _MAKER} & set(code.co_varnames + code.co_freevars + code.co_names):
        return None
    starts, imports = _file(filename)
    for node in starts.get(code.co_firstlineno, []):
        if _name_of(node) != code.co_name:
            continue
        plain = _compile(node, code, imports, rewrite=False)
        if plain is None or not same_code(plain, code):
            continue
        return _compile(node, code, imports, rewrite=True)
    return None


def _name_of(node: ast.AST) -> str:
    return "<lambda>" if isinstance(node, ast.Lambda) else getattr(node, "name", "")


def _file(filename: str) -> tuple[dict[int, list[ast.AST]], list[ast.stmt]]:
    """The functions and lambdas of a file by first line, and its
    module-level imports (Python compiles ``math.sqrt(x)`` differently
    when ``math`` is a module's import)."""
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
    node: ast.AST, code: CodeType, imports: list[ast.stmt], rewrite: bool
) -> CodeType | None:
    """The code of ``node`` compiled alone, inside a function whose
    parameters are the helpers and ``code``'s free variables (so they stay
    free variables), changed or not."""
    node = copy.deepcopy(node)
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        node.decorator_list = []
        body: list[ast.stmt] = [node]
    else:
        body = [ast.Return(node)]  # type: ignore[arg-type]
    if rewrite:
        body = [_Rewrite().visit(stmt) for stmt in body]
    params = [_SUBSCRIPT, _CALL, *code.co_freevars]
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
    return None if made is None else _const_code(made, code.co_name)


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
    cells = {_SUBSCRIPT: _subscript_cell, _CALL: _call_cell}
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
    guards (:func:`~chainrule.compiler.reads.read_whole_by`)."""
    g = target(f)
    if g is f and opaque(f):
        return read_whole_by(f, args, kwargs)
    return g(*args, **kwargs)


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
    int argument and ``container`` a list (see :mod:`chainrule.compiler.symbolic`)."""
    if type(container) is list and type(key) is SymInt:
        return gather(container, key)
    return container[key]


_subscript_cell = CellType(_subscript)
_call_cell = CellType(_call)


def call(fn: Any, *args: Any) -> Any:
    """``fn(*args)`` as a trace runs it: its copy (as :func:`_call`)."""
    return _call(fn, *args)


#: The code of :func:`_call` and :func:`call`: C functions called from
#: their frames, or below them, are the user's (escapes.CCalls).
RELAY = frozenset((_call.__code__, call.__code__))
