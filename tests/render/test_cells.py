"""The one number and table formatter (CLI, paper tables, HTML, demo, service)."""
from __future__ import annotations

import math

from fpr.render.cells import (FALLBACK_WIDTH, MIN_WIDTH, WHOLE, clip, fold_columns, format_cell, render_rows,
                              terminal_width, wrap_cell)


def test_numbers_and_intervals_print_one_way():
    assert format_cell(0.51234) == "0.512"
    assert format_cell(0.51234, 0.4012, 0.6149) == "0.512 [0.401,0.615]"
    assert format_cell(0.5, math.nan, 0.6) == "0.500"
    assert format_cell(None) == format_cell(math.nan) == format_cell(math.inf) == "-"
    assert format_cell(0.5, 0.4, 0.6, latex=True) == "0.500 {\\scriptsize[0.400, 0.600]}"


def test_tables_show_checksums_short_and_machine_formats_keep_them_whole():
    digest = "sha256:" + "ab" * 32
    rows = [{"name": "ix", "weights_checksum": digest, "fingerprint": "cd" * 32, "note": "sha256:notahash"}]
    table = render_rows(rows, "table")
    assert "sha256:abababababab " in table + " " and digest not in table and "cdcdcdcdcdcd" in table
    assert "cd" * 32 not in table and "sha256:notahash" in table
    assert digest in render_rows(rows, "csv") and digest in render_rows(rows, "json")


def test_a_wide_table_wraps_long_text_and_keeps_numbers_and_the_key_whole():
    rows = [{"name": "copy-paste", "n": 12345, "description": "flags generations that reproduce a reference"},
            {"name": "clip-t", "n": 7, "description": "short"}]
    got = render_rows(rows, "table", width=40).splitlines()
    # natural: 10 + 2 + 5 + 2 + 44 = 63; the description gives 23 characters: 10 + 2 + 5 + 2 + 21 = 40
    assert got == ["name            n  description",
                   "----------  -----  ---------------------",
                   "copy-paste  12345  flags generations",
                   "                   that reproduce a",
                   "                   reference",
                   "clip-t          7  short"]
    assert max(map(len, got)) == 40
    assert rows[0]["description"] in render_rows(rows, "table", width=WHOLE)  # --wide: whole, one line
    assert len(render_rows(rows, "table", width=WHOLE).splitlines()) == 4
    text = rows[0]["description"]
    assert text in render_rows(rows, "csv", width=40) and text in render_rows(rows, "json", width=40)


def test_wrapping_breaks_after_blanks_commas_semicolons_and_slashes_and_loses_nothing():
    assert wrap_cell("a.metric,b.metric,c.metric", 18) == ["a.metric,b.metric,", "c.metric"]
    assert wrap_cell("one two  three", 7) == ["one two", "three"]
    assert wrap_cell("/data/animals/leopard/leo-017", 14) == ["/data/animals/", "leopard/", "leo-017"]
    assert wrap_cell("x" * 25, 10) == ["x" * 10, "x" * 10, "x" * 5]  # one word longer than the column
    assert wrap_cell("short", 10) == ["short"]
    text = "model judge agent with tools (grounding, highlight, difference, scene graph): min of 0-10 sub-scores"
    for width in (5, 9, 16, 33):
        lines = wrap_cell(text, width)
        assert max(map(len, lines)) <= width and "".join(lines).replace(" ", "") == text.replace(" ", "")


def test_a_column_keeps_its_longest_name_whole_when_the_table_can_afford_it():
    names = "s.prompt_following,s.edit_following,s.subject_consistency,s.x"
    rows = [{"name": "s", "metrics": names, "options": names.replace("s.", "o.")}]
    # at TEXT_FLOOR both lists would share one block of 4 + 2 + 16 + 2 + 16 = 40, splitting names; at their
    # longest name (22) they fold into two blocks of 4 + 2 + 34 and each name stays whole
    blocks = render_rows(rows, "table", width=40).split("\n\n")
    assert [b.splitlines()[2:] for b in blocks] == [
        ["s     s.prompt_following,", "      s.edit_following,", "      s.subject_consistency,s.x"],
        ["s     o.prompt_following,", "      o.edit_following,", "      o.subject_consistency,o.x"]]


