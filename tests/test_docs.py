"""The documentation: every Python code block of the site and of the README
runs as written (a page's ``{python-run}`` blocks in order, as the site's
build runs them), and every public name has a docstring (what ``help()``
and the API reference show)."""

from __future__ import annotations

import doctest
import inspect
import linecache
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
sys.path.insert(0, str(DOCS / "_ext"))

import public_api  # noqa: E402
import pyrun  # noqa: E402

#: What the site's build writes under docs/ (ignored by git, rewritten while a
#: build runs): not pages of the site's sources. Left out, a checkout's
#: tests are the same before and after a build, and never read a page
#: while tests/test_site.py's build is writing it.
BUILT = {"_build", "_generated", "api"}
WRITTEN = sorted(p for p in DOCS.rglob("*.md") if not BUILT & set(p.relative_to(DOCS).parts))
PAGES = [ROOT / "README.md", *WRITTEN]
FENCE = re.compile(r"^```(\S*)[^\n]*\n(.*?)^```", re.S | re.M)
BLOCKS = [
    (page, n, code)
    for page in PAGES
    for n, (lang, code) in enumerate(FENCE.findall(page.read_text(encoding="utf-8")))
    if lang == "python"
]


RUN = f"{{{pyrun.NAME}}}"
SESSIONS = {
    page: blocks
    for page in PAGES
    if (
        blocks := [
            pyrun.split_options(code)
            for lang, code in FENCE.findall(page.read_text(encoding="utf-8"))
            if lang == RUN
        ]
    )
}


def test_the_site_and_the_readme_have_examples() -> None:
    assert sum(page.parent == DOCS for page, _, _ in BLOCKS) >= 10
    assert sum(page.name == "README.md" for page, _, _ in BLOCKS) >= 1


def test_every_python_block_is_fenced_as_python() -> None:
    """A block this test would not see (``py``, ``{code-block}``, ``>>>`` in
    Markdown) is refused, so no example escapes being run."""
    for page in PAGES:
        for lang, code in FENCE.findall(page.read_text(encoding="utf-8")):
            assert lang not in {"py", "python3", "pycon", "{code-block}", "{code}"}, page.name
            if lang != "python":
                assert ">>> " not in code, page.name


