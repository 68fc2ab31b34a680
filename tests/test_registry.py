"""fpr.registry: one Registry[T] (lazy import of only the module asked for, entry points honouring
``module:object``, unknown names listed) and the one place fpr imports a module by name."""
from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest

from fpr import registry as R
from fpr.errors import FprError, NotFoundError

REPO = Path(__file__).resolve().parents[1]


@dataclass
class Thing:
    name: str


MODULE = """
from tests.test_registry import Thing
from {reg} import REG
REG.register(Thing("{name}"))
"""


@pytest.fixture
def toys(tmp_path, monkeypatch):
    """A registry of Things with two built-in modules (one per name) written to a temporary package."""
    pkg = tmp_path / "toyreg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from fpr.registry import Registry\nfrom tests.test_registry import Thing\n"
                                     "REG = Registry('thing', 'toyreg.things', {'a': 'toyreg.a', 'b': 'toyreg.b'}, "
                                     "name_of=lambda t: t.name, item_type=Thing)\n"
                                     "OBJ = Thing('c')\n")
    for name in ("a", "b"):
        (pkg / f"{name}.py").write_text(MODULE.format(reg="toyreg", name=name))
    monkeypatch.syspath_prepend(str(tmp_path))
    for m in [m for m in sys.modules if m.startswith("toyreg")]:
        monkeypatch.delitem(sys.modules, m)
    import toyreg

    yield toyreg
    for m in [m for m in sys.modules if m.startswith("toyreg")]:
        del sys.modules[m]


def test_get_imports_only_the_module_that_declares_the_name(toys, monkeypatch):
    monkeypatch.setattr(R, "_entry_points", lambda group: [])
    assert toys.REG.get("a") == Thing("a")
    assert "toyreg.a" in sys.modules and "toyreg.b" not in sys.modules
    assert toys.REG.names() == ["a", "b"] and "toyreg.b" in sys.modules


def test_an_unknown_name_lists_the_valid_ones(toys, monkeypatch):
    monkeypatch.setattr(R, "_entry_points", lambda group: [])
    with pytest.raises(NotFoundError, match="^unknown thing 'z'; .*a, b"):
        toys.REG.get("z")


def test_an_entry_point_module_object_registers_that_object(toys, monkeypatch):
    ep = SimpleNamespace(name="c", value="toyreg:OBJ", dist=None)
    monkeypatch.setattr(R, "_entry_points", lambda group: [ep] if group == "toyreg.things" else [])
    assert toys.REG.get("c") is toys.OBJ
    assert "toyreg.a" not in sys.modules  # found through its entry point alone


def test_a_failing_plugin_is_one_error_naming_it(toys, monkeypatch):
    ep = SimpleNamespace(name="d", value="toyreg_missing.mod:X", dist=SimpleNamespace(name="toy-dist", version="1"))
    monkeypatch.setattr(R, "_entry_points", lambda group: [ep])
    with pytest.raises(FprError, match="^plugin 'd' \\(toyreg.things, from toy-dist 1\\) failed to load: "
                                       "ModuleNotFoundError.*; fix or uninstall toy-dist$"):
        toys.REG.all()


def test_import_object_follows_module_colon_attributes():
    assert R.import_object("fpr.errors:FprError.exit_code") == 2
    assert R.import_object("fpr.errors").__name__ == "fpr.errors"


def test_finding_copy_paste_imports_no_other_scorer_and_one_encoder_no_other():
    code = ("import sys\nfrom fpr.scorers import get_scorer\nfrom fpr.encoders.registry import get_spec\n"
            "get_scorer('copy-paste'); get_spec('fpr-world-v3')\n"
            "print(sorted(m for m in sys.modules if m.startswith(('fpr.scorers.', 'fpr.encoders.'))))")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert res.returncode == 0, res.stderr
    loaded = set(eval(res.stdout.strip().splitlines()[-1]))
    assert "fpr.scorers.copy_paste.scorer" in loaded and "fpr.encoders.world" in loaded
    from fpr.scorers import BUILTIN as SCORERS
    from fpr.encoders.registry import BUILTIN as ENCODERS

    others = (set(SCORERS.values()) - {"fpr.scorers.copy_paste.scorer"}) | (set(ENCODERS.values()) - {"fpr.encoders.world"})
    assert loaded & others == set()
