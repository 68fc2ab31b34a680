"""The API's lazy wrappers (model code is imported on first call) have the signatures of the functions
they wrap, so help(), the service and the CLI see real parameters, and pass every argument through."""
from __future__ import annotations

import importlib
import inspect

import pytest

import fpr.api as api

WRAPPED = {
    "load_encoder": "fpr.encoders.registry",
    "embed_paths": "fpr.encoders.embed",
    "with_background": "fpr.encoders.background",
    "background_of_key": "fpr.encoders.background",
    "ablate": "fpr.eval.ablate",
    "ablate_backgrounds": "fpr.eval.ablate",
    "ablate_official": "fpr.eval.ablate_official",
    "filter_queries": "fpr.eval.filter",
}


def _shape(fn):
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]


@pytest.mark.parametrize("name", sorted(WRAPPED))
def test_wrapper_has_the_wrapped_signature(name):
    target = getattr(importlib.import_module(WRAPPED[name]), name)
    wrapper = getattr(api, name)
    assert _shape(wrapper) == _shape(target)
    assert not any(p.kind is p.VAR_POSITIONAL for p in inspect.signature(wrapper).parameters.values())
    got, want = inspect.signature(wrapper), inspect.signature(target)
    for p in want.parameters.values():
        if p.annotation is not inspect.Parameter.empty:  # written alike (both modules postpone annotations)
            assert got.parameters[p.name].annotation == p.annotation, (name, p.name)
    assert got.return_annotation == want.return_annotation or want.return_annotation is inspect.Signature.empty


@pytest.mark.parametrize("name", sorted(WRAPPED))
def test_wrapper_passes_every_argument_through(name, monkeypatch):
    module = importlib.import_module(WRAPPED[name])
    sig = inspect.signature(getattr(module, name))
    calls = []
    monkeypatch.setattr(module, name, lambda *a, **k: calls.append(sig.bind(*a, **k)) or "result")
    args, kwargs, want = [], {}, {}
    for k, p in enumerate(sig.parameters.values()):
        value = f"value-{k}"  # a distinct sentinel per parameter, never its default
        if p.kind is p.VAR_KEYWORD:  # passed on as they came (e.g. ablate_backgrounds' options of ablate)
            kwargs["some_option"] = value
            want[p.name] = {"some_option": value}
            continue
        if p.kind is p.KEYWORD_ONLY:
            kwargs[p.name] = value
        else:
            args.append(value)
        want[p.name] = value
    assert getattr(api, name)(*args, **kwargs) == "result"
    assert calls[0].arguments == want
