"""Shared test setup: the hypothesis profiles and the PyTorch oracle."""

from __future__ import annotations

import math
import os
from pathlib import Path

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


# The pure-Python tests: they need neither NumPy nor PyTorch nor a
# subprocess, so they also run on CPython 3.14 under WebAssembly
# (`../shared/py314/py314 -m pytest -m pure`, in .ci/run). A test in these
# modules that needs more is marked `native` (or asks for the torch fixture).
PURE_MODULES = {
    "test_check",
    "test_engine",
    "test_explain",
    "test_expr",
    "test_finite_differences",
    "test_micrograd_compat",
    "test_micrograd_graph",
    "test_nn",
    "test_no_grad",
    "test_protocols",
}


try:  # where NumPy is missing (CPython 3.14 under WebAssembly) only the pure modules load
    import numpy  # noqa: F401
except ImportError:
    collect_ignore = [
        p.name for p in Path(__file__).parent.glob("test_*.py") if p.stem not in PURE_MODULES
    ]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        module = item.module.__name__.rsplit(".", 1)[-1] if item.module else ""  # type: ignore[attr-defined]
        if (
            module in PURE_MODULES
            and "torch" not in getattr(item, "fixturenames", ())
            and item.get_closest_marker("native") is None
        ):
            item.add_marker(pytest.mark.pure)
