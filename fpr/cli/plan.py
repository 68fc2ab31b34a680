"""``fpr plan``: identities and generations per identity a paired comparison of two methods needs."""
from __future__ import annotations

import click

from fpr import api, progress
from fpr.cli.main import cli, format_option
from fpr.errors import InputError
from fpr.render.cells import dumps, render_rows


def _sizes(text: str | None) -> list[int] | None:
    if not text:
        return None
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise InputError(f"--per-identity takes whole numbers separated by commas, got '{text}'",
                         hint="e.g. --per-identity 1,2,4") from None


@cli.command("plan")
@click.option("--run", default=None, help="Pilot run holding both methods (omit to plan from --sd/--icc/--difference).")
@click.option("--a", "method_a", default=None, help="Method A of the pilot.")
@click.option("--b", "method_b", default=None, help="Method B of the pilot.")
@click.option("--difference", type=float, default=None,
              help="mAP difference a - b to detect (default with a pilot: the pilot's own).")
@click.option("--power", type=float, default=0.8, show_default=True, help="Power to reach, within (0, 1).")
@click.option("--alpha", type=float, default=0.05, show_default=True, help="Level of fpr compare's test.")
@click.option("--per-identity", default=None, metavar="M[,M...]",
              help="Generations per identity to plan for (default: 1, 2, 4, ... up to the pilot's; without a pilot: 1).")
@click.option("--metric", default="ap", show_default=True, help="Per-query column of the pilot.")
@click.option("--sd", type=float, default=None, help="Assumed SD of one generation's paired AP difference.")
@click.option("--icc", type=float, default=None, help="Assumed correlation of paired differences within identity.")
@click.option("--pairing", type=click.Choice(["prompt", "identity"]), default="prompt", show_default=True,
              help="Assumptions only: a pair per generation (prompt) or per identity.")
@click.option("--sims", "n_sim", type=int, default=1000, show_default=True, help="Simulated runs per design.")
@click.option("--seed", type=int, default=0, show_default=True, help="Simulation seed.")
@format_option()
@click.pass_context
def plan_cmd(ctx, run, method_a, method_b, difference, power, alpha, per_identity, metric, sd, icc, pairing, n_sim,
             seed, fmt) -> None:
    """How many identities, at M generations per identity, fpr compare needs to detect a difference with the
    given power, by paired resampling of a pilot run's queries (or from stated assumptions)."""
    res = api.plan(run, method_a, method_b, difference=difference, power=power, alpha=alpha,
                   per_identity=_sizes(per_identity), metric=metric, sd=sd, icc=icc, pairing=pairing, n_sim=n_sim,
                   seed=seed, workspace=ctx.obj["workspace"])
    if fmt == "json":
        click.echo(dumps(res))
        return
    cols = ["per_identity", "identities", "pairs", "generations_per_method", "power", "false_alarm",
            "interval_width"]
    if fmt == "csv":
        click.echo(render_rows(res["designs"], "csv", cols))
        return
    if res["source"] == "pilot":
        p = res["pilot"]
        click.echo(f"pilot: run {p['run']}, {p['method_a']} (a) vs {p['method_b']} (b), {p['identities']} identities, "
                   f"{p['per_identity']} generations per identity, {p['pairs']} pairs (one per {p['pairing']}), "
                   f"difference {p['difference']:.4f} (SE {p['difference_se']:.4f}), pair SD {p['pair_sd']:.4f}")
        if difference is None:
            progress.warn(f"planning for the pilot's own difference {p['difference']:.4f}, which a pilot of "
                          f"{p['identities']} identities knows only to +-{1.96 * p['difference_se']:.4f} (95%); "
                          "give --difference, the smallest difference worth detecting")
    else:
        a = res["assumptions"]
        click.echo(f"assumptions: SD {a['sd']:g} of one generation's paired difference, within-identity "
                   f"correlation {a['icc']:g}, one pair per {a['pairing']}")
    click.echo(f"to detect a - b = {res['difference']:.4f} with power {res['power']:g} at level {res['alpha']:g} "
               f"(fpr compare's Wilcoxon test; {res['n_sim']} simulated runs per design):")
    click.echo(render_rows(res["designs"], "table", cols))
    best = next(d for d in res["designs"] if d["per_identity"] == res["cheapest"])
    click.echo(f"fewest generations: {best['identities']} identities x {best['per_identity']} generations per "
               f"identity ({best['generations_per_method']} per method), power {best['power']:.3f}, interval width "
               f"{best['interval_width']:.4f}")
    click.echo("power: predicted share of planned runs that detect; false_alarm: the same with no difference; "
               "interval_width: expected width of fpr compare's 95% interval")
