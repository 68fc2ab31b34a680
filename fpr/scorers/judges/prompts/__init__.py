"""Versioned prompt templates of the model judges, one ``.txt`` file each in this folder.

A file starts with ``id:`` and ``version:`` lines, then ``[system]`` and ``[user]``
sections (either may be absent); ``$name`` placeholders are filled by
:meth:`Template.render`. The id and version enter every cache key, and so does
the rendered text: editing a template without bumping its version still makes
new requests, bumping the version records the change in provenance.
"""
from __future__ import annotations

import string
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path

from fpr import keys
from fpr.errors import InputError, NotFoundError


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
    return Template(meta["id"], meta["version"], body, keys.sha256_hex(text)[:16])


@lru_cache(maxsize=None)
def load_template(name: str) -> Template:
    """The template file ``<name>.txt`` shipped in this package."""
    res = resources.files(__name__).joinpath(f"{name}.txt")
    if not res.is_file():
        raise NotFoundError(f"no judge prompt template '{name}'", where=str(res))
    return _parse(name, res.read_text(encoding="utf-8"))


def load_template_file(path: str | Path, placeholders: tuple[str, ...] = ()) -> Template:
    """A user's template file (the same format); its sections may use only ``placeholders`` (``$$`` is a ``$``)."""
    p = Path(path).expanduser()
    hint = "write it like fpr/scorers/judges/prompts/<name>.txt: id: and version: lines, then [system]/[user] sections"
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError("judge prompt template not found", where=str(p), hint=hint) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read the judge prompt template ({type(exc).__name__})", where=str(p)) from None
    try:
        t = _parse(p.name, text)
    except ValueError as exc:
        raise InputError(str(exc), where=str(p), hint=hint) from None
    if t.section("user") is None:
        raise InputError("the judge prompt template has no [user] section", where=str(p), hint=hint)
    dummy = {name: "x" for name in placeholders}
    for name, body in t.sections:
        try:
            string.Template(body).substitute(**dummy)
        except KeyError as exc:
            raise InputError(f"section [{name}] uses ${exc.args[0]}, which this scorer does not fill", where=str(p),
                             hint=f"placeholders: {', '.join('$' + n for n in placeholders) or 'none'}; "
                                  f"write $$ for a literal $") from None
        except ValueError:
            raise InputError(f"section [{name}] has a '$' that is not a placeholder", where=str(p),
                             hint="write $$ for a literal $") from None
    return t
