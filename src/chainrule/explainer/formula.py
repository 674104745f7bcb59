"""A small, safe expression language for scalar formulas: ``relu(a*b + d)``,
or named steps as the walkthroughs write them: ``c = a*b; e = c + d; f = relu(e)``.

The ``chainrule explain`` command takes a formula from the command line and
turns it into a graph of Values. It never hands the text to ``eval``: a
tokenizer and a recursive-descent parser accept exactly

* numbers (``2``, ``0.5``, ``.5``, ``1e-3``) and names (``a``, ``x_1``);
* ``+ - * / **`` with Python's precedence, ``**`` right-associative and
  binding tighter than unary minus on its left (``-a**2`` is ``-(a**2)``);
* parentheses, and calls of the engine's functions: ``exp log sqrt tanh
  sigmoid relu softplus sin cos abs`` (one argument) and ``max min`` (two);
* steps separated by ``;``, each ``NAME = formula`` (the last may be a bare
  formula): each name is defined once, before it is used, and used.

Everything else -- strings, attribute access, indexing, other calls, unknown
names -- is refused with an :class:`ExprError` that carries the position.

Numbers in the formula are constants, as in Python code: ``a*b + 10`` gives
the same graph as ``a * b + 10.0`` (no node for ``10``). Each intermediate
node is labelled with the text it came from, so a table of the backward pass
reads like the micrograd and microgpt walkthroughs:

>>> f = evaluate("relu(a*b + d)", {"a": 2.0, "b": -3.0, "d": 10.0})
>>> f.label, f.data, f._prev[0].label
('relu(a*b + d)', 4.0, 'a*b + d')

A named step labels its node with the name:

>>> f = evaluate("c = a*b; e = c + d; f = relu(e)", {"a": 2.0, "b": -3.0, "d": 10.0})
>>> f.label, f.data, f._prev[0].label, f._prev[0]._prev[0].label
('f', 4.0, 'e', 'c')
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Union

from ..value.engine import Value
from ..value.functions import maximum, minimum

#: Longest formula accepted, in characters: bounds the size of any graph.
MAX_LENGTH = 10_000
#: Deepest nesting of parentheses, signs and exponents. The parser recurses
#: about five Python frames per level, so this stays far below Python's limit.
MAX_DEPTH = 100
#: Largest constant exponent, in magnitude. Past it a double over- or
#: underflows for every base not within a hair of 1, so such an exponent is a
#: mistake or a probe (Python's own ``9**9**9`` on integers never finishes).
MAX_EXPONENT = 1000.0

UNARY_FUNCTIONS: dict[str, Callable[[Value], Value]] = {
    "exp": Value.exp,
    "log": Value.log,
    "sqrt": Value.sqrt,
    "tanh": Value.tanh,
    "sigmoid": Value.sigmoid,
    "relu": Value.relu,
    "softplus": Value.softplus,
    "sin": Value.sin,
    "cos": Value.cos,
    "abs": Value.abs,
}
BINARY_FUNCTIONS: dict[str, Callable[[Value, Value], Value]] = {
    "max": maximum,
    "min": minimum,
}
FUNCTIONS = tuple(UNARY_FUNCTIONS) + tuple(BINARY_FUNCTIONS)

_OPERATORS: dict[str, Callable[[object, object], object]] = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
    "/": operator.truediv,
    "**": operator.pow,
}


class ExprError(ValueError):
    """A formula that cannot be read or evaluated, and where.

    ``position`` is a 0-based index into ``source``; :meth:`caret` draws it.
    It is None for a fault that has no place in the text (a value given
    for a name the formula never uses).

    >>> try:
    ...     parse("relu(a*b")
    ... except ExprError as e:
    ...     print(e)
    '(' is never closed (column 5)
    """

    def __init__(self, message: str, position: int | None, source: str = "") -> None:
        super().__init__(message, position)
        self.message = message
        self.position = position
        self.source = source

    @property
    def column(self) -> int | None:
        """The 1-based column of the position (None without one)."""
        return None if self.position is None else self.position + 1

    def __str__(self) -> str:
        if self.position is None:
            return self.message
        return f"{self.message} (column {self.column})"

    def caret(self, indent: str = "  ") -> str:
        """The formula and, on the line below, a ``^`` under the position
        ('' when the fault has no position)."""
        if self.position is None:
            return ""
        line = self.source.replace("\t", " ").replace("\n", " ").replace("\r", " ")
        return f"{indent}{line}\n{indent}{' ' * self.position}^"


# --------------------------------------------------------------------------
# The syntax tree
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Num:
    value: float
    start: int
    end: int


@dataclass(frozen=True)
class Name:
    id: str
    start: int
    end: int


@dataclass(frozen=True)
class Unary:
    op: str
    operand: Node
    start: int
    end: int


@dataclass(frozen=True)
class Binary:
    op: str
    left: Node
    right: Node
    start: int
    end: int


@dataclass(frozen=True)
class Call:
    func: str
    args: tuple[Node, ...]
    start: int
    end: int


Node = Union[Num, Name, Unary, Binary, Call]


@dataclass(frozen=True)
class Step:
    """One step of a formula, ``name = expr``; ``name`` is None for a last
    step written without one. ``start`` is where the step's text begins."""

    name: str | None
    expr: Node
    start: int


