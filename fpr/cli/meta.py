"""``fpr meta``: how well each per-query value of a run agrees with human judgments (or a truth column)."""
from __future__ import annotations

import click

from fpr.cli.main import cli, format_option
from fpr.errors import InputError
from fpr.files import check_plot_path
from fpr.render.cells import dumps, render_rows, wrap_text
from fpr.render.claims import claims_lines

META_COLUMNS = ["metric", "n_pairs", "ppa", "ppa_lo", "ppa_hi", "ppa_ties_half", "ppa_ties_half_lo", "ppa_ties_half_hi",
                "metric_tie_share", "n_metric_ties", "n_pairs_all", "kendall_within", "kendall_within_lo",
                "kendall_within_hi", "n_rated", "spearman", "spearman_lo", "spearman_hi", "kendall", "kendall_lo",
                "kendall_hi", "alpha", "alpha_lo", "alpha_hi"]
LEVEL_COLUMNS = ["metric", "better", "worse", "n_better", "n_worse", "auroc_pooled", "auroc_pooled_lo",
                 "auroc_pooled_hi", "n_pairs_within", "auroc_within", "auroc_within_lo", "auroc_within_hi"]


def _names(text: str | None) -> list[str]:
    return [t.strip() for t in (text or "").split(",") if t.strip()]


@cli.command("meta")
@click.option("--run", required=True, help="Stored run whose per-query values are set against the judgments.")
@click.option("--human", multiple=True, type=click.Path(dir_okay=False),
              help="Judgments file, repeatable: pairs (query_id_a,query_id_b,winner=a|b|tie) or ratings "
                   "(query_id,rating[,rater]).")
@click.option("--imagenhub", type=click.Path(file_okay=False), default=None,
              help="ImagenHub human-ratings folder (ImagenHub_<Task>/<Task>_rater<k>.tsv): Spearman per task "
                   "with the mean human SC, queries matched on task, method and uid.")
@click.option("--truth", default=None, help="A per-query column of the run's queries as the judge (e.g. drift).")
@click.option("--truth-higher-better", is_flag=True, help="The truth column is better when higher (default: lower).")
@click.option("--metrics", default=None, help="Comma-separated values to evaluate (default: all stored).")
@click.option("--methods", default=None,
              help="Comma-separated methods whose queries are judged (default: all; every statistic uses the same set).")
@click.option("--lower-better", default=None, help="Comma-separated metrics that are better when lower.")
@click.option("--compare", default=None, metavar="A,B", help="Paired test between two metrics, e.g. ap,sim.")
@click.option("--pair-within", default="group,identity", show_default=True,
              help="Keys queries share to be paired when pairs come from ratings or the truth ('' = all pairs).")
@click.option("--general", "general_run", default=None,
              help="With --truth: a run of the same queries with a general-purpose encoder (the demo's fpr-general-v2 "
                   "run): print the paper's 2x2 (general/specialist x Sim/mAP) per method and a verdict per claim.")
