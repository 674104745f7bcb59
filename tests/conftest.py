"""Shared test setup: the hypothesis profiles and the PyTorch oracle."""

from __future__ import annotations

import math
import os

import pytest
from hypothesis import HealthCheck, settings

# CI: a fixed, derandomized profile, so a run is repeatable and bounded.
settings.register_profile(
    "ci",
    derandomize=True,
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    print_blob=True,
)
settings.register_profile("dev", max_examples=150, deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else os.environ.get("HYPOTHESIS_PROFILE", "dev"))


def _import_torch():  # type: ignore[no-untyped-def]
    try:
        import torch
    except ImportError:
        if os.environ.get("CI"):
            raise  # the oracle must run in CI, never skip
        pytest.skip("PyTorch (the oracle) is not installed: pip install torch==2.13.0")
    return torch


@pytest.fixture(scope="session")
def torch():  # type: ignore[no-untyped-def]
    """PyTorch, the independent oracle. Fails (not skips) under CI=true."""
    return _import_torch()


def close(ours: float, theirs: float, rtol: float = 1e-12, atol: float = 1e-300) -> bool:
    """Equal to within ``rtol``, with nan equal to nan and infinities exact."""
    if math.isnan(theirs) or math.isnan(ours):
        return math.isnan(theirs) and math.isnan(ours)
    if math.isinf(theirs) or math.isinf(ours):
        return ours == theirs
    return abs(ours - theirs) <= atol + rtol * max(abs(ours), abs(theirs))