def test_every_table_folds_to_the_terminal_unless_asked_whole(monkeypatch):
    rows = [{"name": "n", "description": "word " * 60}]
    monkeypatch.setenv("COLUMNS", "50")
    assert max(map(len, render_rows(rows, "table").splitlines())) <= 50  # no width given: the terminal's
    monkeypatch.delenv("COLUMNS")
    monkeypatch.setattr("os.get_terminal_size", lambda fd=1: (_ for _ in ()).throw(OSError("no terminal")))
    assert max(map(len, render_rows(rows, "table").splitlines())) == FALLBACK_WIDTH


def test_columns_that_cannot_be_cut_fold_into_blocks_repeating_the_key():
    rows = [{"run": "r1", "a": 1.0, "b": 2.0, "c": 3.0}]  # numbers: never cut; 2 + 3 * (2 + 5) = 23
    got = render_rows(rows, "table", width=40).split("\n\n")  # 40 is the narrowest table (MIN_WIDTH)
    assert len(got) == 1
    assert fold_columns([2, 5, 5, 5], 16) == [[0, 1, 2], [0, 3]]  # 2+2+5+2+5 = 16 fits, + 7 does not
    assert fold_columns([30, 20], 16) == [[0, 1]]  # a column too wide for any block is not dropped
    wide = [{"key": "k", **{f"col{i}": i + 0.5 for i in range(12)}}]
    blocks = render_rows(wide, "table", width=40).split("\n\n")
    assert len(blocks) == 3 and all(b.startswith("key") for b in blocks)
    assert all(max(map(len, b.splitlines())) <= 40 for b in blocks)
    assert {c for b in blocks for c in b.splitlines()[0].split()} == set(wide[0])  # every column, once


def test_terminal_width_prefers_the_option_then_columns_then_the_fallback(monkeypatch):
    monkeypatch.setenv("COLUMNS", "123")
    assert terminal_width() == 123 and terminal_width(77) == 77
    assert terminal_width(5) == MIN_WIDTH  # narrower cannot be read
    monkeypatch.delenv("COLUMNS")

    def no_terminal(fd=1):
        raise OSError("not a terminal")

    monkeypatch.setattr("os.get_terminal_size", no_terminal)  # as in a pipe, whatever runs pytest
    assert terminal_width() == FALLBACK_WIDTH
    assert clip("abcdef", 4) == "abc…" and clip("abc", 4) == "abc"


def test_blocks_can_repeat_several_key_columns():
    rows = [{"method": "a", "group": "cats", **{f"m{i}": 0.5 for i in range(10)}}]
    blocks = render_rows(rows, "table", width=40, keys=2).split("\n\n")
    assert len(blocks) > 1 and all(b.splitlines()[2].split()[:2] == ["a", "cats"] for b in blocks)
    assert fold_columns([6, 4, 5, 5, 5], 20, keys=2) == [[0, 1, 2], [0, 1, 3], [0, 1, 4]]  # 6+2+4 = 12, + 7


def test_a_value_and_its_interval_print_at_one_precision():
    """``0.999 [1.00,1.00]`` read as a value outside its own interval (issue #33): the ends now print at the
    value's three decimals."""
    assert format_cell(0.999, 0.9981, 0.9999) == "0.999 [0.998,1.000]"
    assert format_cell(0.05, -0.0204, 0.1) == "0.050 [-0.020,0.100]"


def test_a_value_with_its_interval_never_wraps():
    rows = [{"methods": "generations", "metric": "mAP", "ppa": format_cell(0.664, 0.594, 0.793),
             "note": "a long note " * 8}]
    got = render_rows(rows, "table", width=60)
    assert "0.664 [0.594,0.793]" in got  # whole on its line (a comma is no place to break a number)
