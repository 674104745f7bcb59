"""The backward pass as an interactive page: one self-contained HTML file.

:func:`walkthrough_html` draws the graph of a Value (laid out here, as
inline SVG: no Graphviz), the table of :func:`chainrule.explain` and the
trace, with buttons (and the arrow keys) to step forward and back through
the backward pass: the seed, then every ``child.grad += local * node.grad``
in order. The node being processed and the input receiving are
highlighted, and the ``.grad`` values change as they accumulate. The page
itself performs the pass from the local gradients, so the gradients it
ends with are the ones ``backward()`` gives.

No network: no external scripts, styles or fonts. ``#step=N`` at the end
of the page's address opens it at step N.
"""

from __future__ import annotations

import html
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..io.sealed import replace_file
from ..value.engine import Value
from .draw import DEFAULT_MAX_NODES, GraphTooLarge
from .table import Walk, backward_walk, formula, grad_of, meaning_of, running_totals
from .text import format_number

# Sizes in pixels. Text is monospace, so its width is known from its length:
# at most CHAR_W[size] per character (0.6 em in DejaVu Sans Mono, Menlo,
# Consolas, with a margin), and the boxes and gaps are made to hold it.
CHAR_W = {12: 7.5, 10: 6.3}
LINE = 16  # between the baselines of a box's lines
PAD = 8  # inside a box, left and right
MIN_BOX_W, MAX_BOX_W = 150, 270
TITLE_LINES = 2  # a longer title is shortened, whole on hover
MIN_GAP_X, GAP_Y = 70, 18  # between columns and between boxes in a column
SLOT = 20  # between the points where an operation's incoming edges end
ARROW = 8  # the arrowhead's length
TOP = 46  # room above the boxes for edges that skip columns
LINK = 22  # from an operation's oval to its record
MIN_OVAL_W = 40
FONT = "ui-monospace, Menlo, Consolas, 'DejaVu Sans Mono', monospace"


@dataclass(frozen=True)
class Picture:
    """A graph as drawn, from either engine: per node its title, the
    record's data and grad lines, the operation that made it (``""`` for a
    leaf: no oval) and its inputs, each with the label of its edge (the
    local gradient on the stepping page, ``""`` for none). Nodes are in
    forward order, each after its inputs."""

    titles: list[str]
    data: list[str]
    grads: list[str]
    ops: list[str]
    inputs: list[list[tuple[int, str]]]
    grad_chars: int = 0  # room for a grad the page's script may write


@dataclass(frozen=True)
class Geometry:
    """The drawing's sizes for one picture, from the longest texts it shows."""

    box_w: float
    box_h: float
    gap_x: float
    oval_w: float
    title_lines: list[list[str]]  # per node, the title's lines as drawn
    titles: list[str]  # per node, the whole title (shown on hover)


def _grad_chars(digits: int) -> int:
    """The longest grad the page's script can write: sign, digits, the
    point and an exponent (``-1.23457e-305``), or ``-inf``."""
    return digits + 8


