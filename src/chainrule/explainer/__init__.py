"""The backward pass made visible: ``explain``'s tables and traces, the
drawings, the stepping page and the formula language ``chainrule explain``
reads.

It may import every layer below it (``value``, ``tensor``, ``io``, the
training API) and none above (``interop``, ``bench``, ``cli``). It looks at
graphs and never changes how they are computed. Importing it registers the
drawings with :mod:`chainrule.value.display`, so a Value shows its graph in
a notebook. (Named as ``compiler`` holds ``compile``: ``chainrule.explain``
stays the function.)
"""

from ..value import display
from .notebook import graph_html, graph_svg

# a Value or a Tensor in a notebook shows its graph, drawn here (no Graphviz)
display.register("svg", graph_svg)
display.register("html", graph_html)
