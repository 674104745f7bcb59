"""micrograd's module name: ``from chainrule.engine import Value``.

The scalar engine lives in :mod:`chainrule.value`; this module keeps
micrograd's import path working for code written for micrograd.
"""

from .value.engine import Primitive, Value

__all__ = ["Primitive", "Value"]