# --------------------------------------------------------------------------
# Tokens
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Token:
    kind: str  # "num", "name", "op", "end", or "bad": a character no token starts with
    text: str
    pos: int

    @property
    def end(self) -> int:
        return self.pos + len(self.text)


_TOKEN = re.compile(
    r"(?P<space>\s+)"
    r"|(?P<num>(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)"
    r"|(?P<name>[A-Za-z_][A-Za-z0-9_]*)"
    r"|(?P<op>\*\*|[-+*/(),=;])"
)


def tokenize(source: str) -> list[Token]:
    """The tokens of ``source``, ending with an ``end`` token.

    A character that starts no token ends the list with a ``bad`` token
    instead of an error here: the parser reports it only when it gets there,
    so ``__import__('os')`` is refused for the call, the first fault.
    """
    tokens = []
    pos = 0
    while pos < len(source):
        m = _TOKEN.match(source, pos)
        if m is None:
            tokens.append(Token("bad", source[pos], pos))
            break
        kind = m.lastgroup
        assert kind is not None
        if kind != "space":
            tokens.append(Token(kind, m.group(), pos))
        pos = m.end()
    tokens.append(Token("end", "", len(source)))
    return tokens


def _bad_character(source: str, pos: int) -> str:
    c = source[pos]
    if c in "'\"":
        return "string literals are not allowed"
    if c == ".":
        return "'.' is not allowed here: no attribute access"
    if c in "[]{}":
        return f"{c!r} is not allowed: no indexing, lists or sets"
    if c == "^":
        return "'^' is not an operator here: write ** for a power"
    return f"unexpected character {c!r}"


# --------------------------------------------------------------------------
# The parser: recursive descent, one method per precedence level
# --------------------------------------------------------------------------


def parse(source: str) -> Node:
    """The syntax tree of ``source``, or an :class:`ExprError`.

    >>> parse("-a**2")
    Unary(op='-', operand=Binary(op='**', left=Name(id='a', start=1, end=2), \
right=Num(value=2.0, start=4, end=5), start=1, end=5), start=0, end=5)
    """
    if not isinstance(source, str):
        raise TypeError(f"parse: expected a str, got {type(source).__name__}")
    if len(source) > MAX_LENGTH:
        raise ExprError(f"expression is too long (limit {MAX_LENGTH} characters)", 0, source)
    return _Parser(source).parse()


