"""The one registry mechanism: :class:`Registry` ``[T]`` of named things (scorers, encoders), and the one
place fpr imports a module by name (:func:`import_module`, :func:`import_object`).

A registry knows where its built-in entries live (``builtin``: name -> module, a declared table, so
finding one entry imports only its module), finds third-party ones through Python entry points
(group ``fpr.scorers``, ``fpr.encoders``, ...; ``name = "package.module"`` or
``name = "package.module:object"``, the object then registered itself if its module did not), and lists
the valid names when a name is unknown. A module registers its entries on import (``registry.register``),
exactly as a plugin's does; an entry point that fails to import is an error naming the plugin and its
package, never silently skipped (a missing scorer would change what a run measures).

``importlib.import_module`` appears in this module only (``tests/test_ownership.py``): the lazy facade
(:mod:`fpr.api`), the CLI's command modules and the workers resolve names through :func:`import_object`.
"""
from __future__ import annotations

import importlib
import threading
from typing import Any, Callable, Generic, Iterable, TypeVar

from fpr.errors import FprError, NotFoundError, choices_hint

T = TypeVar("T")


def import_module(name: str) -> Any:
    """The module ``name`` (imported on first use)."""
    return importlib.import_module(name)


def import_object(ref: str) -> Any:
    """``"package.module:object.attr"`` -> that object; ``"package.module"`` -> the module."""
    module, _, attr = ref.partition(":")
    value = importlib.import_module(module)
    for part in filter(None, attr.split(".")):
        value = getattr(value, part)
    return value


def _entry_points(group: str) -> list:
    from importlib.metadata import entry_points  # only when a registry looks past its built-in entries

    return sorted(entry_points(group=group), key=lambda e: e.name)


def load_entry_point(ep: Any, group: str) -> Any:
    """Import an entry point's ``module[:object]`` (its object, or its module); a failure is one error line
    naming the plugin and the package it came from."""
    dist = getattr(ep, "dist", None)
    package = f"{dist.name} {dist.version}" if dist is not None else "an installed package"
    try:
        return import_object(ep.value.strip())
    except Exception as exc:  # a plugin's own failure, reported with its name
        raise FprError(f"plugin '{ep.name}' ({group}, from {package}) failed to load: {type(exc).__name__}: {exc}",
                       hint=f"fix or uninstall {package.split()[0]}") from exc


class Registry(Generic[T]):
    """Named entries of one kind: ``register``, ``get`` (lazy: only the module that holds the name),
    ``all`` (every built-in module and plugin), ``names``."""

    def __init__(self, kind: str, group: str, builtin: dict[str, str], *, name_of: Callable[[T], str],
                 item_type: type | None = None, plural: str | None = None, more_modules: tuple[str, ...] = ()):
        self.kind, self.group, self.plural = kind, group, plural or f"{kind}s"
        self.builtin = dict(builtin)  # name -> module that registers it
        self.more_modules = tuple(more_modules)  # modules whose entries have no fixed names (found on disk)
        self.name_of, self.item_type = name_of, item_type
        self.items: dict[str, T] = {}
        self._modules: set[str] = set()
        self._complete = False
        self._lock = threading.RLock()

    def register(self, item: T, *, replace: bool = False) -> T:
        name = self.name_of(item)
        if name in self.items and not replace and self.items[name] is not item:
            raise ValueError(f"{self.kind} {name!r} is already registered")
        self.items[name] = item
        return item

    def unregister(self, name: str) -> None:
        self.items.pop(name, None)

    def modules(self) -> tuple[str, ...]:
        """The built-in modules, in their declared order, each once."""
        return tuple(dict.fromkeys([*self.builtin.values(), *self.more_modules]))

    def _load(self, module: str) -> None:
        if module not in self._modules:
            import_module(module)  # a declared module that is missing is a packaging bug: let it raise
            self._modules.add(module)

    def _load_plugin(self, ep: Any) -> None:
        value = load_entry_point(ep, self.group)
        if self.item_type is not None and isinstance(value, self.item_type) and self.name_of(value) not in self.items:
            self.register(value)

    def find(self, name: str) -> T | None:
        """The entry ``name``, importing only the module that declares it (a built-in one, or the entry point
        of that name); None when neither has it."""
        with self._lock:
            if name not in self.items and name in self.builtin:
                self._load(self.builtin[name])
            if name not in self.items and not self._complete:
                for ep in _entry_points(self.group):
                    if ep.name == name:
                        self._load_plugin(ep)
            return self.items.get(name)

    def load_all(self) -> None:
        """Import every built-in module and every plugin of the group (once)."""
        with self._lock:
            if self._complete:
                return
            for module in self.modules():
                self._load(module)
            for ep in _entry_points(self.group):
                self._load_plugin(ep)
            self._complete = True

    def all(self) -> dict[str, T]:
        self.load_all()
        return dict(sorted(self.items.items()))

    def names(self) -> list[str]:
        return list(self.all())

    def known_names(self) -> list[str]:
        """Every name this registry can resolve, imported or not: the built-in table, what is registered and
        the entry points' names. Nothing is imported, so an unknown name is refused before any module (and
        the model libraries they bring) loads."""
        with self._lock:
            eps = [] if self._complete else [ep.name for ep in _entry_points(self.group)]
            return sorted({*self.builtin, *self.items, *eps})

    def get(self, name: str) -> T:
        """The entry ``name``; unknown is a :class:`~fpr.errors.NotFoundError` listing the valid names."""
        found = self.find(name)
        if found is not None:
            return found
        raise NotFoundError(f"unknown {self.kind} '{name}'", hint=choices_hint(self.known_names(), self.plural, given=name))


def load_group(group: str) -> list[str]:
    """Import every entry point of ``group``; the names loaded (:func:`fpr.plugins.load_plugins`)."""
    loaded = []
    for ep in _entry_points(group):
        load_entry_point(ep, group)
        loaded.append(ep.name)
    return loaded



__all__ = ["Registry", "import_module", "import_object", "load_entry_point", "load_group"]
