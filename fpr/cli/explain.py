"""``fpr explain``: where in a query its identity evidence lies, and where an impostor matches better."""
from __future__ import annotations

import click

from fpr.cli.main import cli, device_option
from fpr.defaults import EXPLAIN_VARIANT, EXPLAIN_VARIANTS


@cli.command("explain")
@click.option("--run", required=True, help="Stored run (fpr runs lists them).")
@click.option("--query", "queries", multiple=True, help="Query id of the run (repeatable).")
@click.option("--method", "methods", multiple=True, help="Every scored query of this method (repeatable).")
@click.option("--all", "all_queries", is_flag=True, help="Every scored query of the run.")
@click.option("--out", default=None, type=click.Path(),
              help="Overlay PNG for one query, or a folder for several (default: <workspace>/explain/<run>/).")
@click.option("--variant", type=click.Choice(EXPLAIN_VARIANTS), default=EXPLAIN_VARIANT, show_default=True,
              help="true: the true identity's evidence alone; margin: the true identity against the best impostor.")
@click.option("--no-legend", is_flag=True, help="Overlay without the legend strip below the image.")
@device_option()
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True,
              help="table: one line per query; json: one document with every query's figures.")
@click.pass_context
def explain_cmd(ctx, run, queries, methods, all_queries, out, variant, no_legend, device, fmt) -> None:
    """Occlusion map of each query's identity evidence under the run's encoder: hide one patch at a time and
    see whether the query's score for its true identity falls (green: the patch carries its evidence) or
    rises (magenta: evidence against it; with --variant margin, the patch matches the best impostor
    better). Writes the map blended over the query as PNG and prints where the evidence is and the best
    impostor identity."""
    from fpr import api
    from fpr.render.cells import dumps

    exps = api.explain_queries(run, list(queries), methods=list(methods), all_queries=all_queries, out=out,
                               workspace=ctx.obj["workspace"], device=device, variant=variant,
                               legend=not no_legend)
    if fmt == "json":
        click.echo(dumps({"schema": "fpr.explain/1", "run_id": run, "queries": [e.as_json() for e in exps]}))
        return
    for e in exps:
        click.echo(e.summary_line())
