"""fpr.cache's in-process model cache: one keep-and-evict rule, loads once, never blocks other models."""
from __future__ import annotations

import threading

import pytest

from fpr.cache import LoadedModels


def test_a_model_loads_once_and_the_least_recently_used_goes_first():
    cache, calls = LoadedModels(), []

    def loader(name):
        return lambda: calls.append(name) or f"model {name}"

    assert cache.get("enc", "a", loader("a")) == "model a"
    assert cache.get("enc", "a", loader("a")) == "model a"
    cache.get("enc", "b", loader("b"))
    cache.get("enc", "a", loader("a"))  # a is now the most recently used
    cache.get("enc", "c", loader("c"))  # keep=2: b goes
    assert calls == ["a", "b", "c"]
    assert cache.held("enc") == ["a", "c"]
    cache.get("other", "a", loader("a"))  # owners are separate tables
    assert calls == ["a", "b", "c", "a"] and cache.held("enc") == ["a", "c"]


def test_keep_one_and_forget():
    cache = LoadedModels()
    cache.get("refvnli", ("fpr", "m1"), lambda: 1, keep=1)
    cache.get("refvnli", ("paligemma", "m2"), lambda: 2, keep=1)
    assert cache.held("refvnli") == [("paligemma", "m2")]
    cache.forget("refvnli")
    assert cache.held("refvnli") == []


def test_a_failed_load_is_not_kept_but_a_stated_reason_is():
    cache, calls = LoadedModels(), []

    def failing():
        calls.append("x")
        raise OSError("no weights")

    for _ in range(2):
        with pytest.raises(OSError):
            cache.get("enc", "x", failing)
    assert calls == ["x", "x"] and cache.held("enc") == []
    reason = cache.get("depth", "d", lambda: calls.append("d") or "depth model d is not in the local cache")
    assert cache.get("depth", "d", lambda: calls.append("d") or "other") == reason
    assert calls.count("d") == 1


def test_threads_asking_for_one_model_load_it_once_and_other_models_are_not_blocked():
    cache, calls = LoadedModels(), []
    slow_started, release = threading.Event(), threading.Event()

    def slow():
        calls.append("slow")
        slow_started.set()
        assert release.wait(30)
        return "slow model"

    results = []
    threads = [threading.Thread(target=lambda: results.append(cache.get("enc", "slow", slow))) for _ in range(4)]
    for t in threads:
        t.start()
    assert slow_started.wait(30)
    # while "slow" loads, another model of the same owner loads and is served
    assert cache.get("enc", "fast", lambda: "fast model") == "fast model"
    release.set()
    for t in threads:
        t.join(30)
    assert results == ["slow model"] * 4 and calls == ["slow"]
