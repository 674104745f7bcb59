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
SLOT = 20  # between the points where a box's incoming edges end
ARROW = 8  # the arrowhead's length
TOP = 46  # room above the boxes for edges that skip columns


@dataclass(frozen=True)
class Geometry:
    """The drawing's sizes for one page, from the longest texts it shows."""

    box_w: float
    box_h: float
    gap_x: float
    title_lines: list[list[str]]  # per node, the title's lines as drawn
    titles: list[str]  # per node, the whole title (shown on hover)


def _grad_chars(digits: int) -> int:
    """The longest grad the page's script can write: sign, digits, the
    point and an exponent (``-1.23457e-305``), or ``-inf``."""
    return digits + 8


def geometry(walk: Walk, digits: int) -> Geometry:
    """Box and gap sizes that hold every title, number and edge label."""
    nodes = range(len(walk.nodes))
    inputs = [walk.locals_of(i) for i in nodes]
    titles = [formula(walk, i) if inputs[i] else walk.names[i] for i in nodes]
    numbers = max(len(format_number(v.data, digits)) for v in walk.nodes)
    widest = max(max(len(t) for t in titles), 5 + numbers, 5 + _grad_chars(digits))
    box_w = min(max(MIN_BOX_W, 2 * PAD + CHAR_W[12] * widest), MAX_BOX_W)
    per_line = int((box_w - 2 * PAD) // CHAR_W[12])
    lines = [_wrap(t, per_line, TITLE_LINES) for t in titles]
    n = max(len(x) for x in lines)
    box_h = max(LINE * (n + 2) + 16, SLOT * (max(len(x) for x in inputs) + 1))
    labels = [len(format_number(d, digits)) for x in inputs for _, d in x]
    gap_x = max(MIN_GAP_X, _label_room(max(labels, default=0)) + 30)  # 30: room for the curve
    return Geometry(box_w, box_h, gap_x, lines, titles)


def _label_room(chars: int) -> float:
    """How far before a box an edge runs straight: its label's width, the
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


def layout(walk: Walk, geo: Geometry) -> list[tuple[float, float]]:
    """Top-left corner of each node's box: a column per depth (leaves at
    the left, each node right of all its inputs), in forward order within
    a column."""
    depth = [0] * len(walk.nodes)
    for i in range(len(walk.nodes)):  # forward order: inputs come first
        ins = [k for k, _ in walk.locals_of(i)]
        if ins:
            depth[i] = 1 + max(depth[k] for k in ins)
    rows: dict[int, int] = {}
    places = []
    for d in depth:
        row = rows.get(d, 0)
        rows[d] = row + 1
        places.append((d, row))
    height = max(rows.values())
    out: list[tuple[float, float]] = []
    for d, row in places:
        offset = (height - rows[d]) * (geo.box_h + GAP_Y) / 2  # centre short columns
        out.append((20 + d * (geo.box_w + geo.gap_x), TOP + offset + row * (geo.box_h + GAP_Y)))
    return out


def _svg(walk: Walk, digits: int) -> str:
    geo = geometry(walk, digits)
    xy = layout(walk, geo)
    box_w, box_h = geo.box_w, geo.box_h
    width = max(x for x, _ in xy) + box_w + 20
    height = max(y for _, y in xy) + box_h + 20
    parts = [
        f'<svg id="graph" xmlns="http://www.w3.org/2000/svg" width="{width:g}" '
        f'height="{height:g}" viewBox="0 0 {width:g} {height:g}">',
        f'<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" '
        f'markerWidth="{ARROW}" markerHeight="{ARROW}" markerUnits="userSpaceOnUse" '
        'orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#888"/></marker></defs>',
    ]
    parts += _edges(walk, geo, xy, digits)
    for i, node in enumerate(walk.nodes):
        x, y = xy[i]
        lines = geo.title_lines[i]
        title = "".join(
            f'<text class="name" x="{x + PAD:g}" y="{y + 18 + LINE * n:g}">{html.escape(t)}</text>'
            for n, t in enumerate(lines)
        )
        below = y + 18 + LINE * len(lines) + 3  # the data line, then the grad line
        parts.append(
            f'<g class="node" id="node-{i}" data-node="{i}">'
            f"<title>{html.escape(geo.titles[i])}</title>"
            f'<rect x="{x:g}" y="{y:g}" width="{box_w:g}" height="{box_h:g}" rx="6"/>'
            f"{title}"
            f'<text class="data" x="{x + PAD:g}" y="{below:g}">data '
            f"{html.escape(format_number(node.data, digits))}</text>"
            f'<text class="grad-line" x="{x + PAD:g}" y="{below + LINE + 2:g}">grad '
            f'<tspan class="grad" id="svg-grad-{i}">0.0</tspan></text></g>'
        )
    parts.append("</svg>")
    return "".join(parts)


def _edges(walk: Walk, geo: Geometry, xy: list[tuple[float, float]], digits: int) -> list[str]:
    """Every edge, input to node, with its local gradient above its end.

    Edges into a column run straight (horizontal) over the same last
    stretch, as long as the column's longest label and the arrowhead, and
    curve only before it; an edge that skips columns rises just after its
    box, crosses above all the boxes and comes down just before that
    stretch. So no line runs through a label, and no label touches an
    arrowhead or a box.
    """
    inputs = [walk.locals_of(i) for i in range(len(walk.nodes))]
    labels = [[format_number(d, digits) for _, d in ins] for ins in inputs]
    longest: dict[float, int] = {}
    for (x, _), texts in zip(xy, labels):
        longest[x] = max([longest.get(x, 0), *(len(t) for t in texts)])
    parts: list[str] = []
    arcs = 0
    for i, ins in enumerate(inputs):
        x2 = xy[i][0]
        xs = x2 - _label_room(longest[x2])  # where the straight stretch begins

        def skips(k: int, x2: float = x2) -> bool:  # a column between: go over it
            return x2 - (xy[k][0] + geo.box_w) > geo.gap_x + 1

        # edges arriving from above take the upper slots, so they do not cross
        order = sorted(
            range(len(ins)), key=lambda j: -1.0 if skips(ins[j][0]) else xy[ins[j][0]][1]
        )
        for slot, j in enumerate(order):
            k = ins[j][0]
            x1, y1 = xy[k][0] + geo.box_w, xy[k][1] + geo.box_h / 2
            y2 = xy[i][1] + geo.box_h * (slot + 1) / (len(ins) + 1)
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
                f'd="M{x1:g},{y1:g} {route} L{x2:g},{y2:g}" marker-end="url(#arrow)"/>'
            )
            parts.append(
                f'<text class="local" data-from="{k}" data-to="{i}" x="{x2 - ARROW - 6:g}" '
                f'y="{y2 - 6:g}" text-anchor="end">{html.escape(labels[i][j])}</text>'
            )
    return parts


def _table(walk: Walk, digits: int) -> str:
    rows = [
        '<table id="table"><thead><tr><th>node</th><th>op</th><th>data</th>'
        "<th>local gradient toward each input</th><th>grad</th><th>meaning</th></tr></thead><tbody>"
    ]
    for i in range(len(walk.nodes) - 1, -1, -1):
        node = walk.nodes[i]
        local = ", ".join(
            f"{walk.names[k]}: {format_number(d, digits)}" for k, d in walk.locals_of(i)
        )
        rows.append(
            f'<tr id="row-{i}"><td class="name">{html.escape(walk.names[i])}</td>'
            f'<td>{html.escape(node._op)}</td><td class="num">'
            f"{html.escape(format_number(node.data, digits))}</td><td>{html.escape(local)}</td>"
            f'<td class="num grad" id="grad-{i}" data-node="{i}" data-grad="0">0.0</td>'
            f'<td class="meaning" id="meaning-{i}"></td></tr>'
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
    if not isinstance(root, Value):
        raise TypeError(f"walkthrough_html: expected a Value, got {type(root).__name__}")
    walk = backward_walk(root)
    if len(walk.nodes) > max_nodes:
        raise GraphTooLarge("walkthrough_html", len(walk.nodes), max_nodes)
    name = walk.names[walk.root]
    title = title or f"The backward pass of {name}"
    # "<" escaped: no label can close the script element or open another
    data = json.dumps(page_data(walk, digits)).replace("<", "\\u003c")
    body = (
        f"<h1>{html.escape(title)}</h1>"
        '<div id="controls"><button id="first" title="Home">&laquo; start</button>'
        '<button id="prev" title="Left arrow">&#x25C0; back</button>'
        '<button id="next" title="Right arrow">forward &#x25B6;</button>'
        '<button id="last" title="End">end &raquo;</button>'
        '<span id="counter" data-step="0"></span></div>'
        '<p id="step-text"></p>'
        f'<div id="drawing">{_svg(walk, digits)}</div>'
        f"{_table(walk, digits)}"
        '<p class="note">Keys: &#x2190; &#x2192; step, Home/End jump. The page adds '
        "<code>local * node.grad</code> into each input, in reverse topological order, "
        "exactly as <code>backward()</code> does.</p>"
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head>"
        f"<body>{body}<script>const WALK = {data};\n{_SCRIPT}</script></body></html>\n"
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


_STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 1.5em;
  color: #222; background: #fff; }
h1 { font-size: 1.3em; }
#controls button { font-size: 1em; margin-right: .4em; padding: .3em .8em; }
#counter { margin-left: 1em; color: #555; }
#step-text { font-family: ui-monospace, Menlo, Consolas, monospace; background: #f4f4f8;
  padding: .6em; border-left: 4px solid #4a6cd4; min-height: 1.4em; }
#drawing { overflow-x: auto; }
svg text { font-family: ui-monospace, Menlo, Consolas, monospace; font-size: 12px; }
svg .name { font-weight: bold; }
.node rect { fill: #fff; stroke: #999; stroke-width: 1.2; }
.node.done rect { fill: #eef5ee; }
.node.active rect { fill: #fff1c9; stroke: #d49a00; stroke-width: 3; }
.node.target rect { fill: #dde7ff; stroke: #4a6cd4; stroke-width: 3; }
.edge { fill: none; stroke: #bbb; stroke-width: 1.3; }
.edge.flow { stroke: #4a6cd4; stroke-width: 3; }
.local { fill: #555; font-size: 10px; }
table { border-collapse: collapse; margin-top: 1em; }
th, td { border-bottom: 1px solid #ddd; padding: .3em .7em; text-align: left; }
td.num { text-align: right; font-family: ui-monospace, Menlo, Consolas, monospace; }
tr.active { background: #fff1c9; } tr.target { background: #dde7ff; }
td.changed { font-weight: bold; color: #1d3fa8; }
.meaning { color: #444; font-size: .92em; }
.note { color: #666; font-size: .9em; }
"""

