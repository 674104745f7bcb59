"""The suite's own harness (tests/conftest.py): however the worker count is
given, the modules that share the built site run on one worker, so the site
is built once and no two builds write docs/_generated at the same time."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

import conftest


class _Config:
    def __init__(self, **options: Any) -> None:
        self.option = SimpleNamespace(**options)
        self.pluginmanager = SimpleNamespace(hasplugin=lambda name: name == "xdist")

    def getoption(self, name: str, default: Any = None) -> Any:
        return getattr(self.option, name, default)


def _mode(**options: Any) -> tuple[Any, Any]:
    config = _Config(**{"numprocesses": None, "dist": "no", **options})
    conftest.pytest_cmdline_main(config)  # type: ignore[arg-type]
    return config.option.numprocesses, config.option.dist


@pytest.mark.parametrize("workers", [2, 3, "auto"])
def test_a_worker_count_given_keeps_the_groups(workers: Any) -> None:
    assert _mode(numprocesses=workers) == (workers, "loadgroup")


def test_no_worker_count_takes_one_per_core(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(conftest, "_cores", lambda: 8)
    assert _mode() == (4, "loadgroup")
    monkeypatch.setattr(conftest, "_cores", lambda: 1)
    assert _mode() == (None, "no")


def test_one_process_and_a_chosen_mode_are_left_alone() -> None:
    assert _mode(numprocesses=0) == (0, "no")
    assert _mode(numprocesses=2, dist="load") == (2, "load")
    assert _mode(numprocesses=2, usepdb=True) == (2, "no")
