"""The verdict block as printed: every number is the result's, claim (i) shown as its two effects, the variant
labelled, the regime per encoder, one world's block with its label; a result stored before the cells existed."""
from __future__ import annotations

import re

import pandas as pd

from fpr.render.claims import claims_lines, verdict_lines
from fpr.workflows.meta import ClaimsResult, encoder_claims


def _result() -> ClaimsResult:
    from tests.metrics.test_figure3 import _frame

    res = encoder_claims(_frame(), n_boot=200)
    res.info.update(general="gen-enc", specialist="spec-enc")
    return res


def test_every_printed_number_is_the_result_s():
    res = _result()
    lines = verdict_lines(res, world="easy world")
    text = "\n".join(lines)
    assert lines[0].startswith("verdicts (easy world): strict PPA against the truth 'drift' on cross-context pairs")
    cells = {c["metric"]: c for c in res.cells}
    row = next(line for line in lines if line.strip().startswith("specialist spec-enc"))
    c = cells["specialist_map"]
    assert f"mAP {c['ppa']:.3f} [{c['ppa_lo']:.3f}, {c['ppa_hi']:.3f}] (ties 50.0%)" in row
    assert row.split()[2:4] == ["Sim", f"{cells['specialist_sim']['ppa']:.3f}"]
    assert next(line for line in lines if line.strip().startswith("general gen-enc")).split()[2:4] == \
        ["Sim", f"{cells['general_sim']['ppa']:.3f}"]
    eff = {(e["kind"], e["fixed"]): e for e in res.effects}
    p = eff[("protocol", "general")]
    assert f"protocol effect (mAP - Sim): general {p['diff']:+.3f} [{p['diff_lo']:+.3f}, {p['diff_hi']:+.3f}]" in text
    e = eff[("encoder", "mAP")]
    assert f"mAP {e['diff']:+.3f} [{e['diff_lo']:+.3f}, {e['diff_hi']:+.3f}]" in text
    for v in res.verdicts:
        assert (f"claim {v['claim']}: PPA {v['ppa_a']:.3f} vs {v['ppa_b']:.3f}, difference {v['diff']:+.3f} "
                f"[{v['diff_lo']:+.3f}, {v['diff_hi']:+.3f}] over {v['n_pairs']} pairs -> {v['verdict'].upper()}") in text
    # claim (i) = encoder effect under mAP + protocol effect under the general encoder, in right pairs exactly
    m = re.search(r"= encoder effect under mAP ([+-][\d.]+) \+ protocol effect under the general encoder ([+-][\d.]+) "
                  r"\(right pairs of 4: ([+-]\d+) = ([+-]\d+) ([+-]\d+), exact\)", text)
    assert m and int(m.group(3)) == int(m.group(4)) + int(m.group(5))
    assert (m.group(1), m.group(2)) == (f"{e['diff']:+.3f}", f"{p['diff']:+.3f}")
    (var,) = res.variants
    assert (f"variant, claim (ii) ties-half (a metric tie counts 1/2; not VISTAR's): PPA {var['ppa_a']:.3f} vs "
            f"{var['ppa_b']:.3f}, difference {var['diff']:+.3f} [{var['diff_lo']:+.3f}, {var['diff_hi']:+.3f}] -> "
            f"{var['verdict'].upper()} (not the verdict)") in text
    assert ("regime, specialist spec-enc: oracle mAP 0.900; AP = 1 for 50% of the 8 judged queries; AP ties in "
            "50.0% of the 4 judged pairs") in text
    assert ("regime, general gen-enc: oracle mAP 0.500; AP = 1 for 0% of the 8 judged queries; AP ties in 0.0% of "
            "the 4 judged pairs") in text
    assert "note: claim (ii) is judged on a saturated specialist: AP = 1 for at least 50% of A@0 (100%), " \
           "B@0 (50%), B@0.5 (50%)" in text


def test_claims_lines_head_the_table_with_the_world_and_machine_formats_give_the_table_only():
    res = _result()
    lines = claims_lines(res, world="hard world")
    assert lines[0].startswith("hard world: the paper's Figure 3 as a 2x2 per method")
    assert lines[2].startswith("\nverdicts (hard world):")
    csv = claims_lines(res, "csv")
    assert len(csv) == 1 and csv[0].splitlines()[0].startswith("seed,method,general_sim")


def test_a_result_stored_before_the_cells_existed_prints_its_claims_only():
    res = _result()
    old = ClaimsResult.from_json({"table": res.table, "verdicts": res.verdicts, "info": res.info})
    lines = verdict_lines(old)
    assert lines[0].startswith("verdicts: ") and len(lines) == 1 + len(res.verdicts)
    assert ClaimsResult.from_json(res.as_json()) == res
    pd.testing.assert_frame_equal(pd.DataFrame(old.table), pd.DataFrame(res.table))
