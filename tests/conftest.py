"""Shared test setup: the hypothesis profiles, the PyTorch oracle, the
headless browser, the built site, and the two processes the suite runs in
(pytest-xdist)."""

from __future__ import annotations

import math
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

ROOT = Path(__file__).resolve().parent.parent

# A shell that starts pytest in the background (`pytest &`, nohup, a script
# without job control) hands it Ctrl-C ignored, and every command the tests
# start inherits that: the tests of Ctrl-C would see nothing happen. They
# get Python's own handler, as in a terminal (a child then starts with the
# default, which Python turns into KeyboardInterrupt).
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

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


@pytest.fixture
def trace_every_graph(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """compile's budget off (``chainrule.compiler.budget``): every new graph
    is traced at once, the first call included, and nothing runs eagerly
    for the clock. For the tests of tracing and replaying, which count
    traces (a busy machine must not change them) and would otherwise test
    eager against eager on functions too small to gain. A test marked
    ``budget`` keeps the real budget."""
    if request.node.get_closest_marker("budget") is not None:
        return
    from chainrule.compiler import budget

    monkeypatch.setattr(budget, "ALLOWANCE", float("inf"))
    monkeypatch.setattr(budget, "MOSTLY", budget.WINDOW + 1)


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


# -- two processes: pytest-xdist ----------------------------------------------
#
# `pytest` runs the suite in one worker process per core (at most 4), as if
# given `-n N --dist loadgroup`, where pytest-xdist is installed (the test
# extra pins it). `-n 0` or `-p no:xdist` runs it in one process, `-n N`
# picks the number (still grouped, unless `--dist` says otherwise); the
# verdict is the same. A module whose tests share a
# module-scoped fixture (a trained run, a browser, a notebook run) runs on
# one worker, so the fixture is made once; the modules that read the built
# site share one worker and one build (the `site` fixture below). The rest
# is spread test by test.


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        # a worker parses the command line again, without what is set below:
        # it learns the mode from its controller (pytest_configure_node)
        if workerinput.get("chainrule_dist") == "loadgroup":
            config.option.loadgroup = True
        return
    if (
        not config.pluginmanager.hasplugin("xdist")
        or config.getoption("usepdb", False)
        or config.getoption("collectonly", False)
    ):
        return
    if config.getoption("numprocesses", None) is None:  # no -n: one worker per core
        if _cores() < 2:
            return
        workers = min(_cores(), 4)
        config.option.numprocesses = workers
        config.option.tx = ["popen"] * workers
    # `-n N` alone would spread the tests one by one (xdist's `load`), and two
    # workers would each build the site into docs/_generated at once
    if config.option.numprocesses and config.option.dist == "no":
        config.option.dist = "loadgroup"


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """pytest-xdist, in the controller: tell each worker the mode (above)."""
    node.workerinput["chainrule_dist"] = node.config.option.dist


def _groups(items: list[pytest.Item]) -> dict[str, str]:
    """Module -> the xdist group its tests run in, for the modules that
    share an expensive fixture: ``site`` for every module that reads the
    built site, the module's own name for one with a module-scoped fixture."""
    groups: dict[str, str] = {}
    for item in items:
        module = item.nodeid.split("::", 1)[0]
        info = getattr(item, "_fixtureinfo", None)
        scopes = {
            defs[-1].scope
            for name in getattr(item, "fixturenames", ())
            if info is not None and (defs := info.name2fixturedefs.get(name))
        }
        if "site" in getattr(item, "fixturenames", ()):
            groups[module] = "site"
        elif "module" in scopes:
            groups.setdefault(module, module.rsplit("/", 1)[-1].removesuffix(".py"))
    return groups


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    groups = _groups(items) if config.pluginmanager.hasplugin("xdist") else {}
    for item in items:
        group = groups.get(item.nodeid.split("::", 1)[0])
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
        module = item.module.__name__.rsplit(".", 1)[-1] if item.module else ""  # type: ignore[attr-defined]
        if (
            module in PURE_MODULES
            and "torch" not in getattr(item, "fixturenames", ())
            and item.get_closest_marker("native") is None
        ):
            item.add_marker(pytest.mark.pure)


# -- a real browser: headless Chromium driven by Selenium ----------------------

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1200,900",
]


def _unavailable(reason: str) -> None:
    """Say so loudly: in CI the browser tests must run, never pass silently."""
    message = f"browser test cannot run: {reason}"
    if os.environ.get("CI"):
        pytest.fail(message + " (CI installs chromium and chromium-driver in .ci/run)")
    pytest.skip(message)


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Headless Chromium, 1200 x 900, driven by Selenium."""
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        _unavailable("the selenium package is missing (pip install -e '.[test]')")
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_path = shutil.which("chromedriver")
    if chromium is None or driver_path is None:
        _unavailable("Chromium is missing (apt-get install chromium chromium-driver)")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in CHROMIUM_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}")
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


# -- the documentation site, built once --------------------------------------


@pytest.fixture(scope="session")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built from nothing as CI builds it (``sphinx-build -E -W
    --keep-going``), in a directory of its own: once per run, for
    tests/test_site.py and tests/test_site_reader.py."""
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "sphinx", "-E", "-W", "--keep-going", "-q"]
        + [str(ROOT / "docs"), str(out)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, f"sphinx-build -W failed:\n{done.stderr}"
    return out
