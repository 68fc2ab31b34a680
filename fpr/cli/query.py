"""``fpr query``, ``report``, ``runs``, ``export``, ``score``, ``compare``, ``embed``, ``sql``."""
from __future__ import annotations

import click

from fpr import api
from fpr.cli.main import cli, format_option, parse_options, scorer_option
from fpr.cli.output import dumps, render_rows

SUMMARY_COLUMNS = ["method", "group", "n_queries", "map", "map_lo", "map_hi", "cmc@1", "cmc@5", "minp", "sim",
                   "sim_lo", "sim_hi"]


def print_run(res: api.RunResult, fmt: str) -> None:
    if fmt == "json":
        click.echo(dumps(res.as_json()))
        return
    aux = [c for c in (res.summary[0].keys() if res.summary else []) if "." in c]
    cols = SUMMARY_COLUMNS + aux
    if fmt == "csv":
        click.echo(render_rows(res.summary, "csv", cols + ["cmc@10", "map_group_mean"]))
        return
    click.echo(f"run {res.run_id}  index {res.index}  encoder {res.encoder}")
    click.echo(render_rows(res.summary, "table", cols))
    if res.sim_definition:
        from fpr.eval.pipeline import SIM_SOURCES

        click.echo("Sim: " + "; ".join(f"{SIM_SOURCES[k]} ({n} queries)" for k, n in res.sim_definition.items()))
    if res.n_skipped:
        click.echo(f"({res.n_skipped} queries skipped; 'fpr export --run {res.run_id}' lists them with status)")


@cli.command("query")
@click.option("--index", "index_name", required=True)
@click.option("--queries", required=True, type=click.Path(dir_okay=False),
              help="CSV/Parquet: path,identity,group,method[,prompt,reference_paths,query_id].")
@click.option("--run", default=None, help="Run id (default: generated).")
@click.option("--encoder", default=None, help="Assert the index's encoder (an error if it differs).")
@click.option("--weights", default=None)
@click.option("--scope", type=click.Choice(api.SCOPES), default="group", show_default=True)
@click.option("--scorers", default="", help="Comma-separated auxiliary scorers, e.g. clip-t,copy-paste.")
@scorer_option()
@click.option("--skip-missing-identities", is_flag=True, help="Skip (and report) queries with no relevant item.")
@click.option("--skip-unreadable", is_flag=True, help="Skip (and report) unreadable query images.")
@click.option("--top-k", type=click.IntRange(min=1), default=10, show_default=True, help="Ranking entries stored per query.")
@click.option("--seed", type=int, default=0, show_default=True, help="Bootstrap seed.")
@click.option("--device", default="auto", show_default=True)
@click.option("--batch-size", type=click.IntRange(min=1), default=64, show_default=True)
@click.option("--workers", type=click.IntRange(min=0), default=None)
@click.option("--overwrite", is_flag=True, help="Replace a stored run with the same id.")
@format_option()
@click.pass_context
def query_cmd(ctx, index_name, queries, run, encoder, weights, scope, scorers, scorer_options, skip_missing_identities,
              skip_unreadable, top_k, seed, device, batch_size, workers, overwrite, fmt) -> None:
    """Rank generated images against an index; store per-query results; print the summary."""
    res = api.run_query(index_name, queries, run=run, workspace=ctx.obj["workspace"], encoder=encoder,
                        weights=weights, scope=scope, scorers=scorers, skip_missing_identities=skip_missing_identities,
                        skip_unreadable=skip_unreadable, top_k_store=top_k, seed=seed, device=device,
                        batch_size=batch_size, workers=workers, overwrite=overwrite,
                        scorer_options=parse_options(scorer_options))
    print_run(res, fmt)


@cli.command("report")
@click.option("--run", required=True)
@click.option("--allow-stale", is_flag=True, help="Print a run whose index has changed since it ran.")
@format_option()
@click.pass_context
def report_cmd(ctx, run, allow_stale, fmt) -> None:
    """Reprint a stored run's summary."""
    print_run(api.report(run, workspace=ctx.obj["workspace"], allow_stale=allow_stale), fmt)


