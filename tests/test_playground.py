"""The playground page: chainrule in the browser (Pyodide), served from a
local directory with the npm package ``pyodide``'s files and no network:
typed code runs, its graph draws, the step-through reaches the last step
with ``chainrule explain``'s numbers, and a syntax error shows as Python's
message. The time from opening the page to ready is printed."""

from __future__ import annotations

import functools
import http.server
import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from chainrule import explain
from chainrule.explainer.formula import evaluate
from chainrule.explainer.playground import EXAMPLE, run
from chainrule.explainer.table import backward_walk
from chainrule.explainer.walkthrough import page_data

ROOT = Path(__file__).resolve().parent.parent
VERSION = "314.0.7"  # as ../shared/py314, which installs it (npm) into its cache


def _pyodide() -> Path | None:
    """The npm package's files: $CHAINRULE_PYODIDE_DIR, or py314's cache."""
    cache = Path(os.environ.get("PY314_CACHE", Path.home() / ".cache" / "py314"))
    for d in (os.environ.get("CHAINRULE_PYODIDE_DIR"), cache / "node_modules" / "pyodide"):
        if d and (Path(d) / "pyodide.js").exists():
            return Path(d)
    return None


def test_run_answers_as_a_notebook_cell() -> None:
    answer = run(EXAMPLE)
    assert answer["error"] == "" and 'class="cr-walk"' in answer["html"]
    assert answer["text"].splitlines()[2].startswith("L     *   -8.0")
    assert run("print(1 + 1)\n2 ** 10") == {
        "html": "",
        "text": "1024",
        "error": "",
        "printed": "2\n",
    }
    assert run("a = Value(2.0")["error"].endswith("SyntaxError: '(' was never closed\n")
    error = run("x = Value(1.0)\nmath.sin(x)")["error"]
    assert error == (
        "Traceback (most recent call last):\n"
        '  File "<playground>", line 2, in <module>\n'
        "NameError: name 'math' is not defined\n"
    )


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The playground as the site build writes it, with Pyodide's files
    from the npm package, served over HTTP on localhost."""
    pyodide = _pyodide()
    if pyodide is None:
        message = f"the npm package pyodide@{VERSION} is not installed (../shared/py314/py314 does)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    sys.path.insert(0, str(ROOT / "docs" / "_ext"))
    try:
        from playground import write_playground
    finally:
        sys.path.remove(str(ROOT / "docs" / "_ext"))
    root = tmp_path_factory.mktemp("site")
    (root / "pyodide").symlink_to(pyodide)
    write_playground(root / "playground", "../pyodide/")
    handler = functools.partial(QuietHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/playground/index.html"
    finally:
        server.shutdown()
        server.server_close()


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    extensions_map: ClassVar[dict[str, str]] = {
        **http.server.SimpleHTTPRequestHandler.extensions_map,
        ".wasm": "application/wasm",
        ".mjs": "text/javascript",
    }

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass


def _wait(browser: Any, script: str, seconds: float) -> Any:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        value = browser.execute_script(script)
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for: {script}")


CODE = """\
a = Value(2.0, label='a')
b = Value(3.0, label='b')
c = a*b; c.label = 'c'
d = c + a; d.label = 'd'
e = d**2; e.label = 'e'
e
"""


def test_the_playground_runs_chainrule_in_the_browser(
    browser: Any, site: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from selenium.webdriver.common.keys import Keys

    started = time.monotonic()
    browser.get(site)
    state = _wait(
        browser,
        "const s = document.getElementById('status').dataset.state;"
        "return s === 'loading' ? null : s;",
        180,
    )
    status = browser.find_element("id", "status")
    assert state == "ready", status.text
    with capsys.disabled():  # on the terminal, not captured: recorded, not asserted
        print(
            f"\nplayground: ready {time.monotonic() - started:.1f} s after opening "
            f"(the page's own count: {status.get_attribute('data-seconds')} s)"
        )
    code = browser.find_element("id", "code")
    code.clear()
    code.send_keys(CODE)
    browser.find_element("id", "run").click()
    _wait(browser, "return document.getElementById('status').dataset.runs === '1';", 30)
    # `chainrule explain "c = a*b; d = c + a; e = d**2" a=2 b=3`: the same numbers
    root = evaluate("c = a*b; d = c + a; e = d**2", {"a": 2.0, "b": 3.0})
    walk = backward_walk(root)
    assert browser.find_element("id", "table").text == explain(root).rstrip()
    view = browser.find_element("css selector", "#result .cr-walk")
    assert len(view.find_elements("css selector", "g.node")) == 5
    assert len(view.find_elements("css selector", "g.op")) == 3
    prefix = view.get_attribute("id")[:-4]
    counter = browser.find_element("id", prefix + "counter")
    steps = int(counter.get_attribute("data-steps"))
    texts = page_data(walk)["texts"]
    for k in range(1, steps + 1):
        view.send_keys(Keys.ARROW_RIGHT)
        assert counter.get_attribute("data-step") == str(k)
        assert browser.find_element("id", prefix + "step-text").text == texts[k]
    cells = view.find_elements("css selector", "td.grad")
    shown = {int(c.get_attribute("data-node")): float(c.get_attribute("data-grad")) for c in cells}
    assert shown == dict(enumerate(walk.grads))
    # a syntax error: Python's message, in the page
    code.clear()
    code.send_keys("a = Value(2.0\n")
    browser.find_element("id", "run").click()
    _wait(browser, "return document.getElementById('status').dataset.runs === '2';", 30)
    error = browser.find_element("id", "error")
    assert error.is_displayed()
    assert error.text.endswith("SyntaxError: '(' was never closed")
    assert 'File "<playground>", line 1' in error.text
    assert browser.find_element("id", "result").text == ""
