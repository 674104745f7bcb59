"""Where a float argument escapes what a trace can follow.

While tracing, a float argument is a :class:`~chainrule.compiler.reads.TracedFloat`:
arithmetic on it, and its use as an operand of Values, are recorded, and
its methods and comparisons are guards. Two things escape that:

* a function written in C that takes the number whole (``math.exp(x)``,
  ``math.isnan(x)``, ``math.fsum``, ``statistics.fmean``, ``struct.pack``,
  NumPy): it reads the double inside the float without calling any of its
  methods. :class:`CCalls` watches the C functions that user code calls
  while the trace runs (``sys.setprofile``, this thread only); any one that
  is not known to go through the float's methods (``len``, ``sum``,
  ``max``, ``list.append`` ...) makes the trace hold for the float
  arguments' values only (guards, bit for bit), so another value traces
  again. The first such call is kept to name in messages.
* ``type(x)``, which no method of ``x`` sees: a function whose code (or
  the code of the functions it names) reads the builtin ``type`` gets its
  numbers as they are, each traced value a guard (:func:`reads_type`).
"""

from __future__ import annotations

import builtins
import contextlib
import functools
import io
import os
import sys
from collections.abc import Callable
from types import (
    BuiltinFunctionType,
    ClassMethodDescriptorType,
    CodeType,
    FunctionType,
    MethodDescriptorType,
    MethodType,
    MethodWrapperType,
    ModuleType,
)
from typing import Any

#: Builtins that reach a float's value only through its methods.
_SAFE_BUILTINS = frozenset(
    [
        "len",
        "isinstance",
        "issubclass",
        "iter",
        "next",
        "sum",
        "max",
        "min",
        "abs",
        "round",
        "any",
        "all",
        "sorted",
        "print",
        "repr",
        "hash",
        "id",
        "callable",
        "getattr",
        "setattr",
        "hasattr",
        "delattr",
        "divmod",
        "pow",
        "format",
        "ascii",
        "vars",
        "dir",
        "locals",
        "globals",
    ]
)

_SAFE_MODULES = frozenset(("time", "gc", "sys", "_thread", "threading", "_weakref", "posix", "nt"))

#: Methods of builtin containers (by type and name) that read no number.
_SAFE_METHODS = frozenset(
    (t, name)
    for t, names in (
        (list, "append extend pop insert index count copy clear remove reverse"),
        (dict, "get items keys values setdefault update pop copy clear"),
        (set, "add update discard remove pop copy clear"),
        (tuple, "index count"),
        (str, "join format split strip startswith endswith replace lower upper"),
    )
    for name in names.split()
)


def safe(f: Any) -> bool:
    """Whether the C function ``f`` reads numbers only through their methods (or none)."""
    owner = getattr(f, "__self__", None)
    name = getattr(f, "__name__", None)
    if owner is builtins:
        return name in _SAFE_BUILTINS
    if isinstance(owner, ModuleType):
        # clocks, the collector, threads: no number of theirs reaches a graph
        # (and a gc callback may call them in the middle of any trace);
        # sys.getsizeof measures the object it is handed: the plain number
        return owner.__name__ in _SAFE_MODULES and name != "getsizeof"
    return (type(owner), name) in _SAFE_METHODS


