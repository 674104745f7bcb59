"""The backward pass in a notebook: a Value or a Tensor shown as its drawn
graph, the stepping view inline, micrograd's ``draw_dot`` and a check of
gradients written by hand. Nothing to install: chainrule lays out and draws
the graph itself (Graphviz only for PNG and PDF files)."""
