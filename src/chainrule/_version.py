"""The package version: the one place it is written.

``pyproject.toml`` reads it at build time (``[tool.setuptools.dynamic]``),
``chainrule.__version__`` re-exports it and ``chainrule --version`` prints it.
"""

__version__ = "0.1.0"
