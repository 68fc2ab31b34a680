"""The one number and table formatter (CLI, paper tables, HTML, demo, service)."""
from __future__ import annotations

import math

from fpr.render.cells import FALLBACK_WIDTH, MIN_WIDTH, clip, fold_columns, format_cell, render_rows, terminal_width


def test_numbers_and_intervals_print_one_way():
    assert format_cell(0.51234) == "0.512"
    assert format_cell(0.51234, 0.4012, 0.6149) == "0.512 [0.40,0.61]"
    assert format_cell(0.5, math.nan, 0.6) == "0.500"
    assert format_cell(None) == format_cell(math.nan) == format_cell(math.inf) == "-"
    assert format_cell(0.5, 0.4, 0.6, latex=True) == "0.500 {\\scriptsize[0.40, 0.60]}"


def test_tables_show_checksums_short_and_machine_formats_keep_them_whole():
    digest = "sha256:" + "ab" * 32
    rows = [{"name": "ix", "weights_checksum": digest, "fingerprint": "cd" * 32, "note": "sha256:notahash"}]
    table = render_rows(rows, "table")
    assert "sha256:abababababab " in table + " " and digest not in table and "cdcdcdcdcdcd" in table
    assert "cd" * 32 not in table and "sha256:notahash" in table
    assert digest in render_rows(rows, "csv") and digest in render_rows(rows, "json")


def test_a_wide_table_cuts_long_text_with_an_ellipsis_and_keeps_numbers_and_the_key_whole():
    rows = [{"name": "copy-paste", "n": 12345, "description": "x" * 60},
            {"name": "clip-t", "n": 7, "description": "short"}]
    got = render_rows(rows, "table", width=40).splitlines()
    # natural: 10 + 2 + 5 + 2 + 60 = 79; the description gives 39 characters: 10 + 2 + 5 + 2 + 21 = 40
    assert got == ["name            n  description",
                   "----------  -----  ---------------------",
                   "copy-paste  12345  " + "x" * 20 + "…",
                   "clip-t          7  short"]
    assert max(map(len, got)) == 40
    assert "x" * 60 in render_rows(rows, "table")  # no width: whole
    assert "x" * 60 in render_rows(rows, "csv", width=40) and "x" * 60 in render_rows(rows, "json", width=40)


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
