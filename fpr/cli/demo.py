"""``fpr demo``: the protocol end to end on the built-in world (offline, CPU; seconds, ``--full`` minutes)."""
from __future__ import annotations

import click

from fpr.cli.main import cli, device_option, format_option
from fpr.defaults import WORLD_PROFILES
from fpr.render.cells import dumps, format_cell, render_rows


@cli.command("demo")
@click.option("--quick/--full", default=True,
              help="--quick (the default): 3 species x 5 identities and the easy world's verdicts on one seed "
                   "(seconds); --full: 10 identities per species and the paper's two claims judged on two worlds "
                   "over three seeds (minutes).")
@click.option("--seed", type=int, default=0, show_default=True, help="World and bootstrap seed.")
@click.option("--out", type=click.Path(file_okay=False), default=None,
              help="Folder for the rendered images (default: <workspace>/demo/<gallery>).")
@click.option("--encoder", default="fpr-world-v3", show_default=True, help="Encoder of the gallery index.")
@click.option("--profile", "profiles", multiple=True, type=click.Choice(WORLD_PROFILES),
              help="A named method profile to evaluate beside the methods: a mixture of contexts and drift levels "
                   "that behaves like a real method of the paper (docs/world.md, Profiles); repeatable.")
@click.option("--siblings", type=click.FloatRange(0.0, 1.0, max_open=True), default=0.0, show_default=True,
              help="Stress: share of markings the gallery identities of a species have in common (look-alikes).")
@click.option("--home-background", type=click.FloatRange(0.0, 1.0), default=0.0, show_default=True,
              help="Stress: share of an identity's real images taken at its own home background (like camera "
                   "sites: gallery backgrounds correlate with identity).")
@click.option("--occlusion", is_flag=True,
              help="Stress: an occluder over the region each graded query's drift redraws (drift hidden).")
@click.option("--world", type=click.Choice(["easy", "paper"]), default="easy", show_default=True,
              help="The named world: easy (the quick look: the specialist's oracle mAP near 1) or paper (look-alike "
                   "pairs: its oracle mAP in the paper's range 0.75-0.85). fpr demo --full's verdicts run on both.")
@click.option("--identities", type=click.IntRange(min=2), default=None,
              help="Identities per species (default: the world's; 5, 10 with --full).")
@click.option("--gallery-images", type=click.IntRange(min=1), default=None,
              help="Gallery images per identity (default: the world's; 6, 10 with --full).")
@click.option("--lookalikes", type=click.FloatRange(0.0, 1.0, max_open=True), default=None,
              help="Share of markings each identity shares with its look-alike family (default: the world's; "
                   "easy 0, paper 0.9).")
@click.option("--family-size", type=click.IntRange(min=2), default=None,
              help="Identities per look-alike family (default 2: pairs).")
@click.option("--run", default=None, help="Run id (default: generated; an existing one is replaced).")
@device_option()
@click.option("--no-copy-paste", is_flag=True, help="Skip the copy-paste scorer (faster; no flag rates).")
@click.option("--general", default="fpr-general-v2", show_default=True,
              help="General-purpose encoder of the paper's 2x2 and the two claims' verdicts ('' = skip them).")
@click.option("--no-world-cache", is_flag=True,
              help="Render the worlds even where the world cache ($FPR_CACHE_DIR/worlds) holds them, and store "
                   "nothing there (also: FPR_WORLD_CACHE=0). The files are the same bytes either way.")
