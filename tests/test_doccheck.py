"""The API reference's own checks (``docs/_ext/doccheck.py``, ``apiref.py``):
a docstring napoleon would render with a "Type:" it never had, or a
cross-reference that leads nowhere, fails ``sphinx-build -W``. Shown here
on a planted module, built as the site is built; the site itself passes
the same checks in ``tests/test_site.py``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXT = ROOT / "docs" / "_ext"
sys.path.insert(0, str(EXT))

import apiref  # noqa: E402
import doccheck  # noqa: E402
import public_api  # noqa: E402

pytest.importorskip("sphinx")

CONF = f"""
import sys
sys.path[:0] = [{str(EXT)!r}, '.']
extensions = ["sphinx.ext.autodoc", "doccheck"]
"""

INDEX = """Planted
=======

.. autoclass:: planted.Thing
   :members:

.. autoclass:: planted.Other
"""

PLANTED = '''
class Thing:
    """A thing; see :class:`planted.{target}`."""

    @property
    def axes(self) -> int:
        """{axes}"""
        return 0


class Other:
    """Another thing."""
'''


def _build(tmp_path: Path, target: str, axes: str) -> subprocess.CompletedProcess[str]:
    src = tmp_path / "src"
    src.mkdir(exist_ok=True)
    (src / "conf.py").write_text(CONF, encoding="utf-8")
    (src / "index.rst").write_text(INDEX, encoding="utf-8")
    (src / "planted.py").write_text(PLANTED.format(target=target, axes=axes), encoding="utf-8")
    return subprocess.run(
        [sys.executable, "-m", "sphinx", "-E", "-W", "--keep-going", "-q", "-b", "html"]
        + [str(src), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        cwd=src,
        check=False,
    )


def test_a_planted_type_artefact_and_a_dangling_reference_fail_the_build(
    tmp_path: Path,
) -> None:
    done = _build(tmp_path, target="Nowhere", axes="The axes reversed: ``x.transpose()``.")
    assert done.returncode != 0
    assert "planted.Thing.axes: napoleon reads 'The axes reversed' as the type" in done.stderr
    assert "py:class reference target not found: planted.Nowhere" in done.stderr


def test_the_same_module_written_well_builds(tmp_path: Path) -> None:
    done = _build(tmp_path, target="Other", axes="The axes reversed, as ``x.transpose()``.")
    assert done.returncode == 0, done.stderr
    page = (tmp_path / "out" / "index.html").read_text(encoding="utf-8")
    assert "The axes reversed, as" in page and 'href="#planted.Other"' in page


def test_inline_type_reads_what_napoleon_left() -> None:
    assert doccheck.inline_type("property", ["x.", "", ":type: The axes"]) == "The axes"
    assert doccheck.inline_type("property", ["The axes, reversed."]) is None
    assert doccheck.inline_type("function", [":type: ignored here"]) is None


def test_every_module_in_the_reference_index_has_a_summary() -> None:
    summaries = {m.__name__: apiref.summary(m) for m in public_api.modules()}
    assert "chainrule.module" in summaries and "chainrule.check" in summaries
    short = [name for name, text in summaries.items() if not text.endswith((".", ":"))]
    assert not short, f"modules whose docstring has no first sentence: {short}"
    assert summaries["chainrule.module"].startswith("What the modules of both engines share")