def parse_program(source: str) -> list[Step]:
    """The steps of ``source``: ``c = a*b; e = c + d; f = relu(e)``, or a
    single formula. Checks the syntax only (names are checked by
    :func:`evaluate`).

    >>> [(s.name, s.start) for s in parse_program("c = a*b; relu(c)")]
    [('c', 0), (None, 9)]
    """
    if not isinstance(source, str):
        raise TypeError(f"parse_program: expected a str, got {type(source).__name__}")
    if len(source) > MAX_LENGTH:
        raise ExprError(f"expression is too long (limit {MAX_LENGTH} characters)", 0, source)
    return _Parser(source).program()


Span = tuple[Node, int, int]  # a node and its text's extent, parentheses included


class _Parser:
    def __init__(self, source: str) -> None:
        self.source = source
        self.tokens = tokenize(source)
        self.i = 0
        self.depth = 0

    @property
    def tok(self) -> Token:
        t = self.tokens[self.i]
        if t.kind == "bad":
            raise ExprError(_bad_character(self.source, t.pos), t.pos, self.source)
        return t

    def error(self, message: str, pos: int | None = None) -> ExprError:
        return ExprError(message, self.tok.pos if pos is None else pos, self.source)

    def take(self) -> Token:
        t = self.tok
        self.i += 1
        return t

    def at(self, *ops: str) -> bool:
        return self.tok.kind == "op" and self.tok.text in ops

    def parse(self) -> Node:
        if self.tok.kind == "end":
            raise self.error("empty expression")
        node, _, _ = self.expr()
        if self.tok.kind != "end":
            self.unexpected("the end")
        return node

    def unexpected(self, expected: str) -> None:
        if self.at(")"):
            raise self.error("unmatched ')'")
        if self.at("="):
            raise self.error("'=' must follow a step's name: NAME = formula")
        raise self.error(f"unexpected {self.tok.text!r}: expected an operator or {expected}")

    # program := step (";" step)* [";"];  step := [NAME "="] expr
    def program(self) -> list[Step]:
        steps: list[Step] = []
        while True:
            if self.tok.kind == "end" and steps:
                return steps
            if self.tok.kind == "end" or self.at(";"):
                raise self.error("empty step" if steps or self.at(";") else "empty expression")
            start = self.tok.pos
            if steps and steps[-1].name is None:
                raise self.error(
                    "only the last step may be a formula without a name: write NAME = ...",
                    steps[-1].start,
                )
            name = None
            after = self.tokens[self.i + 1]
            if self.tok.kind == "name" and after.kind == "op" and after.text == "=":
                name = self.take().text
                if name in FUNCTIONS:
                    raise self.error(f"{name!r} is a function; choose another name", start)
                self.take()
                if self.tok.kind == "end" or self.at(";"):
                    raise self.error(f"{name} = what? a formula must follow '='")
            node, _, _ = self.expr()
            steps.append(Step(name, node, start))
            if self.at(";"):
                self.take()
            elif self.tok.kind != "end":
                self.unexpected("';' before the next step")

    # expr := term (("+" | "-") term)*
    def expr(self) -> Span:
        node, start, end = self.term()
        while self.at("+", "-"):
            op = self.take().text
            right, _, end = self.term()
            node = Binary(op, node, right, start, end)
        return node, start, end

    # term := factor (("*" | "/") factor)*
    def term(self) -> Span:
        node, start, end = self.factor()
        while self.at("*", "/"):
            op = self.take().text
            right, _, end = self.factor()
            node = Binary(op, node, right, start, end)
        return node, start, end

    # factor := ("-" | "+") factor | power
    def factor(self) -> Span:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise self.error(f"expression is nested too deeply (limit {MAX_DEPTH})")
        try:
            if self.at("-", "+"):
                sign = self.take()
                operand, _, end = self.factor()
                return Unary(sign.text, operand, sign.pos, end), sign.pos, end
            return self.power()
        finally:
            self.depth -= 1

    # power := atom ["**" factor]; the factor makes ** right-associative
    def power(self) -> Span:
        base, start, end = self.atom()
        if self.at("**"):
            self.take()
            exponent, _, end = self.factor()
            return Binary("**", base, exponent, start, end), start, end
        return base, start, end

    # atom := number | name | name "(" args ")" | "(" expr ")"
    def atom(self) -> Span:
        t = self.tok
        if t.kind == "num":
            self.take()
            return Num(float(t.text), t.pos, t.end), t.pos, t.end
        if t.kind == "name":
            self.take()
            if self.at("("):
                return self.call(t)
            return Name(t.text, t.pos, t.end), t.pos, t.end
        if self.at("("):
            self.take()
            inner, _, _ = self.expr()
            close = self.expect_close(t)
            return inner, t.pos, close.end
        if t.kind == "end":
            raise self.error("expected a number, name or '(' at the end")
        raise self.error(f"expected a number, name or '(', found {t.text!r}")

    def call(self, name: Token) -> Span:
        if name.text not in UNARY_FUNCTIONS and name.text not in BINARY_FUNCTIONS:
            raise self.error(
                f"unknown function {name.text!r}; allowed: {', '.join(FUNCTIONS)}", name.pos
            )
        opening = self.take()
        args = [self.expr()[0]]
        while self.at(","):
            self.take()
            args.append(self.expr()[0])
        close = self.expect_close(opening)
        arity = 1 if name.text in UNARY_FUNCTIONS else 2
        if len(args) != arity:
            raise self.error(
                f"{name.text} takes {arity} argument{'s' * (arity > 1)}, got {len(args)}",
                name.pos,
            )
        return Call(name.text, tuple(args), name.pos, close.end), name.pos, close.end

    def expect_close(self, opening: Token) -> Token:
        if self.at(")"):
            return self.take()
        if self.tok.kind == "end":
            raise self.error("'(' is never closed", opening.pos)
        raise self.error(f"expected ')' or an operator, found {self.tok.text!r}")


