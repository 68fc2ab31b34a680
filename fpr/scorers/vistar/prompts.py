"""VISTAR's structured prompt language: ``[role|aspect] core text {key="value", ...}``.

VISTAR (paper 004, sec. 3.2) writes every prompt as a triplet: routing metadata
``[role|angle]`` that the generator never sees and that sends the image to a scoring
function, a natural-language core (what the generator is given), and optional control
parameters ``{key="value"}``. The paper says the language is specified in EBNF but does
not print it; the grammar below is fpr's, written down in ``docs/evaluators.md``::

    prompt  = ws "[" ws code ws "|" ws code ws "]" core [ "{" ws [ param { ws "," ws param } ] ws "}" ] ws
    code    = letter { letter | digit | "-" | "_" }
    core    = one or more characters other than "[", "]", "{", "}" (trimmed; not empty)
    param   = key ws "=" ws string
    key     = ( letter | "_" ) { letter | digit | "_" }
    string  = '"' { any character but '"' and "\\" | "\\" ( '"' | "\\" ) } '"'

This module is pure (no files, no models): it parses one prompt and maps its control
parameters to the per-query columns the VISTAR scorers read. It lives beside the
scorers because that mapping is scorer knowledge; it imports no scorer module.
Errors are one line naming the column (1-based, in characters of the prompt).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from fpr.errors import InputError

# Control parameter -> the per-query column a scorer reads (the scorer validates the value).
PARAM_COLUMNS: dict[str, str] = {
    "text": "expected_text",          # vistar-tr
    "light": "light_direction",       # vistar-li: a direction name, phrase or x,y,z
    "light_direction": "light_direction",
    "count": "expected_count",        # CPA: person count (an integer >= 0)
    "posture": "expected_posture",    # CPA
    "expression": "expected_expression",  # CPA
    "subject": "subject",             # vistar-cse
    "panels": "panels",               # vistar-cse: grid, e.g. 2x2
    "sub_prompts": "sub_prompts",     # vistar-cse: ';'-separated panel descriptions
}


class PromptSyntaxError(InputError):
    """A prompt that does not follow the grammar; ``column`` is 1-based."""

    def __init__(self, message: str, column: int, *, where: str = "prompt"):
        self.column = column
        self.message = message
        super().__init__(f"{where}, column {column}: {message}",
                         hint='write prompts as [role|aspect] core text {key="value", ...}')


@dataclass(frozen=True)
class StructuredPrompt:
    """One parsed prompt: routing, the text the generator sees, and control parameters (in order)."""

    role: str
    aspect: str
    core: str
    params: dict[str, str] = field(default_factory=dict)

    def expected_values(self) -> dict[str, str]:
        """The per-query columns the scorers read, from the control parameters they know."""
        out: dict[str, str] = {}
        for key, value in self.params.items():
            col = PARAM_COLUMNS.get(key)
            if col is not None:
                out[col] = value
        return out

    def unknown_params(self) -> list[str]:
        """Parameters no fpr scorer reads (kept, e.g. the paper's ``font``)."""
        return [k for k in self.params if k not in PARAM_COLUMNS]


class _Scanner:
    """A cursor over the prompt text; every error names the 1-based column it stopped at."""

    def __init__(self, text: str, where: str):
        self.text, self.pos, self.where = text, 0, where

    def fail(self, message: str, pos: int | None = None) -> PromptSyntaxError:
        return PromptSyntaxError(message, (self.pos if pos is None else pos) + 1, where=self.where)

    def peek(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def at_end(self) -> bool:
        return self.pos >= len(self.text)

    def skip_ws(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos].isspace():
            self.pos += 1

    def describe(self) -> str:
        return f"'{self.peek()}'" if not self.at_end() else "the end of the prompt"

    def expect(self, ch: str, what: str) -> None:
        if self.peek() != ch:
            raise self.fail(f"expected '{ch}' {what}, found {self.describe()}")
        self.pos += 1

    def code(self, what: str) -> str:
        start = self.pos
        if not (self.peek().isascii() and self.peek().isalpha()):
            article = "an" if what[0] in "aeiou" else "a"
            raise self.fail(f"expected {article} {what} code (a letter first), found {self.describe()}")
        while self.peek() and (self.peek().isascii() and (self.peek().isalnum() or self.peek() in "-_")):
            self.pos += 1
        return self.text[start:self.pos]

    def key(self) -> str:
        start = self.pos
        c = self.peek()
        if not (c.isascii() and (c.isalpha() or c == "_")):
            raise self.fail(f"expected a parameter key (a letter or '_' first), found {self.describe()}")
        while self.peek() and self.peek().isascii() and (self.peek().isalnum() or self.peek() == "_"):
            self.pos += 1
        return self.text[start:self.pos]

    def string(self, key: str) -> str:
        if self.peek() != '"':
            raise self.fail(f"expected a double-quoted value for key '{key}', found {self.describe()}")
        open_at = self.pos
        self.pos += 1
        out: list[str] = []
        while True:
            c = self.peek()
            if c == "":
                raise self.fail(f"the value of key '{key}' opened here is not closed with '\"'", open_at)
            if c == "\\":
                nxt = self.text[self.pos + 1:self.pos + 2]
                if nxt not in ('"', "\\"):
                    raise self.fail(f"unknown escape '\\{nxt}' in the value of key '{key}' (only \\\" and \\\\)")
                out.append(nxt)
                self.pos += 2
                continue
            self.pos += 1
            if c == '"':
                return "".join(out)
            out.append(c)


def parse_prompt(text: str, *, where: str = "prompt") -> StructuredPrompt:
    """Parse ``[role|aspect] core {key="value", ...}``; role and aspect codes are upper-cased.

    Whether the role and aspect exist is not the grammar's business: the ontology
    (:mod:`fpr.scorers.vistar.roles` and its relevance file) checks them, so a user's own roles parse.
    """
    s = _Scanner(text, where)
    s.skip_ws()
    s.expect("[", "to open the routing [role|aspect]")
    s.skip_ws()
    role = s.code("role")
    s.skip_ws()
    s.expect("|", f"after role '{role}' in the routing [role|aspect]")
    s.skip_ws()
    aspect = s.code("aspect")
    s.skip_ws()
    s.expect("]", f"to close the routing after aspect '{aspect}'")
    core_start = s.pos
    while not s.at_end() and s.peek() != "{":
        if s.peek() in "[]}":
            raise s.fail(f"'{s.peek()}' is not allowed in the prompt text (only one routing, parameters in {{...}})")
        s.pos += 1
    core = text[core_start:s.pos].strip()
    if not core:
        raise s.fail("the prompt text after the routing is empty")
    params: dict[str, str] = {}
    if s.peek() == "{":
        s.pos += 1
        s.skip_ws()
        if s.peek() != "}":
            while True:
                key_at = s.pos
                key = s.key()
                if key in params:
                    raise s.fail(f"key '{key}' is given twice", key_at)
                s.skip_ws()
                s.expect("=", f"after key '{key}'")
                s.skip_ws()
                params[key] = s.string(key)
                s.skip_ws()
                if s.peek() == ",":
                    s.pos += 1
                    s.skip_ws()
                    continue
                if s.peek() == "}":
                    break
                raise s.fail(f"expected ',' or '}}' after the value of key '{key}', found {s.describe()}")
        s.pos += 1
        s.skip_ws()
        if not s.at_end():
            raise s.fail("nothing may follow the control parameters {...}")
    return StructuredPrompt(role=role.upper(), aspect=aspect.upper(), core=core, params=params)
