"""The packaging a user expects: a version in one place, the licence, the extras."""

from __future__ import annotations

from pathlib import Path

import pytest

import chainrule
from chainrule.cli import main

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def test_version_option_prints_the_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == f"chainrule {chainrule.__version__}\n"


def test_the_version_is_written_in_one_place() -> None:
    from chainrule import _version

    assert chainrule.__version__ == _version.__version__
    assert "version" not in PYPROJECT["project"]
    assert "version" in PYPROJECT["project"]["dynamic"]
    assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {
        "attr": "chainrule._version.__version__"
    }


def test_license_file_is_the_declared_mit() -> None:
    assert PYPROJECT["project"]["license"] == "MIT"
    assert (ROOT / "LICENSE").read_text(encoding="utf-8").startswith("MIT License\n")


def test_changelog_keeps_an_unreleased_section() -> None:
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert "keepachangelog.com" in text
    assert "\n## [Unreleased]\n" in text


def test_extras_have_their_conventional_meanings() -> None:
    extras = PYPROJECT["project"]["optional-dependencies"]
    assert {"tensor", "plot", "all", "test", "docs", "dev"} <= set(extras)
    user_facing = set(extras) - {"all", "test", "docs", "dev", "bench"}
    assert extras["all"] == [f"chainrule[{','.join(sorted(user_facing, key=list(extras).index))}]"]
    names = {extra: {r.split("=")[0].split(">")[0] for r in reqs} for extra, reqs in extras.items()}
    assert {"ruff", "mypy"} <= names["dev"]
    assert not {"ruff", "mypy"} & names["test"]  # linters are a contributor's, not the tests'
    assert "torch" in names["test"] and "sphinx" in names["docs"]
    # no documentation site or public repository exists yet: no link that leads nowhere
    assert "urls" not in PYPROJECT["project"]


def test_user_extras_take_ranges_and_the_tests_pin_their_oracle() -> None:
    """A library's extra must not pin (it would fight the user's own torch);
    the test extra pins the oracle so its figures do not move."""
    extras = PYPROJECT["project"]["optional-dependencies"]
    user_facing = set(extras) - {"all", "test", "docs", "dev", "bench"}
    for extra in user_facing:
        pinned = [r for r in extras[extra] if "==" in r]
        assert not pinned, f"extra {extra!r} pins {pinned}: give a range"
    assert "torch>=2.1" in extras["torch"]
    assert "torch==2.13.0" in extras["test"]