# --------------------------------------------------------------------------
# Evaluation over Values
# --------------------------------------------------------------------------

Operand = Union[float, Value]  # a float is a constant: no node in the graph


def evaluate(source: str, values: Mapping[str, float | Value]) -> Value:
    """Parse ``source`` and build its graph, binding each name to a Value.

    Each name becomes one leaf (a name used twice is one node with two
    consumers); numbers stay constants; every new node is labelled with its
    text, and the node a step computes with the step's name. Every name in
    ``values`` must be used, and every step's name defined once, before
    its use, and used by a later step: anything else is an
    :class:`ExprError`. Evaluation is iterative, so a long formula cannot
    exhaust the stack.

    >>> f = evaluate("(a*b + a)**2", {"a": 2, "b": 3})
    >>> f.backward()
    >>> f.data, f._prev[0]._prev[1].grad
    (64.0, 64.0)
    """
    steps = parse_program(source)
    env: dict[str, Operand] = {name: _leaf(name, v) for name, v in values.items()}
    defined: dict[str, Step] = {}
    for step in steps:
        if step.name is None:
            continue
        if step.name in values:
            message = f"{step.name} is given ({step.name}=...) and also defined by a step"
            raise ExprError(message, step.start, source)
        if step.name in defined:
            raise ExprError(f"{step.name} is defined twice", step.start, source)
        defined[step.name] = step
    used: set[str] = set()
    result: Operand = 0.0
    for step in steps:
        result = _evaluate_tree(step.expr, source, env, defined, used)
        if step.name is None:
            continue
        if isinstance(result, Value):
            for other, v in env.items():
                if v is result:
                    raise ExprError(
                        f"{step.name} = {other} only renames {other}: write {other} where "
                        f"you use {step.name}",
                        step.start,
                        source,
                    )
            result.label = step.name
        env[step.name] = result
    for step in steps[:-1]:
        if step.name not in used:
            raise ExprError(f"{step.name} is defined but never used", step.start, source)
    unused = [name for name in values if name not in used]
    if unused:
        names = ", ".join(unused)
        them = "it" if len(unused) == 1 else "them"
        are = "is" if len(unused) == 1 else "are"
        raise ExprError(f"{names} {are} given but the formula does not use {them}", None, source)
    if isinstance(result, Value):
        return result
    last = steps[-1]
    return Value(result, label=last.name or _text(source, last.expr))


