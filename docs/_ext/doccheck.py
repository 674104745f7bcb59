"""Sphinx extension: the API reference shows every docstring as it was
written, and every cross-reference leads somewhere. Each failure is a
warning, so an error under ``sphinx-build -W``.

- napoleon reads the first line of an attribute's or a property's docstring
  as ``type: description`` whenever it has a colon: ``"The axes reversed:
  x.transpose()"`` renders as "x.transpose(). Type: The axes reversed". A
  ``:type:`` field napoleon made out of a docstring is reported, naming the
  object; the fix is a first line without ``words:`` in front.
- Every cross-reference must resolve (Sphinx's ``nitpicky``), the bases of
  classes and the types in signatures included. Exempt: private names
  (a dotted part starting with ``_``), which have no page, and, while the
  build is offline (no intersphinx inventories, the default), the standard
  library's, NumPy's and PyTorch's.
"""

from __future__ import annotations

import sys
from typing import Any

from sphinx.application import Sphinx
from sphinx.config import Config
from sphinx.util import logging

logger = logging.getLogger(__name__)

#: A name with a private part: ``chainrule.value.mode._GradModeContext``.
PRIVATE = r"(.*\.)?_[^.]*(\..*)?"
#: Libraries whose pages come from intersphinx inventories, when online:
#: the standard library, NumPy and PyTorch.
EXTERNAL = rf"({'|'.join(sorted(sys.stdlib_module_names | {'numpy', 'torch'}))})(\..*)?"

#: What napoleon turns into a lone ``:type:`` field.
INLINE_TYPED = frozenset({"attribute", "data", "property"})


def inline_type(what: str, lines: list[str]) -> str | None:
    """The type napoleon read out of a docstring's first line (``lines`` as
    napoleon left them), or None when it read none."""
    if what not in INLINE_TYPED:
        return None
    for line in lines:
        if line.startswith(":type:"):
            return line[len(":type:") :].strip()
    return None


def report_inline_type(
    app: Sphinx, what: str, name: str, obj: Any, options: Any, lines: list[str]
) -> None:
    found = inline_type(what, lines)
    if found is not None:
        logger.warning(
            "%s: napoleon reads %r as the type of this %s and shows it as 'Type:'; "
            "reword the docstring's first line so no 'words:' start it",
            name,
            found,
            what,
            type="doccheck",
        )


def resolve_every_reference(app: Sphinx, config: Config) -> None:
    config.nitpicky = True
    ignored = list(config.nitpick_ignore_regex)
    ignored.append((r"py:.*", PRIVATE))
    if not getattr(config, "intersphinx_mapping", None):  # offline
        ignored.append((r"py:.*", EXTERNAL))
    config.nitpick_ignore_regex = ignored


def setup(app: Sphinx) -> dict[str, Any]:
    app.setup_extension("sphinx.ext.napoleon")
    app.connect("config-inited", resolve_every_reference)
    # after napoleon's own handler (priority 500) has rewritten the lines
    app.connect("autodoc-process-docstring", report_inline_type, priority=600)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