# The page performs the pass itself: grad[child] += local * grad[node].
_SCRIPT = """
(function () {
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
  function show(k) {
    step = Math.max(0, Math.min(steps, k));
    run(step);
    const u = step >= 2 ? WALK.updates[step - 2] : null;
    for (let i = 0; i < n; i++) {
      const cell = document.getElementById("grad-" + i);
      cell.textContent = fmt(grad[i]);
      cell.dataset.grad = String(grad[i]);
      cell.classList.toggle("changed", u !== null && u[1] === i);
      document.getElementById("svg-grad-" + i).textContent = fmt(grad[i]);
      const done = step >= WALK.final[i];
      document.getElementById("meaning-" + i).textContent = done ? WALK.meanings[i] : "";
      const active = u !== null ? u[0] === i : step === 1 && i === WALK.root;
      const target = u !== null && u[1] === i;
      const els = [document.getElementById("node-" + i), document.getElementById("row-" + i)];
      for (const el of els) {
        el.classList.toggle("active", active);
        el.classList.toggle("target", target);
        el.classList.toggle("done", done && !active && !target);
      }
    }
    for (const e of document.querySelectorAll(".edge")) {
      e.classList.toggle("flow", u !== null && +e.dataset.from === u[1] && +e.dataset.to === u[0]);
    }
    document.getElementById("step-text").textContent = WALK.texts[step];
    const counter = document.getElementById("counter");
    counter.textContent = "step " + step + " of " + steps;
    counter.dataset.step = String(step);
    counter.dataset.steps = String(steps);
    const button = (id) => document.getElementById(id);
    button("first").disabled = button("prev").disabled = step === 0;
    button("next").disabled = button("last").disabled = step === steps;
  }
  document.getElementById("first").onclick = () => show(0);
  document.getElementById("prev").onclick = () => show(step - 1);
  document.getElementById("next").onclick = () => show(step + 1);
  document.getElementById("last").onclick = () => show(steps);
  document.addEventListener("keydown", (e) => {
    if (e.key === "ArrowRight") show(step + 1);
    else if (e.key === "ArrowLeft") show(step - 1);
    else if (e.key === "Home") show(0);
    else if (e.key === "End") show(steps);
  });
  const m = /step=(\\d+)/.exec(window.location.hash);
  show(m ? parseInt(m[1], 10) : 0);
})();
"""