def _evaluate_tree(
    tree: Node,
    source: str,
    env: Mapping[str, Operand],
    defined: Collection[str],
    used: set[str],
) -> Operand:
    """The operand one formula evaluates to; iterative (no recursion)."""
    results: list[Operand] = []
    stack: list[tuple[Node, bool]] = [(tree, False)]
    while stack:
        node, ready = stack.pop()
        kids = _children(node)
        if kids and not ready:
            stack.append((node, True))
            stack.extend((kid, False) for kid in reversed(kids))
            continue
        args = results[len(results) - len(kids) :]
        del results[len(results) - len(kids) :]
        if isinstance(node, Name):
            results.append(_lookup(node, source, env, defined, used))
        else:
            results.append(_apply(node, args, source))
    (result,) = results
    return result


def _lookup(
    node: Name, source: str, env: Mapping[str, Operand], defined: Collection[str], used: set[str]
) -> Operand:
    if node.id in env:
        used.add(node.id)
        return env[node.id]
    if node.id in defined:
        raise ExprError(f"{node.id} is used before it is defined", node.start, source)
    hint = f": call it as {node.id}(...)" if node.id in FUNCTIONS else f" (bind it: {node.id}=...)"
    raise ExprError(f"unknown name {node.id!r}{hint}", node.start, source)


def _leaf(name: str, v: float | Value) -> Value:
    if isinstance(v, Value):
        if not v.label:
            v.label = name
        return v
    return Value(v, label=name)


def _children(node: Node) -> tuple[Node, ...]:
    if isinstance(node, Binary):
        return (node.left, node.right)
    if isinstance(node, Unary):
        return (node.operand,)
    if isinstance(node, Call):
        return node.args
    return ()


def _text(source: str, node: Node) -> str:
    return " ".join(source[node.start : node.end].split())


def _apply(node: Num | Unary | Binary | Call, args: list[Operand], source: str) -> Operand:
    """The operand ``node`` evaluates to, given its children's."""
    if isinstance(node, Num):
        return node.value
    if isinstance(node, Unary) and node.op == "+":
        return args[0]
    if isinstance(node, Binary) and node.op == "**":
        exponent = args[1]
        if not isinstance(exponent, Value) and abs(exponent) > MAX_EXPONENT:
            raise ExprError(
                f"exponent {exponent:g} is too large (limit ±{MAX_EXPONENT:g})",
                node.right.start,
                source,
            )
    constant = not any(isinstance(x, Value) for x in args)
    if constant:
        # Constants fold with the engine's float semantics (1/0 is inf, as
        # PyTorch), not Python's, by running the same op on a throwaway Value.
        args = [Value(float(args[0])), *args[1:]]
    result = _operate(node, args, source)
    if constant:
        return result.data
    if not result.label:
        result.label = _text(source, node)
    return result


def _operate(node: Unary | Binary | Call, args: list[Operand], source: str) -> Value:
    if isinstance(node, Unary):
        return -args[0]  # type: ignore[return-value]
    if isinstance(node, Binary):
        return _OPERATORS[node.op](*args)  # type: ignore[return-value]
    if node.func in UNARY_FUNCTIONS:
        (x,) = args
        return UNARY_FUNCTIONS[node.func](x if isinstance(x, Value) else Value(x))
    # A constant argument of max or min becomes a leaf labelled with its text.
    a, b = (
        x if isinstance(x, Value) else Value(x, label=_text(source, arg))
        for x, arg in zip(args, node.args)
    )
    return BINARY_FUNCTIONS[node.func](a, b)
