"""How a node shows itself in a notebook, without the engine drawing.

Jupyter asks an object for ``_repr_svg_`` (or ``_repr_html_``); a
``Value`` answers through :func:`render`, which calls whatever a higher
layer registered for that format. :mod:`chainrule.explainer` registers its
drawings when it is imported (``import chainrule`` imports it), so the
engine never imports the drawing code, and a format nobody registered
answers None: Jupyter then shows the repr.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

Renderer = Callable[[Any], "str | None"]

_renderers: dict[str, Renderer] = {}


def register(kind: str, renderer: Renderer) -> None:
    """Draw nodes in format ``kind`` (``"svg"``, ``"html"``) with ``renderer``,
    which returns the text or None when it cannot draw this node."""
    _renderers[kind] = renderer


def render(kind: str, node: Any) -> str | None:
    """``node`` drawn in format ``kind``, or None."""
    renderer = _renderers.get(kind)
    return None if renderer is None else renderer(node)
