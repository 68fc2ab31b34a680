"""The structured prompt language: hand-written prompts, and the column of every error."""
import pytest

from fpr.errors import InputError
from fpr.scorers.vistar.prompts import PromptSyntaxError, StructuredPrompt, parse_prompt


def test_routing_core_and_parameters():
    p = parse_prompt('[GD|TR] a cafe sign that reads "HARBOR LIGHTS" {text="HARBOR LIGHTS", font="Futura"}')
    assert p == StructuredPrompt("GD", "TR", 'a cafe sign that reads "HARBOR LIGHTS"',
                                 {"text": "HARBOR LIGHTS", "font": "Futura"})
    assert p.expected_values() == {"expected_text": "HARBOR LIGHTS"}
    assert p.unknown_params() == ["font"]


def test_without_parameters_and_with_spaces_everywhere():
    assert parse_prompt("  [ sa | cse ]  four panels of a fox  ") == StructuredPrompt("SA", "CSE", "four panels of a fox", {})
    p = parse_prompt('[PD|LI] a mug on a table { light = "upper-left-front" ,count="2" }')
    assert p.params == {"light": "upper-left-front", "count": "2"}
    assert p.expected_values() == {"light_direction": "upper-left-front", "expected_count": "2"}


def test_empty_braces_escapes_and_codes():
    assert parse_prompt("[GD|TR] x {}").params == {}
    p = parse_prompt(r'[GD-2|T_R] sign {text="say \"hi\" \\ there", posture="sitting"}')
    assert (p.role, p.aspect) == ("GD-2", "T_R")
    assert p.params["text"] == 'say "hi" \\ there'
    assert p.expected_values() == {"expected_text": 'say "hi" \\ there', "expected_posture": "sitting"}


def test_values_keep_braces_commas_and_brackets():
    p = parse_prompt('[GD|TR] a sign {text="A, {B} [C]"}')
    assert p.params == {"text": "A, {B} [C]"}


# (prompt, 1-based column, part of the message); columns counted by hand.
ERRORS = [
    ("GD|TR] x", 1, "expected '[' to open the routing"),
    ("[|TR] x", 2, "expected a role code"),
    ("[GD TR] x", 5, "expected '|' after role 'GD'"),
    ("[GD|] x", 5, "expected an aspect code"),
    ("[GD|TR x", 8, "expected ']' to close the routing after aspect 'TR'"),
    ("[GD|TR]", 8, "the prompt text after the routing is empty"),
    ("[GD|TR]   {text=\"A\"}", 11, "the prompt text after the routing is empty"),
    ("[GD|TR] a [b] sign", 11, "'[' is not allowed in the prompt text"),
    ("[GD|TR] a sign }", 16, "'}' is not allowed"),
    ('[GD|TR] sign {light "left"}', 21, "expected '=' after key 'light'"),
    ('[GD|TR] sign {light=left}', 21, "expected a double-quoted value for key 'light'"),
    ('[GD|TR] sign {text="A}', 20, "the value of key 'text' opened here is not closed"),
    ('[GD|TR] sign {text="A" font="B"}', 24, "expected ',' or '}' after the value of key 'text'"),
    ('[GD|TR] sign {text="A",}', 24, "expected a parameter key"),
    ('[GD|TR] sign {1x="A"}', 15, "expected a parameter key"),
    ('[GD|TR] sign {text="A", text="B"}', 25, "key 'text' is given twice"),
    ('[GD|TR] sign {text="A"} more', 25, "nothing may follow the control parameters"),
    ('[GD|TR] sign {text="A\\n"}', 22, "unknown escape '\\n'"),
    ('[GD|TR] sign {text="A"', 23, "expected ',' or '}' after the value of key 'text', found the end"),
]


@pytest.mark.parametrize("text,column,message", ERRORS)
def test_every_error_names_its_column(text, column, message):
    with pytest.raises(PromptSyntaxError) as e:
        parse_prompt(text, where="prompts.csv row 4")
    assert e.value.column == column
    assert message in e.value.message
    line = e.value.one_line()
    assert line.startswith(f"prompts.csv row 4, column {column}: ")
    assert "\n" not in line and isinstance(e.value, InputError)


def test_brief_example_light_without_equals():
    # the column points at the character after the key (where '=' should be)
    text = '[PD|LI] lamp on a desk {light "left"}'
    with pytest.raises(PromptSyntaxError) as e:
        parse_prompt(text, where="prompts.csv row 4")
    assert text[e.value.column - 1] == '"'
    assert str(e.value).startswith("prompts.csv row 4, column 31: expected '=' after key 'light'")