@pytest.mark.parametrize(
    ("page", "index", "code"),
    BLOCKS,
    ids=[f"{p.relative_to(ROOT)}:{n}" for p, n, _ in BLOCKS],
)
def test_docs_example_runs(
    page: Path, index: int, code: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    name = f"{page.name} example {index}"
    linecache.cache[name] = (len(code), None, code.splitlines(True), name)  # tracebacks show it
    exec(compile(code, name, "exec"), {"__name__": "__docs__"})


@pytest.mark.parametrize("page", SESSIONS, ids=[str(p.relative_to(ROOT)) for p in SESSIONS])
def test_docs_page_runs_top_to_bottom(page: Path, tmp_path: Path) -> None:
    """A page's ``{python-run}`` blocks, in one namespace, in order; the
    images they show are files they wrote."""
    session = pyrun.Session(tmp_path, page.name)
    for options, code in SESSIONS[page]:
        display = options.get("output") == "display"
        outcome = session.run(code, options.get("raises"), display)
        assert outcome.error is None, f"{page.name}, block {session.count}:\n{outcome.error}"
        assert not display or (outcome.html and "<svg" in outcome.html)
        if "image" in options:
            assert (tmp_path / options["image"]).stat().st_size > 1000


def test_a_failing_block_is_reported_with_its_line(tmp_path: Path) -> None:
    session = pyrun.Session(tmp_path, "page.md")
    assert session.run("x = 2\nprint(x * 3)\n") == pyrun.Outcome("6\n")
    failed = session.run("y = x + 1\nz = 1 / (x - 2)\n")
    assert failed.error is not None and "ZeroDivisionError" in failed.error
    assert failed.error.startswith("page.md, cell 2:\n")
    assert '"<cell 2>", line 2' in failed.error and "z = 1 / (x - 2)" in failed.error
    shown = session.run("float(y) + None\n", raises="TypeError")
    assert shown.error is None and shown.output.startswith("TypeError: unsupported operand")
    assert session.run("pass\n", raises="TypeError").error == (
        "expected TypeError, and nothing was raised"
    )
    options, code = pyrun.split_options(":image: a.png\n:alt: A\n\nprint(1)\n")
    assert options == {"image": "a.png", "alt": "A"} and code == "print(1)\n"


COMMAND = re.compile(r"^```\{program-output\} ([^\n]*)\n(.*?)^```", re.S | re.M)
NEEDY = """# A page

```{program-output} no-such-program --that-would-fail
:needs: json, chainrule_no_such_module
```

```{program-output} python -c "print(6 * 7)"
:needs: json
```
"""


def test_a_command_whose_module_is_missing_is_shown_as_not_run(tmp_path: Path) -> None:
    """``:needs:`` (docs/_ext/needs.py): a command that needs a module this
    Python lacks is not run; the page says so and which extra runs it, and
    ``-W`` passes. One whose modules are there runs as usual."""
    import subprocess

    (tmp_path / "conf.py").write_text(
        f"import sys\nsys.path.insert(0, {str(DOCS / '_ext')!r})\n"
        "extensions = ['myst_parser', 'needs']\n",
        encoding="utf-8",
    )
    (tmp_path / "index.md").write_text(NEEDY, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "-q", "-b", "text"]
        + [str(tmp_path), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    text = " ".join((tmp_path / "out" / "index.txt").read_text(encoding="utf-8").split())
    # the commands as literals: typed as shown, no curly quotes or en dashes
    assert 'Note: Not run in this build of the site: "no-such-program --that-would-' in text
    assert (
        "needs chainrule_no_such_module, which is not installed here "
        "(\"pip install -e '.[docs,chainrule_no_such_module]'\" runs it)."
    ) in text
    assert not {"\u2018", "\u2019", "\u2013"} & set(text)
    assert "42" in text


def test_a_failing_command_whose_stderr_the_page_hides_shows_it_in_the_warning(
    tmp_path: Path,
) -> None:
    """``:nostderr:`` hides a command's standard error on the page; when the
    command fails, the build's warning carries it (docs/_ext/needs.py), and
    a command that succeeds shows only its output."""
    import subprocess

    (tmp_path / "conf.py").write_text(
        f"import sys\nsys.path.insert(0, {str(DOCS / '_ext')!r})\n"
        "extensions = ['myst_parser', 'needs']\n",
        encoding="utf-8",
    )
    fails = "import sys; print('done'); sys.stderr.write('rank 1: closed by peer'); sys.exit(3)"
    works = "import sys; print('fine'); sys.stderr.write('a note')"
    (tmp_path / "index.md").write_text(
        f'# Page\n\n```{{program-output}} {sys.executable} -c "{fails}"\n:nostderr:\n```\n\n'
        f'```{{program-output}} {sys.executable} -c "{works}"\n:nostderr:\n```\n',
        encoding="utf-8",
    )
    done = subprocess.run(
        [sys.executable, "-m", "sphinx", "-q", "-b", "text"]
        + [str(tmp_path), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "exited 3; its standard error (hidden on the page):" in done.stderr
    assert "rank 1: closed by peer" in done.stderr and "a note" not in done.stderr
    text = (tmp_path / "out" / "index.txt").read_text(encoding="utf-8")
    assert "done" in text and "fine" in text and "closed by peer" not in text


def test_the_pages_commands_that_need_pytorch_say_so() -> None:
    """PyTorch is not in the docs extra: every command of the site that runs
    it (torchrun) or reads what it wrote is marked ``:needs: torch``."""
    page = (DOCS / "tutorials" / "continue-on-torch.md").read_text(encoding="utf-8")
    blocks = COMMAND.findall(page)
    after_torch = [
        (command, ":needs: torch" in options)
        for n, (command, options) in enumerate(blocks)
        if any(c.startswith("torchrun") for c, _ in blocks[: n + 1])
    ]
    assert after_torch and all(marked for _, marked in after_torch), after_torch
    for doc in WRITTEN:
        for command, options in COMMAND.findall(doc.read_text(encoding="utf-8")):
            if command.startswith("torchrun") or "import torch" in command:
                assert ":needs: torch" in options, (doc.name, command)


def test_the_reference_forgets_pages_of_modules_that_are_gone(tmp_path: Path) -> None:
    """A checkout that built the site before a module moved keeps its old
    page under docs/api (ignored by git): the build removes it (autodoc
    failed on it under -W, in that checkout only)."""
    import types

    import apiref

    (tmp_path / "api").mkdir()
    (tmp_path / "api" / "chainrule.gone.rst").write_text("stale\n", encoding="utf-8")
    apiref.write_pages(types.SimpleNamespace(srcdir=str(tmp_path)))  # type: ignore[arg-type]
    pages = {p.name for p in (tmp_path / "api").iterdir()}
    assert "chainrule.gone.rst" not in pages
    assert {"index.rst", "chainrule.rst"} <= pages


def test_every_public_module_is_in_the_reference() -> None:
    import chainrule

    names = {m.__name__ for m in public_api.modules()}
    assert {"chainrule", "chainrule.nn", "chainrule.optim", "chainrule.tensor"} <= names
    # a module chainrule exports is a public module, with its own page
    exported = {f"chainrule.{n}" for n in chainrule.__all__ if n[0].islower()}
    assert {m for m in exported if type(getattr(chainrule, m[10:])) is type(chainrule)} <= names


def test_every_public_name_has_a_docstring() -> None:
    missing = public_api.undocumented()
    assert not missing, "public names without a docstring:\n" + "\n".join(missing)


def test_the_check_sees_a_missing_docstring() -> None:
    """The docstring check fails on an undocumented function, method,
    property or constant."""
    import types

    module = types.ModuleType("chainrule.fake")

    def documented() -> None:
        """Documented."""

    def bare() -> None:
        pass

    class Thing:
        """A class."""

        def method(self) -> None:
            pass

        @property
        def prop(self) -> int:
            return 1

    Thing.__module__ = bare.__module__ = documented.__module__ = "chainrule.fake"
    module.documented, module.bare, module.Thing = documented, bare, Thing  # type: ignore[attr-defined]
    module.__all__ = ["documented", "bare", "Thing"]  # type: ignore[attr-defined]
    assert public_api.docstring(module, "documented") == "Documented."
    assert public_api.docstring(module, "bare") == ""
    undocumented = {m.name for m in public_api.members(Thing) if not m.obj.__doc__}
    assert undocumented == {"method", "prop"}


def _doctests() -> list[doctest.DocTest]:
    """The ``>>>`` examples of every docstring the API reference shows."""
    finder = doctest.DocTestFinder()
    found: dict[str, doctest.DocTest] = {}
    for module in public_api.modules():
        candidates = [(module, module.__name__, module)]
        for name in public_api.public_names(module):
            obj = getattr(module, name)
            home = sys.modules.get(getattr(obj, "__module__", "") or "")
            if (
                home is not None
                and home is not module
                and (inspect.isclass(obj) or inspect.isroutine(obj))
            ):
                candidates.append((obj, f"{home.__name__}.{obj.__qualname__}", home))
        for obj, name, home in candidates:
            for test in finder.find(obj, name, module=home, globs=vars(home)):
                if test.examples:
                    found.setdefault(test.name, test)
    return sorted(found.values(), key=lambda t: t.name)


DOCTESTS = _doctests()


def test_the_reference_has_examples() -> None:
    assert len(DOCTESTS) >= 20


@pytest.mark.parametrize("test", DOCTESTS, ids=[t.name for t in DOCTESTS])
def test_docstring_example_runs(
    test: doctest.DocTest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    test.globs = dict(test.globs)  # each example starts from the module's names
    result = runner.run(test, out=lambda text: print(text, end=""))
    assert result.failed == 0, f"{test.name}: {result.failed} example(s) failed (output above)"
