"""Sphinx configuration for chainrule's documentation site.

Build: ``pip install -e '.[docs]' && sphinx-build -W --keep-going docs docs/_build/html``
(every warning an error, as CI runs it). Needs no network: the theme and
extensions come from PyPI, and intersphinx links to NumPy, PyTorch and
Python only when ``CHAINRULE_DOCS_INTERSPHINX=1`` says the inventories may
be downloaded.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
SRC = str(HERE.parent / "src")
sys.path.insert(0, str(HERE / "_ext"))
sys.path.insert(0, SRC)
# The commands the pages run (program-output) import this checkout too.
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [SRC, os.environ.get("PYTHONPATH")]))
# ... and run this environment's commands (chainrule, torchrun): the ones
# installed beside the Python that builds the site, activated or not.
os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
# Plots drawn by the pages' code go to files, never to a window.
os.environ["MPLBACKEND"] = "Agg"
# tutorials/continue-on-torch runs torchrun on this machine: gloo on loopback.
os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")

import chainrule  # noqa: E402

project = "chainrule"
author = "the chainrule contributors"
copyright = "2026, the chainrule contributors"  # noqa: A001
release = chainrule.__version__
version = release

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.intersphinx",
    "sphinx.ext.viewcode",
    "myst_parser",
    "sphinxcontrib.programoutput",
    "needs",
    "apiref",
    "doccheck",
    "generated",
    "pyrun",
    "optable",
    "notebooks",
    "playground",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build", "_ext", "_generated"]
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence"]

# Docstrings: Google style (napoleon), types from the signatures.
napoleon_google_docstring = True
napoleon_numpy_docstring = False
autodoc_typehints = "signature"
autodoc_member_order = "bysource"
autodoc_preserve_defaults = True

if os.environ.get("CHAINRULE_DOCS_INTERSPHINX") == "1":
    intersphinx_mapping = {
        "python": ("https://docs.python.org/3", None),
        "numpy": ("https://numpy.org/doc/stable", None),
        "torch": ("https://docs.pytorch.org/docs/stable", None),
    }
else:  # offline: no inventories, references to them stay plain text
    intersphinx_mapping = {}


html_theme = "furo"
html_title = f"chainrule {release}"
html_static_path = ["_static"]
html_css_files = ["chainrule.css"]
html_favicon = "_static/favicon.svg"
# Pages made at build time (the walkthrough), copied to the site's root; the
# directory must exist before Sphinx checks this setting.
(HERE / "_generated" / "site").mkdir(parents=True, exist_ok=True)
html_extra_path = ["_generated/site"]