@click.option("--seed", type=int, default=0, show_default=True, help="Bootstrap seed.")
@click.option("--n-boot", type=int, default=1000, show_default=True, help="Bootstrap resamples for the intervals.")
@click.option("--plot", "plot_file", type=click.Path(dir_okay=False), default=None, help="Write a figure (PNG/PDF).")
@format_option()
@click.pass_context
def meta_cmd(ctx, run, human, imagenhub, truth, truth_higher_better, metrics, methods, lower_better, compare,
             pair_within, general_run, seed, n_boot, plot_file, fmt) -> None:
    """PPA, Spearman, Kendall and Krippendorff's alpha of every per-query value against the judgments."""
    from fpr import api
    from fpr.workflows.meta import plot

    if imagenhub:
        _imagenhub(ctx, run, imagenhub, human, truth, metrics, fmt)
        return
    pair = None
    if compare:
        pair = tuple(_names(compare))
        if len(pair) != 2:
            raise InputError(f"--compare needs two metrics separated by a comma, got '{compare}'", hint="e.g. ap,sim")
    if n_boot < 1:
        raise InputError("--n-boot must be at least 1")
    if plot_file:
        check_plot_path(plot_file)
    if general_run:
        if truth is None:
            raise InputError("--general needs --truth (the claims are judged against a truth column)",
                             hint="e.g. fpr meta --run R --truth drift --general R-general")
        claims = api.meta_claims(run, general_run, truth=truth, workspace=ctx.obj["workspace"], seed=seed,
                                 n_boot=n_boot, methods=_names(methods) or None,
                                 truth_lower_better=not truth_higher_better)
        if fmt == "json":
            click.echo(dumps(claims.as_json()))
        else:
            for line in claims_lines(claims, fmt):
                click.echo(line)
        return
    res = api.meta(run, list(human) or None, truth, workspace=ctx.obj["workspace"], seed=seed,
                   metrics=_names(metrics) or None, lower_better=_names(lower_better), compare=pair,
                   truth_lower_better=not truth_higher_better, pair_within=_names(pair_within), n_boot=n_boot,
                   methods=_names(methods) or None)
    if plot_file:
        plot(res, plot_file)
    if fmt == "json":
        click.echo(dumps(res.as_json()))
        return
    click.echo(render_rows(res.rows, fmt, META_COLUMNS))
    if fmt == "table":
        i = res.info
        # the notes wrap at the tables' width: off a terminal they were 136-170 characters (#33 audit)
        click.echo("\n" + wrap_text(f"judge {i['source']}: {i['n_pairs_used']} non-tied pairs "
                                    f"({i['n_pairs_tied_excluded']} ties excluded), {i['n_rated_queries']} rated "
                                    f"queries, {i['n_raters']} rater(s); 95% bootstrap intervals over queries "
                                    f"({i['n_boot']} resamples, seed {i['seed']})"))
        click.echo(wrap_text("ppa: VISTAR's (right only if S(A) > S(B)); ppa_ties_half: a metric tie counts 1/2; "
                             "kendall_within: tau-b over the judged pairs (judge ties included)"))
        if res.levels:
            click.echo("\n" + wrap_text("AUROC per adjacent judge level: P(S(better) > S(worse)) + P(tie)/2, over "
                                        "all queries of the two levels (pooled) and within --pair-within"))
            click.echo(render_rows(res.levels, "table", LEVEL_COLUMNS))
        c = res.comparison
        if c:
            line = (f"{c['metric_a']} vs {c['metric_b']}: PPA diff {c['ppa_diff']:+.3f} [{c['ppa_diff_lo']:+.3f},"
                    f"{c['ppa_diff_hi']:+.3f}], McNemar p={c['mcnemar_p']:.3g} ({c['a_right_b_wrong']} vs "
                    f"{c['a_wrong_b_right']} discordant pairs)")
            if "spearman_diff" in c:
                line += (f"; Spearman diff {c['spearman_diff']:+.3f} [{c['spearman_diff_lo']:+.3f},"
                         f"{c['spearman_diff_hi']:+.3f}], p={c['spearman_diff_p']:.3g}")
            click.echo(wrap_text(line))
        if plot_file:
            click.echo(f"figure: {plot_file}")


def _imagenhub(ctx, run, folder, human, truth, metrics, fmt) -> None:
    from fpr import api

    if human or truth:
        raise InputError("give --imagenhub alone, without --human or --truth")
    rows = api.meta_imagenhub(run, folder, workspace=ctx.obj["workspace"], metrics=_names(metrics) or None)
    if fmt == "json":
        click.echo(dumps(rows))
        return
    click.echo(render_rows(rows, fmt, ["task", "model", "metric", "n", "spearman"]))
    if fmt == "table":
        click.echo("\n" + wrap_text("spearman: the value against the mean SC of the sample's raters (0-1), per "
                                    "task: over all its models' samples (pooled), per model, and the per-model "
                                    "values' Fisher-z mean; (mean): the plain mean over tasks"))