#: Functions whose result comes from state outside the graph and its
#: arguments (a random generator, a clock, a file, the environment): by the
#: module that defines them (a name None: all of the module's), and by
#: method name on objects of a type whose module starts with one of these.
#: The os functions that read the file system's state (beside stat, listdir).
_FILE_SYSTEM = ("getcwd", "getcwdb", "lstat", "access", "readlink", "get_terminal_size")
#: The os.path functions that read the file system or the environment.
_PATHS = frozenset(
    ("exists", "lexists", "isfile", "isdir", "islink", "ismount", "isjunction", "getsize")
    + ("getmtime", "getatime", "getctime", "samefile", "realpath", "abspath", "expanduser")
    + ("expandvars", "relpath")
)
_HIDDEN_MODULES: dict[str, frozenset[str] | None] = {
    "random": None,
    "_random": None,
    "secrets": None,
    "uuid": None,
    "numpy.random": None,
    "time": frozenset(
        [
            "time",
            "time_ns",
            "perf_counter",
            "perf_counter_ns",
            "monotonic",
            "monotonic_ns",
            "process_time",
            "process_time_ns",
            "thread_time",
            "thread_time_ns",
            "clock_gettime",
            "clock_gettime_ns",
            "localtime",
            "gmtime",
            "ctime",
            "asctime",
            "strftime",
        ]
    ),
    "os": frozenset(
        [
            "urandom",
            "getrandom",
            "getenv",
            "read",
            "times",
            "getloadavg",
            "listdir",
            "scandir",
            "stat",
            *_FILE_SYSTEM,
        ]
    ),
    "posix": frozenset(
        ["urandom", "getrandom", "read", "times", "getloadavg", "listdir", "scandir", "stat"]
        + [*_FILE_SYSTEM]
    ),
    "nt": frozenset(["urandom", "read", "times", "listdir", "scandir", "stat", *_FILE_SYSTEM]),
    # the file system, through os.path (os.path.exists(flag), os.path.abspath(p))
    "genericpath": _PATHS,
    "posixpath": _PATHS,
    "ntpath": _PATHS,
    "datetime": frozenset(("now", "today", "utcnow")),
    "io": frozenset(("open",)),
    "_io": frozenset(("open",)),
    "pathlib": frozenset(
        ("read_text", "read_bytes", "open", "exists", "stat", "iterdir", "is_file", "is_dir")
        + ("is_symlink", "is_mount", "cwd", "home", "resolve", "absolute", "glob", "rglob")
        + ("lstat", "samefile", "owner", "group", "readlink", "expanduser", "walk")
    ),
    "contextvars": frozenset(("get",)),  # a ContextVar's value depends on the context
    "_contextvars": frozenset(("get",)),
    "resource": frozenset(("getrusage",)),
    "gc": frozenset(
        ("get_count", "get_stats", "isenabled", "get_threshold", "get_objects", "get_freeze_count")
        + ("collect",)
    ),
    "glob": None,  # (the file system)
    "filecmp": None,
    "shutil": frozenset(("which", "disk_usage")),
    # another thread's state, read: an Event's flag, a queue's items, a lock
    # (objects the guard walk does not enter: sources._NOT_DATA)
    "threading": frozenset(
        ("is_set", "wait", "wait_for", "locked", "acquire", "is_alive")
        + ("get_ident", "get_native_id", "current_thread", "active_count", "enumerate")
    ),
    "_thread": frozenset(("locked", "acquire", "get_ident", "get_native_id", "_count")),
    "queue": frozenset(("get", "get_nowait", "qsize", "empty", "full")),
    "_queue": frozenset(("get", "get_nowait", "qsize", "empty")),
    "multiprocessing": None,
    # the call stack: while tracing, compile's own frames stand between the
    # function and its caller (and sys._getframe() from a copy is compile's)
    "sys": frozenset(("_getframe", "_getframemodulename"))
    # (and the interpreter's settings, which code may change between calls)
    | frozenset(("getrecursionlimit", "getswitchinterval", "get_int_max_str_digits"))
    | frozenset(("getallocatedblocks", "gettrace", "getprofile")),
    "inspect": frozenset(("currentframe", "stack", "trace", "getouterframes", "getframeinfo")),
    "traceback": frozenset(("extract_stack", "format_stack", "print_stack", "walk_stack")),
    "logging": frozenset(("isEnabledFor", "getEffectiveLevel", "hasHandlers", "getLogger")),
    # NumPy's floating-point error handling and print options, set by np.seterr
    "numpy": frozenset(("geterr", "geterrcall", "get_printoptions", "getbufsize"))
    # (and where arrays' memory lies: two arrays of equal bytes are one key)
    | frozenset(("shares_memory", "may_share_memory", "byte_bounds")),
    # decimal's functions and methods read the thread's context (precision, rounding)
    "decimal": None,
}
_HIDDEN_BUILTINS = frozenset(("open", "input"))


