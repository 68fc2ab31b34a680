"""``fpr --help`` lists its 20-odd commands in sections by what they are for, not alphabetically (issue #33)."""
from __future__ import annotations

from click.testing import CliRunner

from fpr.cli.main import COMMAND_SECTIONS, cli


def _sections(text: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    current = None
    for line in text.splitlines():
        if line and not line.startswith(" ") and line.endswith(":"):
            current = line[:-1]
            out[current] = []
        elif current and line.startswith("  ") and not line.startswith("   "):
            out[current].append(line.split()[0])
    return out


def test_help_groups_the_commands_and_lists_each_once():
    res = CliRunner().invoke(cli, ["--help"], obj={})
    assert res.exit_code == 0
    sections = _sections(res.output)
    titles = [t for t in sections if t != "Options"]
    assert titles[:5] == ["Evaluate", "Galleries & indices", "Scorers & judges", "Reports", "Service & admin"]
    assert "Commands" not in sections  # no alphabetical list besides them
    assert sections["Evaluate"][:3] == ["demo", "evaluate", "query"] and sections["Reports"][0] == "report"
    assert sections["Service & admin"] == ["serve", "benchmark"] and "Other commands" not in sections
    listed = [n for t in titles for n in sections[t]]
    visible = {n for n, c in cli.commands.items() if not c.hidden}
    assert sorted(listed) == sorted(visible)  # every command, once
    for title, members in COMMAND_SECTIONS.items():  # each in its declared section, in the declared order
        assert sections.get(title.capitalize(), []) == [n for n in members if n in visible]


def test_a_command_in_no_section_is_listed_under_other_commands():
    import click

    @cli.command("zz-probe")
    def probe() -> None:
        """A command no section names."""

    try:
        sections = _sections(CliRunner().invoke(cli, ["--help"], obj={}).output)
        assert sections["Other commands"] == ["zz-probe"]
    finally:
        cli.commands.pop("zz-probe")
    assert isinstance(cli.commands["index"], click.Group)
    assert "Commands:" in CliRunner().invoke(cli, ["index", "--help"], obj={}).output  # sub-groups: click's list