@format_option()
@click.pass_context
def demo_cmd(ctx, quick, seed, out, encoder, profiles, siblings, home_background, occlusion, world, identities,
             gallery_images, lookalikes, family_size, run, device, no_copy_paste, general, no_world_cache, fmt) -> None:
    """Render the built-in world, evaluate its simulated methods, print the table and a validity check."""
    from fpr.workflows.demo import paper_table, run_demo, validity_lines
    from fpr.render.cells import interval_footnote

    res = run_demo(workspace=ctx.obj["workspace"], seed=seed, quick=quick, out=out, encoder=encoder,
                   siblings=siblings, device=device, run=run, copy_paste=not no_copy_paste,
                   general=general or None, profiles=profiles, home_background=home_background, occlusion=occlusion,
                   world_cache=not no_world_cache, world=world, identities=identities, gallery=gallery_images,
                   lookalikes=lookalikes, family_size=family_size)
    if fmt == "json":
        click.echo(dumps(res.as_json()))
        return
    if fmt == "csv":
        click.echo(render_rows(res.summary, "csv"))
        return
    w = res.world
    click.echo(f"run {res.run_id}  index {res.index}  encoder {res.encoder}  "
               f"({len(w['species'])} species x {w['identities_per_species']} identities x "
               f"{w['gallery_per_identity']} gallery images; {w['queries_per_identity_and_method']} queries per "
               f"identity and method; {res.timings['total_s']:.0f} s)")
    click.echo("\nmAP [95% CI] (gallery retrieval within the species)")
    click.echo(render_rows(paper_table(res.summary, "map"), "table"))
    click.echo("\nSim [95% CI] (mean cosine to the reference images; oracle: to the identity's other references)")
    click.echo(render_rows(paper_table(res.summary, "sim"), "table"))
    if interval_footnote(res.summary):
        click.echo(interval_footnote(res.summary))
    if "copy_paste_flag_rate" in res.validity:
        v = res.validity
        click.echo("\ncopy-paste per method: flag rate, mean score, and the share the keep-rule keeps")
        click.echo(render_rows([{"method": m, "flag_rate": round(v["copy_paste_flag_rate"][m], 3),
                                 "mean_score": round(v["copy_paste_mean_score"][m], 3),
                                 "kept": round(v["kept_share"][m], 3)} for m in v["copy_paste_flag_rate"]], "table"))
    click.echo("")
    if "oracle_map" in res.validity:
        click.echo(_difficulty(res).line(hint="the paper-difficulty world: fpr demo --world paper"))
    for line in validity_lines(res.validity):
        click.echo(line)
    agreement = res.validity.get("agreement") or []
    if agreement:
        click.echo("\nagreement with the ground-truth drift, per query, each row on one method set "
                   "(pairs: an identity's queries of different drift)")
        click.echo(render_rows([{"methods": r["methods"], "metric": r["metric"], "pairs": r["n_pairs"],
                                 "spearman": round(r["spearman"], 3),
                                 "ppa": format_cell(r["ppa"], r["ppa_lo"], r["ppa_hi"]),
                                 "ppa_ties_half": round(r["ppa_ties_half"], 3),
                                 "tie_share": round(r["metric_tie_share"], 3),
                                 "tau_b_within": round(r["kendall_within"], 3)} for r in agreement], "table"))
        click.echo("ppa: VISTAR's (right only if S(A) > S(B), a metric tie is wrong); ppa_ties_half: a tie counts 1/2; "
                   "tie_share: pairs the metric ties; spearman: against -drift")
    for line in headroom_lines(res.validity.get("headroom") or [], res.encoder):
        click.echo(line)
    if res.validity.get("ap_one_share"):
        click.echo(f"every statistic against the drift: fpr meta --run {res.run_id} --truth drift [--methods ...]")
    # not "again": fpr report prints the same numbers in the paper's layout (Sim and mAP per species, then
    # Sim vs mAP per method), not these per-metric tables
    click.echo(f"\nimages: {res.images_dir}\nstored as run {res.run_id}: the paper's layout (Sim and mAP per "
               f"species, then Sim vs mAP per method; --all for every metric and scorer): "
               f"fpr report --run {res.run_id}; browsable: fpr report --run {res.run_id} --html report.html")
    if res.general_runs:  # the general-purpose encoder's half of the 2x2 is a run of its own (no copies)
        click.echo(f"the general-purpose encoder's run (Sim vs mAP per method): fpr report --run "
                   f"{res.general_runs[min(res.general_runs)][1]}")
    worlds = res.claims_worlds or ([{"world": res.world.get("world", "easy"), "config": {}, "claims": res.claims,
                                     "general_runs": res.general_runs}] if res.claims else [])
    for entry in worlds:  # the demo's world first; the verdicts last (labelled by world when there are several)
        _print_claims(res, entry, labelled=len(worlds) > 1)
    if quick:  # the newcomer's next step, last
        click.echo(f"\nnext: {FULL_HINT}")


FULL_HINT = ("fpr demo --full: the paper's two claims judged on two worlds (easy and paper-difficulty) over three "
             "world seeds, on 10 identities per species (about 85 s on 2 idle cores)")


def headroom_lines(rows: list[dict], encoder: str) -> list[str]:
    """The headroom block: per method the share of queries whose AP is exactly 1 and the AP tie share of its
    within-identity pairs (the table ``fpr report`` prints), then the warning line if methods saturate."""
    from fpr.metrics.headroom import HEADROOM_NOTE, headroom_table, headroom_warnings

    if not rows:
        return []
    table = [{k: v for k, v in r.items() if k != "encoder"} for r in headroom_table(rows)]
    return ([f"\nheadroom under {encoder}: can this gallery tell the best methods apart?",
             render_rows(table, "table"), HEADROOM_NOTE]
            + [f"warning: {w}" for w in headroom_warnings(rows)])


def _difficulty(res):
    """The demo gallery's difficulty: its oracle rows (the reference images as queries) of the demo's run."""
    from fpr.workflows.difficulty import Difficulty

    oracle = [r for r in res.summary if r.get("method") == "oracle" and r.get("group") == "*"]
    n = int(oracle[0]["n_queries"]) if oracle else 0
    return Difficulty(res.index, res.gallery, res.encoder, n, res.validity["oracle_map"],
                      res.validity.get("ap_one_share", {}).get("oracle", float("nan")))


def _print_claims(res, entry: dict, labelled: bool = True) -> None:
    """Last: the paper's 2x2 per seed and method, and the verdict block (whatever it says), of one world."""
    claims, general_runs = entry["claims"], entry["general_runs"]
    spec_run, gen_run = general_runs[min(general_runs)]
    cfg = entry.get("config") or {}
    shape = (f" ({cfg['identities']} identities x {cfg['gallery']} gallery images per species"
             + (f", look-alike families of {cfg['family_size']} sharing {cfg['lookalikes']:g}" if cfg.get("lookalikes")
                else "") + ")") if cfg else ""
    click.echo(f"\nworld {entry['world']}{shape}: general-purpose encoder {claims['info']['general']} (a stand-in "
               f"for CLIP/DINOv2, not them), specialist {res.encoder}; one seed again: fpr meta --run {spec_run} "
               f"--truth drift --general {gen_run}")
    for line in world_claims_lines(claims, world=entry["world"] if labelled else None):
        click.echo(line)


def world_claims_lines(claims: dict, world: str | None = None) -> list[str]:
    """One world's claims (``ClaimsResult.as_json()``, as the demo's JSON holds it) as the demo prints them:
    the 2x2 of means, then the verdicts with the four cells, the effects, the variant and the gallery's regime,
    headed by ``world`` when the demo judges more than one world."""
    from fpr.render.claims import claims_lines
    from fpr.workflows.meta import ClaimsResult

    return claims_lines(ClaimsResult.from_json(claims), world=world)
