"""Checking gradients: ``gradcheck`` against finite differences, and
``detect_anomaly`` for the first nan or inf.

:mod:`~chainrule.check.scalar` compares the scalar engine's derivatives
with central differences, :mod:`~chainrule.check.tensor` a Tensor
function's (and names the op to blame), both reporting through
:mod:`~chainrule.check.report`; :mod:`~chainrule.check.anomaly` watches a
forward and backward pass. Part of the training API: it may import the
engines (``value``, ``tensor``) and nothing above.
"""

from .anomaly import AnomalyDetector, AnomalyError, detect_anomaly
from .report import GradcheckError, GradcheckReport, Mismatch
from .scalar import gradcheck

__all__ = [
    "AnomalyDetector",
    "AnomalyError",
    "GradcheckError",
    "GradcheckReport",
    "Mismatch",
    "detect_anomaly",
    "gradcheck",
]
