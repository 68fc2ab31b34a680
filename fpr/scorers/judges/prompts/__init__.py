"""Versioned prompt templates of the model judges, one ``.txt`` file each in this folder.

A file starts with ``id:`` and ``version:`` lines, then ``[system]`` and ``[user]``
sections (either may be absent); ``$name`` placeholders are filled by
:meth:`Template.render`. The id and version enter every cache key, and so does
the rendered text: editing a template without bumping its version still makes
new requests, bumping the version records the change in provenance.
"""
from __future__ import annotations

import hashlib
import string
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

from fpr.errors import NotFoundError


@dataclass(frozen=True)
class Template:
    id: str
    version: str
    sections: tuple[tuple[str, str], ...]
    digest: str

    def section(self, name: str) -> str | None:
        return dict(self.sections).get(name)

    def render(self, name: str, **values) -> str:
        text = self.section(name)
        if text is None:
            raise KeyError(f"template {self.id} has no [{name}] section")
        return string.Template(text).substitute(**values)

    @property
    def tag(self) -> str:
        return f"{self.id}@v{self.version}"


def _parse(name: str, text: str) -> Template:
    meta: dict[str, str] = {}
    sections: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("[") and stripped.endswith("]") and stripped[1:-1].isidentifier():
            sections.append((stripped[1:-1], []))
        elif sections:
            sections[-1][1].append(line)
        elif ":" in line:
            k, v = line.split(":", 1)
            meta[k.strip()] = v.strip()
    if "id" not in meta or "version" not in meta:
        raise ValueError(f"prompt template {name} lacks id:/version: lines")
    body = tuple((k, "\n".join(v).strip("\n")) for k, v in sections)
    return Template(meta["id"], meta["version"], body, hashlib.sha256(text.encode()).hexdigest()[:16])


@lru_cache(maxsize=None)
def load_template(name: str) -> Template:
    """The template file ``<name>.txt`` shipped in this package."""
    res = resources.files(__name__).joinpath(f"{name}.txt")
    if not res.is_file():
        raise NotFoundError(f"no judge prompt template '{name}'", where=str(res))
    return _parse(name, res.read_text(encoding="utf-8"))