def geometry(picture: Picture) -> Geometry:
    """Record, oval and gap sizes that hold every title, number, operation
    and edge label."""
    titles = picture.titles
    grads = max([picture.grad_chars, *(len(g) for g in picture.grads)])
    widest = max(max(len(t) for t in titles), max(len(d) for d in picture.data), 5 + grads)
    box_w = min(max(MIN_BOX_W, 2 * PAD + CHAR_W[12] * widest), MAX_BOX_W)
    per_line = int((box_w - 2 * PAD) // CHAR_W[12])
    lines = [_wrap(t, per_line, TITLE_LINES) for t in titles]
    n = max(len(x) for x in lines)
    fan_in = max(len(x) for x in picture.inputs)
    box_h = max(LINE * (n + 2) + 16, SLOT * (fan_in + 1))
    oval_w = max(MIN_OVAL_W, 20 + CHAR_W[12] * max(len(op) for op in picture.ops))
    labels = [len(label) for x in picture.inputs for _, label in x]
    gap_x = max(MIN_GAP_X, _label_room(max(labels, default=0)) + 30)  # 30: room for the curve
    return Geometry(box_w, box_h, gap_x, oval_w, lines, titles)


def _label_room(chars: int) -> float:
    """How far before an oval an edge runs straight: its label's width, the
    arrowhead and a margin either side."""
    return chars * CHAR_W[10] + ARROW + 12


def _wrap(text: str, width: int, most: int) -> list[str]:
    """``text`` in lines of at most ``width`` characters, broken after a
    space or an operator where one is near the end of the line; past
    ``most`` lines the last ends with ``...``."""
    lines: list[str] = []
    rest = text
    while len(rest) > width:
        cut = max((k + 1 for k, c in enumerate(rest[:width]) if c in _BREAKS), default=0)
        if cut <= width // 2:  # no break late enough: cut the word
            cut = width
        lines.append(rest[:cut].rstrip())
        rest = rest[cut:].lstrip()
    lines.append(rest)
    if len(lines) > most:
        tail = " ".join(lines[most - 1 :])
        lines = [*lines[: most - 1], tail[: width - 3] + "..."]
    return lines


_BREAKS = frozenset(" *+-/,(")


def layout(picture: Picture, geo: Geometry) -> list[tuple[float, float]]:
    """Top-left corner of each node's record: a column per depth (leaves at
    the left, each node right of all its inputs), in forward order within a
    column. A computed node's oval sits just left of its record, as
    Graphviz draws micrograd's ``draw_dot``."""
    depth = [0] * len(picture.inputs)
    for i, ins in enumerate(picture.inputs):  # forward order: inputs come first
        if ins:
            depth[i] = 1 + max(depth[k] for k, _ in ins)
    # a leaf goes just left of its first consumer (``L = d * f``: f beside
    # the last ``*``, not with the leaves of the first one)
    first = [len(depth)] * len(depth)
    for i, ins in enumerate(picture.inputs):
        for k, _ in ins:
            first[k] = min(first[k], depth[i])
    for i, ins in enumerate(picture.inputs):
        if not ins and first[i] < len(depth):
            depth[i] = first[i] - 1
    rows: dict[int, int] = {}
    places = []
    for d in depth:
        row = rows.get(d, 0)
        rows[d] = row + 1
        places.append((d, row))
    height = max(rows.values())
    stride = geo.box_w + geo.gap_x + geo.oval_w + LINK
    # room above the boxes only for edges that skip a column (they cross there)
    skips = any(depth[i] - depth[k] > 1 for i, ins in enumerate(picture.inputs) for k, _ in ins)
    top = TOP if skips else 20
    out: list[tuple[float, float]] = []
    for d, row in places:
        offset = (height - rows[d]) * (geo.box_h + GAP_Y) / 2  # centre short columns
        out.append((20 + d * stride, top + offset + row * (geo.box_h + GAP_Y)))
    return out


def picture_svg(
    picture: Picture, *, prefix: str = "", digits: int = 6, scripted: bool = False
) -> str:
    """The drawing as one SVG element, styled by its own attributes (it
    reads the same inline in a page, in a notebook, or saved as a file).
    Ids start with ``prefix``, so several drawings can share a page; with
    ``scripted`` the grads are written by the stepping page's script."""
    geo = geometry(picture)
    xy = layout(picture, geo)
    box_w, box_h = geo.box_w, geo.box_h
    width = max(x for x, _ in xy) + box_w + 20
    height = max(y for _, y in xy) + box_h + 20
    parts = [
        f'<svg id="{prefix}graph" class="cr-graph" xmlns="http://www.w3.org/2000/svg" '
        f'width="{width:g}" height="{height:g}" viewBox="0 0 {width:g} {height:g}" '
        f'font-family="{FONT}" font-size="12" data-records="{len(xy)}" '
        f'data-ops="{sum(1 for op in picture.ops if op)}">',
        f'<defs><marker id="{prefix}arrow" viewBox="0 0 10 10" refX="10" refY="5" '
        f'markerWidth="{ARROW}" markerHeight="{ARROW}" markerUnits="userSpaceOnUse" '
        'orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#888"/></marker></defs>',
    ]
    arrow = f"url(#{prefix}arrow)"
    parts += _edges(picture, geo, xy, arrow)
    for i, (x, y) in enumerate(xy):
        op = picture.ops[i]
        if op:
            ox, cy = x - LINK - geo.oval_w / 2, y + box_h / 2
            parts.append(
                f'<g class="op" id="{prefix}op-{i}" data-node="{i}">'
                f'<ellipse cx="{ox:g}" cy="{cy:g}" rx="{geo.oval_w / 2:g}" '
                f'ry="{box_h / 2 - 4:g}" fill="#fff" stroke="#999" stroke-width="1.2"/>'
                f'<text x="{ox:g}" y="{cy + 4:g}" text-anchor="middle">{html.escape(op)}</text>'
                f'<path class="link" d="M{ox + geo.oval_w / 2:g},{cy:g} L{x:g},{cy:g}" '
                f'fill="none" stroke="#bbb" stroke-width="1.3" marker-end="{arrow}"/></g>'
            )
        lines = geo.title_lines[i]
        title = "".join(
            f'<text class="name" x="{x + PAD:g}" y="{y + 18 + LINE * n:g}" '
            f'font-weight="bold">{html.escape(t)}</text>'
            for n, t in enumerate(lines)
        )
        below = y + 18 + LINE * len(lines) + 3  # the data line, then the grad line
        grad = "0.0" if scripted else picture.grads[i]
        rule = f'x1="{x:g}" x2="{x + box_w:g}" stroke="#ccc"'
        parts.append(
            f'<g class="node" id="{prefix}node-{i}" data-node="{i}">'
            f"<title>{html.escape(geo.titles[i])}</title>"
            f'<rect x="{x:g}" y="{y:g}" width="{box_w:g}" height="{box_h:g}" rx="6" '
            f'fill="#fff" stroke="#999" stroke-width="1.2"/>{title}'
            f'<line class="rule" {rule} y1="{below - 13:g}" y2="{below - 13:g}"/>'
            f'<text class="data" x="{x + PAD:g}" y="{below:g}">'
            f"{html.escape(picture.data[i])}</text>"
            f'<line class="rule" {rule} y1="{below + 5:g}" y2="{below + 5:g}"/>'
            f'<text class="grad-line" x="{x + PAD:g}" y="{below + LINE + 2:g}">grad '
            f'<tspan class="grad" id="{prefix}svg-grad-{i}">{html.escape(grad)}</tspan>'
            "</text></g>"
        )
    parts.append("</svg>")
    return "".join(parts)


def _edges(picture: Picture, geo: Geometry, xy: list[tuple[float, float]], arrow: str) -> list[str]:
    """Every edge, input to the oval of the node it feeds, with its label
    (the local gradient) above its end.

    Edges into a column run straight (horizontal) over the same last
    stretch, as long as the column's longest label and the arrowhead, and
    curve only before it; an edge that skips columns rises just after its
    box, crosses above all the boxes and comes down just before that
    stretch. So no line runs through a label, and no label touches an
    arrowhead or a box.
    """
    longest: dict[float, int] = {}
    for (x, _), ins in zip(xy, picture.inputs):
        longest[x] = max([longest.get(x, 0), *(len(t) for _, t in ins)])
    a, b = geo.oval_w / 2, geo.box_h / 2 - 4  # the ovals' radii
    parts: list[str] = []
    arcs = 0
    for i, ins in enumerate(picture.inputs):
        left = xy[i][0] - LINK - geo.oval_w  # the oval's leftmost point
        xs = left - _label_room(longest[xy[i][0]])  # where the straight stretch begins

        def skips(k: int, left: float = left) -> bool:  # a column between: go over it
            return left - (xy[k][0] + geo.box_w) > geo.gap_x + 1

        # edges arriving from above take the upper slots, so they do not cross
        order = sorted(
            range(len(ins)), key=lambda j: -1.0 if skips(ins[j][0]) else xy[ins[j][0]][1]
        )
        for slot, j in enumerate(order):
            k, label = ins[j]
            x1, y1 = xy[k][0] + geo.box_w, xy[k][1] + geo.box_h / 2
            y2 = xy[i][1] + geo.box_h * (slot + 1) / (len(ins) + 1)
            dy = min(abs(y2 - xy[i][1] - geo.box_h / 2) / b, 1.0)
            x2 = left + a - a * math.sqrt(1.0 - dy * dy)  # on the oval's edge
            if skips(k):
                up, down, top = x1 + 15, xs - 15, 10 + 5 * (arcs % 4)
                arcs += 1
                route = (
                    f"Q{up:g},{y1:g} {up:g},{y1 - 10:g} L{up:g},{top + 10:g} "
                    f"Q{up:g},{top:g} {up + 10:g},{top:g} L{down - 10:g},{top:g} "
                    f"Q{down:g},{top:g} {down:g},{top + 10:g} L{down:g},{y2 - 10:g} "
                    f"Q{down:g},{y2:g} {down + 10:g},{y2:g}"
                )
            else:
                mid = (x1 + xs) / 2
                route = f"C{mid:g},{y1:g} {mid:g},{y2:g} {xs:g},{y2:g}"
            parts.append(
                f'<path class="edge" data-from="{k}" data-to="{i}" '
                f'd="M{x1:g},{y1:g} {route} L{x2:g},{y2:g}" fill="none" stroke="#bbb" '
                f'stroke-width="1.3" marker-end="{arrow}"/>'
            )
            if label:
                parts.append(
                    f'<text class="local" data-from="{k}" data-to="{i}" '
                    f'x="{x2 - ARROW - 6:g}" y="{y2 - 6:g}" text-anchor="end" font-size="10" '
                    f'fill="#555">{html.escape(label)}</text>'
                )
    return parts


def walk_picture(walk: Walk, digits: int = 6) -> Picture:
    """The stepping page's picture of a walk: each node titled by its
    formula, each edge by its local gradient."""
    nodes = range(len(walk.nodes))
    inputs = [[(k, format_number(d, digits)) for k, d in walk.locals_of(i)] for i in nodes]
    return Picture(
        titles=[formula(walk, i) if inputs[i] else walk.names[i] for i in nodes],
        data=["data " + format_number(v.data, digits) for v in walk.nodes],
        grads=["0.0"] * len(walk.nodes),
        ops=[v._op if inputs[i] else "" for i, v in enumerate(walk.nodes)],
        inputs=inputs,
        grad_chars=_grad_chars(digits),
    )


def _table(walk: Walk, digits: int, prefix: str) -> str:
    heads = ("node", "op", "data", "local gradient toward each input", "grad", "meaning")
    rows = [
        '<table class="cr-table"><thead><tr>'
        + "".join(f"<th>{h}</th>" for h in heads)
        + "</tr></thead><tbody>"
    ]
    for i in range(len(walk.nodes) - 1, -1, -1):
        node = walk.nodes[i]
        local = ", ".join(
            f"{walk.names[k]}: {format_number(d, digits)}" for k, d in walk.locals_of(i)
        )
        rows.append(
            f'<tr id="{prefix}row-{i}"><td class="name" data-label="node">'
            f"{html.escape(walk.names[i])}</td>"
            f'<td data-label="op">{html.escape(node._op)}</td>'
            f'<td class="num" data-label="data">{html.escape(format_number(node.data, digits))}'
            f'</td><td class="local" data-label="local">{html.escape(local)}</td>'
            f'<td class="num grad" id="{prefix}grad-{i}" data-label="grad" data-node="{i}" '
            f'data-grad="0">0.0</td>'
            f'<td class="meaning" id="{prefix}meaning-{i}" data-label="meaning"></td></tr>'
        )
    rows.append("</tbody></table>")
    return "".join(rows)


def page_data(walk: Walk, digits: int = 6) -> dict[str, Any]:
    """What the page's script needs, as JSON-ready data: per node its name
    and how it was computed; per update the node, the input, the local
    gradient; the text of every step; and when each grad is final."""
    names = walk.names
    root = names[walk.root]
    updates = [[u.node, u.child, u.local] for u in walk.updates]

    def fmt(x: float) -> str:
        return format_number(x, digits)

    texts = [
        "The forward pass is done: every node holds its data, every grad is 0.",
        f"Seed: {grad_of(root)} = {fmt(walk.seed)} (d{root}/d{root} = 1). "
        "Now visit the nodes in reverse topological order.",
    ]
    final = [1] * len(walk.nodes)  # the step after which each grad is complete
    for j, (u, total) in enumerate(zip(walk.updates, running_totals(walk, digits))):
        child = grad_of(names[u.child])
        texts.append(
            f"{formula(walk, u.node)}: {child} += {fmt(u.local)} * "
            f"{fmt(u.incoming)} = {fmt(u.contribution)}, so {child} = {total}"
        )
        final[u.child] = j + 2
    meanings = [
        meaning_of(names[i], root, walk.grads[i], i == walk.root, digits)
        for i in range(len(walk.nodes))
    ]
    return {
        "root": walk.root,
        "seed": walk.seed,
        "digits": digits,
        "updates": updates,
        "texts": texts,
        "final": final,
        "meanings": meanings,
    }


def _checked_walk(root: Value, op: str, max_nodes: int) -> Walk:
    if not isinstance(root, Value):
        raise TypeError(f"{op}: expected a Value, got {type(root).__name__}")
    walk = backward_walk(root)
    if len(walk.nodes) > max_nodes:
        raise GraphTooLarge(op, len(walk.nodes), max_nodes)
    return walk


def walkthrough_widget(
    root: Value,
    *,
    prefix: str,
    title: str | None = None,
    digits: int = 6,
    max_nodes: int = DEFAULT_MAX_NODES,
) -> str:
    """The stepping view of ``root`` as one HTML element, its style and
    script inside, for a notebook: several can share a page (every id
    starts with ``prefix``) and the keys step the one that has the focus.
    Read-only: no ``.grad`` changes."""
    walk = _checked_walk(root, "walkthrough", max_nodes)
    return _view(walk, prefix, title, digits, standalone=False)


def _view(walk: Walk, prefix: str, title: str | None, digits: int, standalone: bool) -> str:
    """The view's element. ``standalone``: the page's own, which steps with
    the keys wherever the focus is and keeps the step in its address
    (``#step=N``)."""
    name = walk.names[walk.root]
    title = title or f"The backward pass of {name}"
    data = page_data(walk, digits)
    data["prefix"] = prefix
    data["standalone"] = standalone
    # "<" escaped: no label can close the script element or open another
    script = json.dumps(data).replace("<", "\\u003c")
    heading = "h1" if standalone else "div"
    return (
        # JupyterLab's shortcuts leave keys inside data-lm-suppress-shortcuts alone
        f'<div class="cr-walk" id="{prefix}walk" tabindex="0" data-lm-suppress-shortcuts="true" '
        f'aria-label="{html.escape(title)}: the arrow keys step">'
        + ("" if standalone else f"<style>{_STYLE}</style>")
        + f'<{heading} class="cr-title">{html.escape(title)}</{heading}>'
        f'<div class="cr-controls"><button id="{prefix}first" title="Home">&laquo; start</button>'
        f'<button id="{prefix}prev" title="Left arrow">&#x25C0; back</button>'
        f'<button id="{prefix}next" title="Right arrow">forward &#x25B6;</button>'
        f'<button id="{prefix}last" title="End">end &raquo;</button>'
        f'<span class="cr-counter" id="{prefix}counter" data-step="0"></span></div>'
        f'<p class="cr-step" id="{prefix}step-text"></p>'
        f'<div class="cr-drawing" id="{prefix}drawing">'
        f"{picture_svg(walk_picture(walk, digits), prefix=prefix, scripted=True)}</div>"
        f"{_table(walk, digits, prefix)}"
        '<p class="cr-note">Keys: &#x2190; &#x2192; step, Home/End jump. Each step adds '
        "<code>local * node.grad</code> into one input, in reverse topological order, "
        "exactly as <code>backward()</code> does.</p>"
        f"<script>(function (WALK) {{{_SCRIPT}}})({script});</script></div>"
    )


def walkthrough_html(
    root: Value,
    *,
    title: str | None = None,
    digits: int = 6,
    max_nodes: int = DEFAULT_MAX_NODES,
) -> str:
    """The page for ``root`` as HTML text. Read-only: no ``.grad`` changes.

    >>> from chainrule.explainer.formula import evaluate
    >>> page = walkthrough_html(evaluate("c = a*b; d = c + a; e = d**2", {"a": 2, "b": 3}))
    >>> page.startswith("<!DOCTYPE html>") and "<script src" not in page
    True
    """
    walk = _checked_walk(root, "walkthrough_html", max_nodes)
    title = title or f"The backward pass of {walk.names[walk.root]}"
    body = _view(walk, "", title, digits, standalone=True)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{html.escape(title)}</title><style>{_PAGE_STYLE}{_STYLE}</style></head>"
        f"<body>{body}</body></html>\n"
    )