def hidden_state(f: Any) -> bool:
    """Whether a call of ``f`` gives a result that depends on state outside
    the graph and its arguments, and changes from call to call
    (``random.random``, ``np.random.normal``, ``time.time``, ``open``, a
    file's ``read``): a deny-list, by the module that defines ``f`` or the
    object it is bound to."""
    t = type(f)
    if t is FunctionType:
        return _hidden_in(f.__module__ or "", f.__name__)
    if t is type and f.__module__ == "decimal":
        return True  # (a Decimal's arithmetic reads the thread's context: its precision)
    if t is MethodDescriptorType or t is ClassMethodDescriptorType:  # Random.random(rng)
        return _hidden_in_class(f.__objclass__, f.__name__)
    if t is MethodWrapperType and f.__name__ == "__call__":  # rng.random.__call__()
        return hidden_state(f.__self__)
    if t.__name__ == "_ArrayFunctionDispatcher" and t.__module__ == "numpy":  # np.shares_memory
        return _hidden_in(f.__module__ or "", f.__name__)
    if t is not MethodType and t is not BuiltinFunctionType:
        return False  # a class (making a generator: its methods are the calls), an object
    owner = f.__self__
    name = f.__name__
    if owner is builtins:
        return name in _HIDDEN_BUILTINS
    if isinstance(owner, ModuleType):
        return _hidden_in(owner.__name__, name)
    if isinstance(owner, type):
        return _hidden_in_class(owner, name)  # datetime.now
    if isinstance(owner, _FILES):  # a file's read, readline
        return True
    klass: Any = type(owner)
    return _hidden_in_class(klass, name)  # a random.Random's, a numpy Generator's


@functools.lru_cache(maxsize=4096)
def _hidden_in_class(klass: Any, name: str) -> bool:
    """Whether ``name`` of a class or of any of its bases (a user's subclass
    of ``random.Random``) is on the deny-list."""
    return any(_hidden_in(getattr(k, "__module__", "") or "", name) for k in klass.__mro__)


@functools.lru_cache(maxsize=4096)
def _hidden_in(module: str, name: str) -> bool:
    for prefix, names in _HIDDEN_MODULES.items():
        if module == prefix or module.startswith(prefix + "."):
            return names is None or name in names
    return False


#: The C base of every file type (an isinstance of the ABC io.IOBase is slower).
_FILES: type = io.IOBase.__mro__[1]  # _io._IOBase


def describe(f: Any) -> str:
    """``math.exp``, ``list.sort``: a C function's name for messages."""
    owner = getattr(f, "__self__", None)
    name = getattr(f, "__qualname__", None) or getattr(f, "__name__", repr(f))
    if isinstance(owner, ModuleType) and owner is not builtins:
        return f"{owner.__name__}.{name}"
    return str(name)


class CCalls:
    """The profile hook that notes the first C function user code calls
    that may read a float argument whole (see the module)."""

    def __init__(
        self,
        internal: frozenset[Any],
        stop: Any,
        relay: frozenset[Any],
        hands_on: Callable[[Any], bool] | None = None,
    ) -> None:
        self.internal = internal
        self.stop = stop  # the code of the frame that calls the user's function
        # compile's code that calls C functions on the user's behalf
        # (chainrule.compiler.rewrite): its calls are the user's
        self.relay = relay
        # C functions that only compare items and hand them to functions the
        # relay calls in turn (functools.reduce, list.sort with a key): from
        # the relay, they read no float whole
        self.hands_on = hands_on
        self.first: str | None = None  # "math.exp (file:line)"
        self._previous: Any = None

    def hook(self, frame: Any, event: str, arg: Any) -> None:
        if event != "c_call" or self._ours(frame.f_code) or safe(arg):
            return
        if self.hands_on is not None and frame.f_code in self.relay and self.hands_on(arg):
            return
        f = frame.f_back  # called on behalf of compile's or the engine's own code?
        while f is not None and f.f_code is not self.stop:
            if self._ours(f.f_code):
                return
            f = f.f_back
        self.first = f"{describe(arg)} ({frame.f_code.co_filename}:{frame.f_lineno})"
        sys.setprofile(None)  # one is enough: the floats are pinned

    def _ours(self, code: CodeType) -> bool:
        return code.co_filename in self.internal and code not in self.relay

    def __enter__(self) -> CCalls:
        self._previous = sys.getprofile()
        if self._previous is not None:  # a profiler's: left alone, and nothing is seen
            self.first = "a profiler (sys.setprofile is taken)"
            return self
        sys.setprofile(self.hook)
        return self

    def __exit__(self, *exc: object) -> None:
        if sys.getprofile() == self.hook:
            sys.setprofile(self._previous)


