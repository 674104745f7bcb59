"""The playground: chainrule running in the reader's browser (Pyodide, the
WebAssembly build of CPython), a text box of Python over Values, and the
stepping view of whatever the last line computes.

:func:`playground_html` is the page: it loads Pyodide from ``pyodide_base``
(its CDN on the published site, a local copy of the npm package in the
tests), installs chainrule's pure wheel from ``wheel`` and calls
:func:`run` on the reader's code. Nothing else is fetched.
"""

from __future__ import annotations

import ast
import contextlib
import html
import io
import json
import traceback
from typing import Any

from ..value.engine import Value
from .draw import _is_tensor
from .notebook import graph_html, walkthrough
from .table import explain

#: What the page shows first: micrograd's lecture, its first expression.
EXAMPLE = """\
a = Value(2.0, label='a')
b = Value(-3.0, label='b')
c = Value(10.0, label='c')
f = Value(-2.0, label='f')
L = (a*b + c) * f
L.label = 'L'
L
"""

#: Pyodide's files on the published site (the npm package, from its CDN).
PYODIDE_CDN = "https://cdn.jsdelivr.net/npm/pyodide@314.0.7/"


def run(source: str) -> dict[str, Any]:
    """Run ``source`` as a notebook cell does: its last line, when an
    expression, is the result. Returns what the page shows: ``html`` (the
    stepping view of a Value, the drawing of a Tensor), ``text`` (anything
    else, or the table), ``printed`` (what it printed) and ``error`` (the
    error as Python prints it, without this function's frame)."""
    namespace: dict[str, Any] = {"__name__": "__main__"}
    exec("from chainrule import *", namespace)
    printed = io.StringIO()
    result: Any = None
    try:
        with contextlib.redirect_stdout(printed):
            tree = ast.parse(source, "<playground>", "exec")
            last = tree.body[-1] if tree.body else None
            if isinstance(last, ast.Expr):
                tree.body.pop()
            exec(compile(tree, "<playground>", "exec"), namespace)
            if isinstance(last, ast.Expr):
                expression = ast.Expression(last.value)
                result = eval(compile(expression, "<playground>", "eval"), namespace)
    except SyntaxError as e:
        return _answer(printed, error="".join(traceback.format_exception_only(type(e), e)))
    except Exception as e:  # the reader's error, shown as Python shows it
        tb = e.__traceback__.tb_next if e.__traceback__ else None
        return _answer(printed, error="".join(traceback.format_exception(type(e), e, tb)))
    if isinstance(result, Value):
        return _answer(printed, html=walkthrough(result)._repr_html_(), text=explain(result))
    if _is_tensor(result):
        return _answer(printed, html=graph_html(result), text=explain(result))
    return _answer(printed, text="" if result is None else repr(result))


def _answer(printed: io.StringIO, **parts: str) -> dict[str, Any]:
    return {"html": "", "text": "", "error": "", "printed": printed.getvalue(), **parts}


def playground_html(
    *, pyodide_base: str = PYODIDE_CDN, wheel: str, title: str = "chainrule playground"
) -> str:
    """The playground page. ``pyodide_base`` ends with ``/``: the directory
    that holds ``pyodide.js``; ``wheel`` is the address of chainrule's wheel
    (relative to the page)."""
    config = json.dumps({"base": pyodide_base, "wheel": wheel, "module": __name__})
    config = config.replace("<", "\\u003c")  # no text can close the script element
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{html.escape(title)}</title><style>{_STYLE}</style></head><body>"
        f"<h1>{html.escape(title)}</h1>"
        "<p>Python over chainrule's <code>Value</code>, run in this page by "
        "<a href='https://pyodide.org'>Pyodide</a>: nothing to install. The last line's "
        "Value is drawn, and its backward pass stepped through (click it, then the arrow "
        "keys, or the buttons).</p>"
        f'<textarea id="code" spellcheck="false" rows="9">{html.escape(EXAMPLE)}</textarea>'
        '<div class="bar"><button id="run" disabled>Run</button>'
        '<span id="status" data-state="loading">Loading Python (Pyodide)...</span></div>'
        '<pre id="printed" hidden></pre><pre id="error" hidden></pre>'
        '<div id="result"></div><pre id="table" hidden></pre>'
        f'<script src="{html.escape(pyodide_base)}pyodide.js"></script>'
        f"<script>const CONFIG = {config};\n{_SCRIPT}</script>"
        "</body></html>\n"
    )


_STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 1.5em;
  color: #222; max-width: 70em; }
@media (max-width: 600px) { body { margin: .6em; } }
#code { width: 100%; box-sizing: border-box; font: 14px ui-monospace, Menlo, Consolas, monospace;
  padding: .5em; }
.bar { display: flex; gap: 1em; align-items: center; margin: .5em 0; flex-wrap: wrap; }
#run { font-size: 1em; padding: .3em 1.2em; }
#status { color: #555; }
#error { color: #a00; background: #fff0f0; padding: .6em; white-space: pre-wrap; }
#printed, #table { background: #f6f6f6; padding: .6em; overflow-x: auto; }
"""

_SCRIPT = """
(async function () {
  const t0 = performance.now();
  const status = document.getElementById("status"), button = document.getElementById("run");
  const show = (id, text) => { const el = document.getElementById(id);
    el.textContent = text; el.hidden = !text; };
  let module;
  try {
    const pyodide = await loadPyodide({indexURL: CONFIG.base});
    const wheel = await fetch(CONFIG.wheel);
    if (!wheel.ok) throw new Error("cannot load " + CONFIG.wheel + ": " + wheel.status);
    pyodide.unpackArchive(await wheel.arrayBuffer(), "wheel");
    module = pyodide.pyimport(CONFIG.module);
  } catch (e) {
    status.dataset.state = "failed";
    status.textContent = "Python could not start: " + e;
    return;
  }
  const seconds = (performance.now() - t0) / 1000;
  status.dataset.state = "ready";
  status.dataset.seconds = seconds.toFixed(2);
  status.textContent = "Ready (" + seconds.toFixed(1) + " s). Ctrl+Enter runs.";
  function run() {
    const answer = module.run(document.getElementById("code").value);
    const r = answer.toJs({dict_converter: Object.fromEntries});
    answer.destroy();
    show("printed", r.printed);
    show("error", r.error);
    show("table", r.text);
    const result = document.getElementById("result");
    result.innerHTML = r.html;
    for (const old of result.querySelectorAll("script")) {  // innerHTML runs no script
      const s = document.createElement("script");
      s.textContent = old.textContent;
      old.replaceWith(s);
    }
    const view = result.querySelector(".cr-walk");
    if (view) view.focus();
    status.dataset.runs = String(+(status.dataset.runs || 0) + 1);
  }
  button.onclick = run;
  button.disabled = false;
  document.getElementById("code").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) { e.preventDefault(); run(); }
  });
})();
"""
