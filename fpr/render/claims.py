"""The paper's Figure 3 judged on one world, as text: the 2x2 of means, then the verdict block (no IO).

:func:`claims_lines` takes one world's claims result (:class:`fpr.workflows.meta.ClaimsResult`, or anything
with its attributes) and returns lines; ``fpr meta --general`` prints them, ``fpr demo`` prints them once per
world it judges, each with its world label, and ``benchmarks/docs_figures.py`` renders the block from the line
starting with ``verdicts`` into the README.
"""
from __future__ import annotations

from fpr.render.cells import render_rows

ENCODERS = ("general", "specialist")
PROTOCOLS = (("Sim", "sim"), ("mAP", "map"))


def _iv(x: float, lo: float, hi: float, signed: bool = False) -> str:
    f = "{:+.3f}" if signed else "{:.3f}"
    return f"{f.format(x)} [{f.format(lo)}, {f.format(hi)}]"


def _pct(x) -> str:
    return "n/a" if x is None or x != x else f"{100 * x:.0f}%"


def _name(info: dict, enc: str) -> str:
    return f"{enc} {info[enc]}" if info.get(enc) else enc


TABLE_COLUMNS = ("seed", "method", "general_sim", "general_map", "specialist_sim", "specialist_map",
                 "specialist_ap1_share", "n")


def two_by_two_rows(claims) -> list[dict]:
    return [{k: (round(r[k], 3) if isinstance(r[k], float) else r[k]) for k in TABLE_COLUMNS} for r in claims.table]


def verdict_lines(claims, world: str | None = None, saturated: float | None = None) -> list[str]:
    """The verdict block: header, the four cells' strict PPA, the protocol and encoder effects, both claims
    (claim (i) with its decomposition), claim (ii)'s ties-half variant, and the gallery's regime per encoder.
    A result without cells (stored before they existed) gives the header and the claims only."""
    from fpr.metrics.headroom import SATURATED

    saturated = SATURATED if saturated is None else saturated
    i = claims.info
    label = f" ({world})" if world else ""
    lines = [f"verdicts{label}: strict PPA against the truth '{i['truth']}' on {i['pairs']}; difference with a "
             f"paired 95% bootstrap interval over queries ({i['n_boot']} resamples, world seeds "
             f"{', '.join(map(str, i['seeds']))})"]
    cells = {c["metric"]: c for c in claims.cells}
    effects = {(e["kind"], e["fixed"]): e for e in claims.effects}
    if cells:
        n = next(iter(cells.values()))["n_pairs"]
        lines.append(f"  Figure 3, strict PPA of each cell on the same {n} pairs [95%]:")
        width = max(len(_name(i, e)) for e in ENCODERS)
        for enc in ENCODERS:
            row = "    " + _name(i, enc).ljust(width)
            for label_, key in PROTOCOLS:
                c = cells[f"{enc}_{key}"]
                ties = f" (ties {c['tie_share']:.1%})" if c["n_ties"] else ""
                row += f"   {label_} {_iv(c['ppa'], c['ppa_lo'], c['ppa_hi'])}{ties}"
            lines.append(row)
    if effects:
        p, e = (lambda f: effects[("protocol", f)]), (lambda f: effects[("encoder", f)])
        lines.append("  protocol effect (mAP - Sim): general "
                     f"{_iv(p('general')['diff'], p('general')['diff_lo'], p('general')['diff_hi'], True)}, "
                     f"specialist {_iv(p('specialist')['diff'], p('specialist')['diff_lo'], p('specialist')['diff_hi'], True)}")
        lines.append("  encoder effect (specialist - general): Sim "
                     f"{_iv(e('Sim')['diff'], e('Sim')['diff_lo'], e('Sim')['diff_hi'], True)}, "
                     f"mAP {_iv(e('mAP')['diff'], e('mAP')['diff_lo'], e('mAP')['diff_hi'], True)}")
    dec = claims.decomposition or {}
    for k, v in enumerate(claims.verdicts):
        lines.append(f"  claim {v['claim']}: PPA {v['ppa_a']:.3f} vs {v['ppa_b']:.3f}, difference {v['diff']:+.3f} "
                     f"[{v['diff_lo']:+.3f}, {v['diff_hi']:+.3f}] over {v['n_pairs']} pairs -> {v['verdict'].upper()}")
        if dec and v["claim"] == dec["claim"]:
            t = dec["terms"]
            lines.append(f"    = encoder effect under mAP {t[0]['diff']:+.3f} + protocol effect under the general "
                         f"encoder {t[1]['diff']:+.3f} (right pairs of {v['n_pairs']}: {dec['n_right_diff']:+d} = "
                         f"{t[0]['n_right_diff']:+d} {t[1]['n_right_diff']:+d}"
                         f"{', exact' if dec['exact'] else ', NOT EXACT'})")
        elif effects and (v["metric_a"], v["metric_b"]) == ("specialist_map", "specialist_sim"):
            lines.append("    = the protocol effect under the specialist")
    for v in claims.variants:
        lines.append(f"  variant, {v['claim']}: PPA {v['ppa_a']:.3f} vs {v['ppa_b']:.3f}, difference "
                     f"{v['diff']:+.3f} [{v['diff_lo']:+.3f}, {v['diff_hi']:+.3f}] -> {v['verdict'].upper()} "
                     "(not the verdict)")
    for r in claims.regime:
        oracle = "no oracle row" if r["oracle_map"] is None else f"oracle mAP {r['oracle_map']:.3f}"
        lines.append(f"  regime, {_name(i, r['encoder'])}: {oracle}; AP = 1 for {_pct(r['ap_one_share'])} of the "
                     f"{r['n_queries']} judged queries; AP ties in {r['ap_tie_share']:.1%} of the {r['n_pairs']} "
                     "judged pairs")
        hot = {m: s for m, s in r["ap_one_share_by_method"].items() if s >= saturated}
        if r["encoder"] == "specialist" and hot:
            lines.append(f"  note: claim (ii) is judged on a saturated specialist: AP = 1 for at least "
                         f"{saturated:.0%} of " + ", ".join(f"{m} ({_pct(s)})" for m, s in hot.items())
                         + "; strict PPA counts each AP tie wrong (see the ties-half variant); a harder gallery "
                         "(more identities, more images per identity, look-alikes) gives the specialist room")
    return lines


def claims_lines(claims, fmt: str = "table", world: str | None = None) -> list[str]:
    """The 2x2 of the paper's Figure 3 per (seed, method), then (``table``) :func:`verdict_lines`."""
    rows = two_by_two_rows(claims)
    head = ("the paper's Figure 3 as a 2x2 per method: general-purpose / specialist encoder x Sim / mAP "
            "(specialist_ap1_share: queries whose specialist AP is exactly 1)")
    if world:
        head = f"{world}: {head}"
    table = render_rows(rows, fmt, list(TABLE_COLUMNS))
    if fmt != "table":
        return [table]
    block = verdict_lines(claims, world)
    return [head, table, "\n" + block[0], *block[1:]]