@cli.group("runs", invoke_without_command=True)
@format_option()
@click.pass_context
def runs_cmd(ctx, fmt) -> None:
    """List stored runs ('fpr runs delete RUN' deletes one)."""
    if ctx.invoked_subcommand is None:
        click.echo(render_rows(api.list_runs(workspace=ctx.obj["workspace"]), fmt))


@runs_cmd.command("delete")
@click.argument("run")
@click.pass_context
def runs_delete_cmd(ctx, run) -> None:
    """Delete a run with its per-query rows, scores and rankings."""
    api.delete_run(run, workspace=ctx.obj["workspace"])
    click.echo(f"deleted run {run}")


@cli.command("export")
@click.option("--run", required=True)
@click.option("--out", required=True, type=click.Path(dir_okay=False), help=".csv or .parquet")
@click.pass_context
def export_cmd(ctx, run, out) -> None:
    """Write a run's per-query table."""
    path = api.export_run(run, out, workspace=ctx.obj["workspace"])
    click.echo(str(path))


@cli.command("score")
@click.option("--run", required=True)
@click.option("--scorers", required=True, help="Comma-separated scorer names.")
@scorer_option()
@click.option("--device", default="auto", show_default=True)
@click.option("--overwrite", is_flag=True, help="Replace scores a scorer already stored for this run.")
@format_option()
@click.pass_context
def score_cmd(ctx, run, scorers, scorer_options, device, overwrite, fmt) -> None:
    """Add auxiliary scores to a stored run, then reprint its summary."""
    api.score_run(run, scorers, workspace=ctx.obj["workspace"], device=device, overwrite=overwrite,
                  scorer_options=parse_options(scorer_options))
    print_run(api.report(run, workspace=ctx.obj["workspace"]), fmt)


@cli.command("compare")
@click.option("--run", required=True)
@click.option("--a", "method_a", required=True, help="Method A.")
@click.option("--b", "method_b", required=True, help="Method B.")
@click.option("--metric", default="ap", show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@format_option()
@click.pass_context
def compare_cmd(ctx, run, method_a, method_b, metric, seed, fmt) -> None:
    """Paired comparison of two methods on shared (group, identity, prompt)."""
    row = api.compare(run, method_a, method_b, metric=metric, workspace=ctx.obj["workspace"], seed=seed)
    click.echo(dumps(row) if fmt == "json" else render_rows([row], fmt))


@cli.command("embed")
@click.option("--encoder", required=True)
@click.option("--images", required=True, type=click.Path(dir_okay=False), help="CSV/Parquet with a path column.")
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="Output .npy (rows in file order).")
@click.option("--weights", default=None)
@click.option("--device", default="auto", show_default=True)
@click.option("--batch-size", type=click.IntRange(min=1), default=64, show_default=True)
@click.option("--workers", type=click.IntRange(min=0), default=None)
def embed_cmd(encoder, images, out, weights, device, batch_size, workers) -> None:
    """Write L2-normalised embeddings of the listed images."""
    res = api.embed(encoder, images, out=out, weights=weights, device=device, batch_size=batch_size,
                    workers=workers)
    click.echo(f"{out}\t{res.vectors.shape[0]}x{res.vectors.shape[1]}\t"
               f"{res.n_from_cache} cached, {res.n_computed} computed")


@cli.command("sql")
@click.argument("query")
@format_option()
@click.pass_context
def sql_cmd(ctx, query, fmt) -> None:
    """Run a read-only SQL query on the workspace (tables: galleries, gallery_items, indices, runs,
    query_results, aux_scores, rankings, ablations)."""
    df = api.sql(query, workspace=ctx.obj["workspace"])
    click.echo(render_rows(df.to_dict("records"), fmt, list(df.columns)))
