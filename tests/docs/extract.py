"""Fenced code blocks of README.md and docs/*.md, as the docs test runs them.

A block is run when its language is a shell (``bash``, ``sh``, ``console``: only its ``$ `` lines) or
``python``; a block without a language, or ``text``/``yaml``/..., is output or a file to read and is not
run. ``<!-- docs-test: skip (reason) -->`` on the line before the opening fence skips one block; the
reason is mandatory (a marker without one is reported, not honoured).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

SHELL = frozenset({"bash", "sh", "shell", "console"})
PYTHON = frozenset({"python", "py"})
FENCE = re.compile(r"^(?P<indent> *)(?P<fence>```+|~~~+)\s*(?P<lang>[\w+-]*)")
SKIP = re.compile(r"^\s*<!--\s*docs-test:\s*skip\b(?P<rest>.*?)-->\s*$")
REASON = re.compile(r"^\s*\((?P<reason>.*\S.*)\)\s*$")
# An untagged block whose lines start like this is a command someone would copy: it must say what it is.
COMMAND_START = re.compile(r"^\s*(\$ )?(\w+=\S+ )*(fpr|make|curl|python3?)(\s|$)")


@dataclass(frozen=True)
class Block:
    """One fenced block: where it starts (the opening fence's line, 1-based), its language and text."""

    path: str
    line: int
    lang: str
    text: str
    skip_marker: bool = False  # a docs-test skip marker precedes it
    skip_reason: str = ""  # the marker's reason ('' when the marker has none)

    @property
    def id(self) -> str:
        return f"{self.path}:{self.line}"

    @property
    def kind(self) -> str:
        """'shell', 'python', or 'output' (not run)."""
        if self.lang in SHELL:
            return "shell"
        if self.lang in PYTHON:
            return "python"
        return "output"

    def doc_line(self, block_line: int) -> int:
        """The document line of the block's line ``block_line`` (1 = the first line after the fence)."""
        return self.line + block_line


def parse(text: str, path: str) -> list[Block]:
    """Every fenced block of a markdown text, with the skip marker of the line before it."""
    lines = text.splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, start = m.group("fence"), i
        body: list[str] = []
        i += 1
        while i < len(lines) and not lines[i].lstrip().startswith(fence):
            body.append(lines[i].removeprefix(m.group("indent")))
            i += 1
        if i == len(lines):
            raise ValueError(f"{path}:{start + 1}: code block never closed (its fence is {fence})")
        i += 1
        prev = lines[start - 1] if start > 0 else ""
        skip = SKIP.match(prev)
        reason = REASON.match(skip.group("rest")) if skip else None
        blocks.append(Block(path, start + 1, m.group("lang").lower(), "\n".join(body) + "\n",
                            skip_marker=bool(skip), skip_reason=reason.group("reason").strip() if reason else ""))
    return blocks


def doc_files(root: Path) -> list[Path]:
    """README.md, then docs/*.md in name order: the documents whose examples are executed."""
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def all_blocks(root: Path) -> list[Block]:
    return [b for f in doc_files(root) for b in parse(f.read_text(encoding="utf-8"), str(f.relative_to(root)))]


def untagged_commands(block: Block) -> list[int]:
    """Lines (1-based, within the block) of an output block that look like commands to copy."""
    if block.kind != "output" or block.lang not in ("", "text", "txt"):
        return []
    return [n for n, line in enumerate(block.text.splitlines(), 1) if COMMAND_START.match(line)]


def console_commands(text: str) -> str:
    """A console block's ``$ `` lines (and their ``\\`` continuations) as a script; the rest is output."""
    out: list[str] = []
    cont = False
    for line in text.splitlines():
        if line.startswith("$ ") or cont:
            out.append(line[2:] if line.startswith("$ ") and not cont else line)
            cont = line.rstrip().endswith("\\")
        else:
            out.append("")  # keep the line numbers of the block
    return "\n".join(out) + "\n"