_scanned: dict[CodeType, bool] = {}


#: chainrule's own files (the package this one's package is in).
PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def reads_type(fn: Callable[..., Any], depth: int = 3) -> bool:
    """Whether ``fn``'s code, or that of the functions it names in its
    globals and closure (``depth`` levels), reads the builtin ``type``."""
    seen: set[FunctionType] = set()  # the functions themselves: kept alive, by identity

    def visit(f: Any, level: int) -> bool:
        if isinstance(f, MethodType):
            f = f.__func__
        if not isinstance(f, FunctionType) or f in seen:
            if not isinstance(f, FunctionType) and callable(f) and level == depth:
                call = call_method(f)
                return visit(call, level) if isinstance(call, FunctionType) else False
            return False
        seen.add(f)
        if f.__code__.co_filename.startswith(PACKAGE_DIR):
            # chainrule's own (its losses, functional): type() there asks about
            # containers, error messages and its rules' arrays, never a float's class
            return False
        if code_reads_type(f.__code__):
            return True
        if level == 0:
            return False
        names: list[Any] = [f.__globals__.get(n) for n in all_names(f.__code__)]
        for cell in f.__closure__ or ():
            with contextlib.suppress(ValueError):
                names.append(cell.cell_contents)
        return any(visit(g, level - 1) for g in names)

    return visit(fn, depth)


def code_reads_type(code: CodeType) -> bool:
    found = _scanned.get(code)
    if found is None:
        found = "type" in code.co_names or any(
            isinstance(c, CodeType) and code_reads_type(c) for c in code.co_consts
        )
        _scanned[code] = found
    return found


def all_names(code: CodeType) -> set[str]:
    """The names ``code`` and its nested code read (globals, attributes)."""
    names = set(code.co_names)
    for c in code.co_consts:
        if isinstance(c, CodeType):
            names |= all_names(c)
    return names


def call_method(obj: Any) -> Any:
    """The ``__call__`` defined by the class of a callable object, if any."""
    for klass in type(obj).__mro__:
        if "__call__" in vars(klass):
            return vars(klass)["__call__"]
    return None


def generators_state() -> dict[str, Any]:
    """The state of the random generators that code draws from without
    naming one: Python's :mod:`random` module, NumPy's legacy global one
    (``np.random.rand``; ``numpy.random`` imported here, so a module that
    the traced code imports, which loads it, is not taken for a draw) and
    chainrule's own Tensor generator (once made). A trace compares it
    before and after (:func:`drew`): a draw from code compile does not copy
    (a ``@dataclass``'s generated ``__init__`` calling
    ``default_factory=random.random``, a library's function) changes it
    where no call compile sees did (the deny-list above sees the calls in
    the code it copies)."""
    import random

    from .. import random_state

    state: dict[str, Any] = {"random": random.getstate()}
    try:
        import numpy.random as numpy_random
    except ImportError:
        pass
    else:
        mt = numpy_random.get_state(legacy=False)
        keys = mt["state"]
        state["numpy"] = (keys["pos"], keys["key"].tobytes(), mt["has_gauss"], mt["gauss"])
    own = random_state._state.generator
    if own is not None:
        state["chainrule"] = repr(own.bit_generator.state)
    return state


def drew(before: dict[str, Any], after: dict[str, Any]) -> bool:
    """Whether a generator known in both states moved (one made in between,
    chainrule's Tensor generator, has nothing to compare)."""
    return any(after[name] != was for name, was in before.items() if name in after)
