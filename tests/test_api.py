"""The public list: one declaration (fpr.api.PUBLIC) from which fpr.api and the package facade derive."""
from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import fpr
import fpr.api as api


@pytest.mark.parametrize("name", sorted(api.PUBLIC))
def test_every_public_name_is_the_owners_object_from_fpr_and_fpr_api(name):
    owner = importlib.import_module(api.PUBLIC[name])
    assert getattr(fpr, name) is getattr(owner, name)
    assert getattr(api, name) is getattr(owner, name)


def test_dir_lists_every_public_name():
    assert set(api.PUBLIC) <= set(dir(fpr))
    assert set(api.PUBLIC) <= set(dir(api))
    assert sorted(api.__all__) == sorted(api.PUBLIC)


def test_names_the_old_facade_lacked_are_reachable():
    # fpr 0.1's facade listed 25 names; delete_run and others raised AttributeError
    for name in ("delete_run", "delete_index", "delete_gallery", "meta", "ablate_official", "html_report",
                 "run_query_encoders", "score_from_table", "list_encoders", "train_encoder"):
        assert callable(getattr(fpr, name))


def test_an_unknown_name_is_an_attribute_error_naming_it():
    with pytest.raises(AttributeError, match="no attribute 'run_qeury'"):
        fpr.run_qeury  # noqa: B018
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        api.nope  # noqa: B018


def test_public_names_are_owned_below_the_api():
    allowed = ("fpr.workflows.", "fpr.galleries.", "fpr.encoders.", "fpr.eval.")
    assert all(m.startswith(allowed) for m in api.PUBLIC.values())


def test_public_functions_have_their_owners_signature_and_docs():
    for name in ("ablate", "filter_queries", "load_encoder", "embed_paths", "run_query"):
        fn = getattr(fpr, name)
        assert fn.__module__ == api.PUBLIC[name] and fn.__doc__


def test_importing_fpr_and_the_api_loads_no_model_code():
    code = ("import sys, fpr, fpr.api; fpr.list_runs; fpr.report_data; fpr.sql; "
            "print(sorted(m for m in ('torch', 'timm', 'open_clip') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_type_checking_block_imports_every_public_name_from_its_owner():
    """Issue #36: static tools (type checkers, import walkers) see the facade: api.py's TYPE_CHECKING block
    imports exactly PUBLIC, each name from the module that owns it."""
    import ast
    from pathlib import Path

    import fpr.api as api

    tree = ast.parse(Path(api.__file__).read_text())
    block = next(n for n in tree.body if isinstance(n, ast.If) and getattr(n.test, "id", "") == "TYPE_CHECKING")
    seen = {a.name: node.module for node in block.body if isinstance(node, ast.ImportFrom) for a in node.names}
    assert seen == api.PUBLIC
