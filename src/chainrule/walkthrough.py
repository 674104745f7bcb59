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
from pathlib import Path
from typing import Any

from .engine import Value
from .explain import Walk, backward_walk, formula, meaning_of, running_totals
from .sealed import replace_file
from .viz import DEFAULT_MAX_NODES, GraphTooLarge, format_number

BOX_W, BOX_H = 150, 64  # a node's box in the drawing, in pixels
GAP_X, GAP_Y = 70, 18  # between columns and between boxes in a column
TOP = 46  # room above the boxes for edges that skip a column


def layout(walk: Walk) -> list[tuple[float, float]]:
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
        offset = (height - rows[d]) * (BOX_H + GAP_Y) / 2  # centre short columns
        out.append((20 + d * (BOX_W + GAP_X), TOP + offset + row * (BOX_H + GAP_Y)))
    return out


def _svg(walk: Walk, digits: int) -> str:
    xy = layout(walk)
    width = max(x for x, _ in xy) + BOX_W + 20
    height = max(y for _, y in xy) + BOX_H + 20
    parts = [
        f'<svg id="graph" xmlns="http://www.w3.org/2000/svg" width="{width:g}" '
        f'height="{height:g}" viewBox="0 0 {width:g} {height:g}">',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="8" '
        'markerHeight="8" markerUnits="userSpaceOnUse" orient="auto">'
        '<path d="M0,0 L10,5 L0,10 z" fill="#888"/></marker></defs>',
    ]
    for i in range(len(walk.nodes)):
        ins = walk.locals_of(i)
        x2 = xy[i][0]

        def arcs(k: int, x2: float = x2) -> bool:  # skips a column: arcs over the boxes between
            return x2 - (xy[k][0] + BOX_W) > GAP_X + 1

        # edges arriving from above take the upper slots, so they do not cross
        slots = sorted(ins, key=lambda kd: -1.0 if arcs(kd[0]) else xy[kd[0]][1])
        for slot, (k, d) in enumerate(slots):
            x1, y1 = xy[k][0] + BOX_W, xy[k][1] + BOX_H / 2
            y2 = xy[i][1] + BOX_H * (slot + 1) / (len(ins) + 1)
            if arcs(k):
                top = TOP - 30
                curve = f"C{x1 + GAP_X:g},{top:g} {x2 - GAP_X:g},{top:g}"
            else:
                mid = (x1 + x2) / 2
                curve = f"C{mid:g},{y1:g} {mid:g},{y2:g}"
            parts.append(
                f'<path class="edge" data-from="{k}" data-to="{i}" '
                f'd="M{x1:g},{y1:g} {curve} {x2:g},{y2:g}" marker-end="url(#arrow)"/>'
            )
            parts.append(
                f'<text class="local" x="{x2 - 4:g}" y="{y2 - 4:g}" text-anchor="end">'
                f"{html.escape(format_number(d, digits))}</text>"
            )
    for i, node in enumerate(walk.nodes):
        x, y = xy[i]
        head = formula(walk, i) if node._prev else walk.names[i]
        parts.append(
            f'<g class="node" id="node-{i}" data-node="{i}">'
            f'<rect x="{x:g}" y="{y:g}" width="{BOX_W}" height="{BOX_H}" rx="6"/>'
            f'<text class="name" x="{x + 8:g}" y="{y + 18:g}">'
            f"{html.escape(_short(head, 22))}</text>"
            f'<text x="{x + 8:g}" y="{y + 37:g}">data '
            f"{html.escape(format_number(node.data, digits))}</text>"
            f'<text x="{x + 8:g}" y="{y + 55:g}">grad <tspan class="grad" id="svg-grad-{i}">0.0'
            "</tspan></text></g>"
        )
    parts.append("</svg>")
    return "".join(parts)


def _short(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


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
        f"Seed: {root}.grad = {fmt(walk.seed)} (d{root}/d{root} = 1). "
        "Now visit the nodes in reverse topological order.",
    ]
    final = [1] * len(walk.nodes)  # the step after which each grad is complete
    for j, (u, total) in enumerate(zip(walk.updates, running_totals(walk, digits))):
        texts.append(
            f"{formula(walk, u.node)}: {names[u.child]}.grad += {fmt(u.local)} * "
            f"{fmt(u.incoming)} = {fmt(u.contribution)}, so {names[u.child]}.grad = {total}"
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

    >>> from chainrule.expr import evaluate
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
.local { fill: #777; font-size: 10px; }
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
