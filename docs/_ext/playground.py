"""Sphinx extension: the playground, chainrule running in the reader's
browser. The build writes ``playground/index.html`` and chainrule's pure
wheel beside it into the site; Pyodide's own files come from
``playground_pyodide_base`` (its CDN by default; the environment variable
``CHAINRULE_PYODIDE_BASE`` overrides it, e.g. for a site served offline
with a copy of the npm package ``pyodide``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from sphinx.application import Sphinx
from sphinx.errors import ExtensionError

ROOT = Path(__file__).resolve().parents[2]


def pure_wheel(dest: Path) -> Path:
    """Build chainrule's wheel (pure Python: it runs in Pyodide) into ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as out:
        done = subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
             "-w", out, str(ROOT)],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        wheels = list(Path(out).glob("chainrule-*-py3-none-any.whl"))
        if done.returncode != 0 or len(wheels) != 1:
            raise ExtensionError(f"building chainrule's wheel failed: {done.stderr.strip()}")
        target = dest / wheels[0].name
        shutil.copyfile(wheels[0], target)
    return target


def write_playground(dest: Path, pyodide_base: str) -> Path:
    """``dest/index.html`` and the wheel it installs; returns the page."""
    from chainrule.explainer.playground import playground_html

    wheel = pure_wheel(dest)
    page = dest / "index.html"
    text = playground_html(pyodide_base=pyodide_base, wheel=wheel.name)
    # the site's icon, one directory up (the page is playground/index.html)
    text = text.replace("</head>", '<link rel="icon" href="../_static/favicon.svg"></head>', 1)
    page.write_text(text, encoding="utf-8")
    return page


def generate(app: Sphinx) -> None:
    base = os.environ.get("CHAINRULE_PYODIDE_BASE") or app.config.playground_pyodide_base
    dest = Path(app.srcdir) / "_generated" / "site" / "playground"
    shutil.rmtree(dest, ignore_errors=True)
    write_playground(dest, base)


def setup(app: Sphinx) -> dict[str, Any]:
    from chainrule.explainer.playground import PYODIDE_CDN

    app.add_config_value("playground_pyodide_base", PYODIDE_CDN, "html")
    app.connect("builder-inited", generate)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
