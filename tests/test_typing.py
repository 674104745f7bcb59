"""What a mypy user of chainrule sees."""

from __future__ import annotations

from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src"


def test_chainrule_tensor_is_typed_as_the_class(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``from chainrule import Tensor`` is the Tensor class for mypy (it is
    loaded lazily at run time, so that importing chainrule needs no NumPy)."""
    api = pytest.importorskip("mypy.api")
    user = tmp_path / "user.py"
    user.write_text(
        "from chainrule import Tensor\n"
        "x = Tensor([1.0, 2.0])\n"
        "reveal_type(x)\n"
        "reveal_type(x.sum().item())\n"
    )
    monkeypatch.setenv("MYPYPATH", str(SRC))
    out, err, _ = api.run(
        [
            str(user),
            "--cache-dir",
            str(tmp_path / "cache"),
            "--config-file",
            "",
            "--no-error-summary",
        ]
    )
    assert 'Revealed type is "chainrule.tensor.tensor.Tensor"' in out, out + err
    assert 'Revealed type is "float"' in out or 'Revealed type is "builtins.float"' in out, out
