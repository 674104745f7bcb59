"""The scalar engine: micrograd's ``Value`` and the backward pass.

What a reader of micrograd or microgpt looks for is here, one job a module:
:mod:`~chainrule.value.engine` (the node, its operators, ``backward()``),
:mod:`~chainrule.value.primitives` (the derivative table) and
:mod:`~chainrule.value.walk` (the topological order and the walk). Around
them: number intake and IEEE functions, micrograd's and microgpt's node
protocols, the methods beyond micrograd's, the functions on numbers or
Values, ``create_graph``'s rules on Values, ``gradients()``, the recording
mode (``no_grad``, anomaly observers) and the one-node sums.

The lowest layer: it imports the standard library only, and no other part
of chainrule, not even inside a function. Higher layers that add to a
Value (its drawing in a notebook) register with :mod:`~chainrule.value.display`.
"""