def write_walkthrough(
    root: Value,
    path: str | os.PathLike[str],
    *,
    digits: int = 6,
    title: str | None = None,
    max_nodes: int = DEFAULT_MAX_NODES,
) -> Path:
    """Write the page for ``root`` to ``path`` (UTF-8, atomically: a full
    disk leaves no empty page) and return the path."""
    path = Path(path)
    page = walkthrough_html(root, digits=digits, title=title, max_nodes=max_nodes)
    replace_file(path, page.encode("utf-8"))
    return path


_PAGE_STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 1.5em;
  color: #222; background: #fff; }
@media (max-width: 600px) { body { margin: .6em; } }
"""

# Every rule under .cr-walk: in a notebook the view shares the page with others.
_STYLE = """
.cr-walk { outline: none; max-width: 100%; color: #222; }
.cr-walk:focus-visible { box-shadow: 0 0 0 2px #4a6cd4; }
.cr-walk .cr-title { font-size: 1.3em; font-weight: bold; margin: .3em 0 .5em; }
.cr-walk .cr-controls { display: flex; flex-wrap: wrap; gap: .4em; align-items: center; }
.cr-walk .cr-controls button { font-size: 1em; padding: .3em .8em; }
.cr-walk .cr-counter { margin-left: .6em; color: #555; }
.cr-walk .cr-step { font-family: ui-monospace, Menlo, Consolas, monospace; background: #f4f4f8;
  padding: .6em; border-left: 4px solid #4a6cd4; min-height: 2.8em; margin: .6em 0;
  overflow-wrap: anywhere; }
.cr-walk .cr-drawing { overflow: auto; max-height: 55vh; max-width: 100%;
  border: 1px solid #eee; }
.cr-walk .cr-graph { display: block; max-width: none; }  /* natural size: it pans */
.cr-walk .node.done rect { fill: #eef5ee; }
.cr-walk .node.active rect, .cr-walk .op.active ellipse { fill: #fff1c9; stroke: #d49a00;
  stroke-width: 3; }
.cr-walk .node.target rect { fill: #dde7ff; stroke: #4a6cd4; stroke-width: 3; }
.cr-walk .edge.flow { stroke: #4a6cd4; stroke-width: 3; }
.cr-walk table { border-collapse: collapse; margin-top: 1em; }
.cr-walk .cr-table th, .cr-walk .cr-table td { border-bottom: 1px solid #ddd;
  padding: .3em .7em; text-align: left; }
.cr-walk .cr-table td.num { text-align: right;
  font-family: ui-monospace, Menlo, Consolas, monospace; }
.cr-walk tr.active { background: #fff1c9; } .cr-walk tr.target { background: #dde7ff; }
.cr-walk td.changed { font-weight: bold; color: #1d3fa8; }
.cr-walk .meaning { color: #444; font-size: .92em; }
.cr-walk .cr-note { color: #666; font-size: .9em; }
@media (max-width: 600px) {
  .cr-walk table, .cr-walk tbody, .cr-walk tr, .cr-walk td { display: block; width: auto; }
  .cr-walk thead { display: none; }
  .cr-walk tr { border: 1px solid #ddd; margin: .4em 0; padding: .2em 0; }
  .cr-walk td { border: none; padding: .1em .5em; text-align: left !important;
    overflow-wrap: anywhere; }
  .cr-walk td:empty { display: none; }
  .cr-walk td::before { content: attr(data-label) ": "; color: #777;
    font-family: system-ui, sans-serif; font-weight: normal; }
  .cr-walk td.name::before { content: ""; }
  .cr-walk td.name { font-weight: bold; }
}
"""

# The page performs the pass itself: grad[child] += local * grad[node].
_SCRIPT = """
  const P = WALK.prefix, $ = (id) => document.getElementById(P + id);
  const root = $("walk"), drawing = $("drawing");
  const n = WALK.meanings.length, steps = WALK.updates.length + 1;
  const DIGITS = WALK.digits;
  let step = 0, grad = new Array(n).fill(0), seen = new Array(n).fill(false);
  function fmt(x) {
    if (Number.isNaN(x)) return "nan";
    if (!Number.isFinite(x)) return x > 0 ? "inf" : "-inf";
    let t = String(x);
    if (Number.isInteger(x) && !t.includes("e")) t += ".0";
    if (t.length <= DIGITS + 3) return t;
    t = x.toPrecision(DIGITS);
    let [m, e] = t.split("e");
    if (m.includes(".")) m = m.replace(/0+$/, "").replace(/\\.$/, "");
    if (e === undefined) return m.includes(".") ? m : m + ".0";
    return m + "e" + (e[0] === "-" ? "-" : "+") + e.replace(/^[-+]/, "").padStart(2, "0");
  }
  function run(k) {  // the state after k steps: 0 = before the seed
    grad.fill(0); seen.fill(false);
    if (k >= 1) { grad[WALK.root] = WALK.seed; seen[WALK.root] = true; }
    for (let j = 0; j < k - 1; j++) {
      const [node, child, local] = WALK.updates[j];
      const c = local * grad[node];
      grad[child] = seen[child] ? grad[child] + c : c;
      seen[child] = true;
    }
  }
  function follow(els) {  // pan the drawing (never the page) to keep these in view
    const c = drawing.getBoundingClientRect(), w = drawing.clientWidth, h = drawing.clientHeight;
    const boxes = els.filter((e) => e).map((e) => e.getBoundingClientRect());
    if (!boxes.length) return;
    const span = (lo, hi, size) => {  // all of them if they fit, else the first (the active)
      const a = Math.min(...boxes.map(lo)), b = Math.max(...boxes.map(hi));
      return b - a <= size ? [a, b] : [lo(boxes[0]), hi(boxes[0])];
    };
    const [l, r] = span((b) => b.left, (b) => b.right, w);
    const [t, b] = span((b) => b.top, (b) => b.bottom, h);
    if (l < c.left || r > c.left + w) drawing.scrollLeft += (l + r) / 2 - (c.left + w / 2);
    if (t < c.top || b > c.top + h) drawing.scrollTop += (t + b) / 2 - (c.top + h / 2);
  }
  function show(k) {
    step = Math.max(0, Math.min(steps, k));
    run(step);
    const u = step >= 2 ? WALK.updates[step - 2] : null;
    let focus = [];
    for (let i = 0; i < n; i++) {
      const cell = $("grad-" + i);
      cell.textContent = fmt(grad[i]);
      cell.dataset.grad = String(grad[i]);
      cell.classList.toggle("changed", u !== null && u[1] === i);
      $("svg-grad-" + i).textContent = fmt(grad[i]);
      const done = step >= WALK.final[i];
      $("meaning-" + i).textContent = done ? WALK.meanings[i] : "";
      const active = u !== null ? u[0] === i : step === 1 && i === WALK.root;
      const target = u !== null && u[1] === i;
      for (const el of [$("node-" + i), $("row-" + i), $("op-" + i)]) {
        if (!el) continue;
        el.classList.toggle("active", active);
        el.classList.toggle("target", target);
        el.classList.toggle("done", done && !active && !target);
      }
      if (active) focus = [$("node-" + i), $("op-" + i), ...focus];
      if (target) focus.push($("node-" + i));
    }
    for (const e of root.querySelectorAll(".edge")) {
      e.classList.toggle("flow", u !== null && +e.dataset.from === u[1] && +e.dataset.to === u[0]);
    }
    $("step-text").textContent = WALK.texts[step];
    const counter = $("counter");
    counter.textContent = "step " + step + " of " + steps;
    counter.dataset.step = String(step);
    counter.dataset.steps = String(steps);
    $("first").disabled = $("prev").disabled = step === 0;
    $("next").disabled = $("last").disabled = step === steps;
    follow(focus);
    if (WALK.standalone && location.hash !== "#step=" + step) {
      history.replaceState(null, "", "#step=" + step);
    }
  }
  $("first").onclick = () => show(0);
  $("prev").onclick = () => show(step - 1);
  $("next").onclick = () => show(step + 1);
  $("last").onclick = () => show(steps);
  // Handled keys step and do nothing else: no scrolling, no notebook shortcut.
  (WALK.standalone ? document : root).addEventListener("keydown", (e) => {
    if (e.altKey || e.ctrlKey || e.metaKey) return;
    const to = {ArrowRight: step + 1, ArrowLeft: step - 1, Home: 0, End: steps}[e.key];
    if (to === undefined) return;
    e.preventDefault();
    e.stopPropagation();
    show(to);
  });
  const at = () => /step=(\\d+)/.exec(location.hash);
  if (WALK.standalone) {
    window.addEventListener("hashchange", () => { const m = at(); if (m) show(+m[1]); });
  }
  const m = WALK.standalone ? at() : null;
  show(m ? parseInt(m[1], 10) : 0);
"""
