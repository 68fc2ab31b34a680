"""The one number and table formatter (CLI, paper tables, HTML, demo, service)."""
from __future__ import annotations

import math

from fpr.render.cells import format_cell, render_rows


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
