"""``fpr query``, ``report``, ``runs``, ``export``, ``score``, ``compare``, ``embed``, ``sql``."""
from __future__ import annotations

import click

from fpr import api, progress
from fpr.cli.main import (batch_size_option, cli, device_option, engine_options, format_option, parse_options,
                          ray_settings, scope_option, scorer_option, table_width, weights_option, width_options,
                          workers_option)
from fpr.defaults import DEFAULT_REPORT_METRICS, READABLE_REPORT_METRICS
from fpr.errors import InputError
from fpr.render.cells import dumps, interval_footnote, render_rows, terminal_width, wrap_text

REPORT_FORMATS = ("table", "markdown", "latex", "csv", "json")


def warn_headroom(per_query, encoder: str | None = None) -> None:
    """The headroom warning lines (:func:`fpr.metrics.headroom.headroom_warnings`) on stderr, whatever the format."""
    from fpr.metrics.headroom import headroom, headroom_warnings

    for line in headroom_warnings(headroom(per_query, encoder)):
        progress.warn(line)


def print_run(res: api.RunResult, fmt: str, ws) -> None:
    """A run as ``fpr report`` prints it (the table); JSON and CSV: the run's own document and summary rows."""
    if fmt == "table":
        print_paper([res.run_id], ws, fmt, terminal_width(), allow_stale=True)
        if res.n_skipped:
            click.echo(f"'fpr export --run {res.run_id} --out FILE.csv' has each query's status")
        return
    warn_headroom(res.per_query, res.encoder)
    if fmt == "json":
        click.echo(dumps(res.to_dict()))
        return
    from fpr.metrics.specs import summary_row_columns  # NumPy: imported when a run is printed, not at start-up

    rows = res.summary_records()
    aux = [c for c in res.summary.columns if "." in c]
    cols = ["method", "group", "n_queries", *summary_row_columns(), *aux]
    click.echo(render_rows(rows, "csv", ["encoder"] + cols + ["map_group_mean"]))


@cli.command("query")
@click.option("--index", "index_name", default=None, help="One index (or use --gallery with --encoders).")
@click.option("--gallery", default=None, help="With --encoders: evaluate under each encoder.")
@click.option("--encoders", default=None,
              help="Comma-separated encoders: one run per encoder, stored as RUN@ENCODER; a missing index "
                   "GALLERY-ENCODER is built first.")
@click.option("--queries", required=True, type=click.Path(dir_okay=False),
              help="CSV/Parquet: path,identity,group,method[,prompt,reference_paths,query_id].")
@click.option("--run", default=None, help="Run id (default: generated).")
@click.option("--encoder", default=None, help="Assert the index's encoder (an error if it differs).")
@weights_option()
@scope_option()
@click.option("--scorers", default="", help="Comma-separated auxiliary scorers, e.g. clip-t,copy-paste.")
@scorer_option()
@click.option("--skip-missing-identities", is_flag=True, help="Skip (and report) queries with no relevant item.")
@click.option("--skip-unreadable", is_flag=True, help="Skip (and report) unreadable query images.")
@click.option("--top-k", type=click.IntRange(min=1), default=10, show_default=True, help="Ranking entries stored per query.")
@click.option("--seed", type=int, default=0, show_default=True, help="Bootstrap seed.")
@device_option()
@batch_size_option()
@workers_option()
@click.option("--overwrite", is_flag=True, help="Replace a stored run with the same id.")
@click.option("--oracle", is_flag=True, help="Also query with the gallery's reference images (method 'oracle').")
@engine_options()
@format_option()
@click.pass_context
def query_cmd(ctx, index_name, gallery, encoders, queries, run, encoder, weights, scope, scorers, scorer_options,
              skip_missing_identities, skip_unreadable, top_k, seed, device, batch_size, workers, overwrite,
              oracle, engine, ray_address, ray_actors, ray_shard_size, fmt) -> None:
    """Rank generated images against an index (or under several encoders); store per-query results; print
    the summary."""
    on_ray = {"engine": engine, "ray": ray_settings(engine, ray_address, ray_actors, ray_shard_size)}
    if encoders or gallery:
        if index_name or not (encoders and gallery) or encoder or weights:
            raise InputError("--encoders needs --gallery, and neither goes with --index, --encoder or --weights",
                             hint="fpr query --gallery G --encoders a,b --queries F, or fpr query --index N ...")
        results = api.run_query_encoders(
            gallery, encoders, queries, run=run, workspace=ctx.obj["workspace"], scope=scope, scorers=scorers,
            skip_missing_identities=skip_missing_identities, skip_unreadable=skip_unreadable, top_k_store=top_k,
            seed=seed, device=device, batch_size=batch_size, workers=workers, overwrite=overwrite,
            scorer_options=parse_options(scorer_options), oracle=oracle, **on_ray)
        if fmt == "json":
            for res in results:
                warn_headroom(res.per_query, res.encoder)
            click.echo(dumps(api.runs_document(results)))
            return
        group = results[0].run_id.rsplit("@", 1)[0]
        if fmt == "table":  # the report of the group: every encoder side by side
            print_paper([group], ctx.obj["workspace"], fmt, terminal_width(), allow_stale=True)
            return
        for res in results:
            print_run(res, fmt, ctx.obj["workspace"])
        return
    if not index_name:
        raise InputError("give --index, or --gallery with --encoders")
    res = api.run_query(index_name, queries, run=run, workspace=ctx.obj["workspace"], encoder=encoder,
                        weights=weights, scope=scope, scorers=scorers, skip_missing_identities=skip_missing_identities,
                        skip_unreadable=skip_unreadable, top_k_store=top_k, seed=seed, device=device,
                        batch_size=batch_size, workers=workers, overwrite=overwrite,
                        scorer_options=parse_options(scorer_options), oracle=oracle, **on_ray)
    print_run(res, fmt, ctx.obj["workspace"])


@cli.command("report")
@click.option("--run", "runs", required=True, multiple=True,
              help="Run id (repeatable: runs over the same queries are merged; RUN of a multi-encoder query "
                   "stands for all its encoders).")
@click.option("--metrics", default=None,
              help="Columns: per encoder sim, map, cmc@1, cmc@5, cmc@10, minp; and scorers (clip-t, or one "
                   f"metric: clip-t.score). Default: {','.join(READABLE_REPORT_METRICS)} as a table, Markdown or "
                   f"LaTeX; {','.join(DEFAULT_REPORT_METRICS)} and every scorer as json or csv.")
@click.option("--all", "all_columns", is_flag=True, help="Every metric and scorer column.")
@width_options()
@click.option("--html", "html_path", default=None, type=click.Path(dir_okay=False),
              help="Also write a self-contained HTML report here (opens offline).")
@click.option("--confusion", is_flag=True, help="Print the drift diagnosis: per group, intended identity x "
                                                "identity of the top-1 item.")
@click.option("--top-k", type=int, default=10, show_default=True, help="Retrieved items per card in --html.")
@click.option("--explain", is_flag=True, help="With --html: each card also shows the query's evidence overlay "
                                             "(fpr explain; about a hundred embeddings per query).")
@device_option()
@click.option("--allow-stale", is_flag=True, help="Print a run whose index has changed since it ran.")
@click.option("--by", "by", type=click.Choice(["role"]), default=None,
              help="role: a VISTAR run (fpr vistar run) by user role: per-aspect, Core/Hard and role-weighted "
                   "scores, and how the ranking of models changes per role.")
@click.option("--relevance", default=None, type=click.Path(dir_okay=False),
              help="With --by role: your own role x aspect relevance mask (CSV role,aspect,relevant[,source]).")
@click.option("--format", "fmt", type=click.Choice(REPORT_FORMATS), default="table", show_default=True,
              help="Output format on stdout (markdown and latex: the paper's tables).")
@click.pass_context
def report_cmd(ctx, runs, metrics, all_columns, width, wide, html_path, confusion, top_k, explain, device,
               allow_stale, by, relevance, fmt) -> None:
    """Print stored runs in the paper's layout: per group and overall, rows = methods, columns = Sim and mAP
    per encoder (with 95% intervals), then Sim vs mAP per method and encoder; --metrics / --all add
    columns (each scorer's mean)."""
    from fpr.render import paper as rep

    ws = ctx.obj["workspace"]
    if by == "role":
        from fpr.render.roles import role_report_text

        r = api.role_report(runs, workspace=ws, relevance=relevance)
        click.echo(role_report_text(r.aspects, r.splits, r.roles, fmt if fmt in ("json", "csv") else "table",
                                    r.nan_reasons))
        return
    if relevance:
        raise InputError("--relevance applies to --by role only", hint="add --by role")
    if explain and not html_path:
        raise InputError("--explain applies to --html only", hint="add --html report.html")
    if html_path:
        path = api.html_report(runs, html_path, workspace=ws, allow_stale=allow_stale, top_k=top_k, device=device,
                               explain=explain)
        progress.log(f"wrote {path}")
    if confusion:
        data = api.report_data(runs, workspace=ws, allow_stale=allow_stale, device=device)
        click.echo(rep.render_confusion(data.per_query, "json" if fmt == "json" else
                                        ("csv" if fmt == "csv" else "table")))
        return
    print_paper(runs, ws, fmt, table_width(width, wide) if fmt == "table" else None, metrics=metrics,
                all_columns=all_columns, allow_stale=allow_stale)


def print_paper(runs, ws, fmt: str, cols: int | None, *, metrics: str | None = None, all_columns: bool = False,
                allow_stale: bool = False) -> None:
    """Stored runs in the paper's layout (what ``fpr report`` prints, and ``fpr query`` after a run)."""
    from fpr.render import paper as rep

    machine = fmt in ("json", "csv")
    chosen = [m.strip() for m in (metrics or "").split(",") if m.strip()]
    if all_columns:
        from fpr.metrics.specs import summary_labels

        chosen = list(dict.fromkeys([*(chosen or READABLE_REPORT_METRICS), *summary_labels()]))
    data, pivot = api.paper_report(runs, workspace=ws, allow_stale=allow_stale,
                                   metrics=chosen or (DEFAULT_REPORT_METRICS if machine else READABLE_REPORT_METRICS),
                                   all_scorers=machine or all_columns)
    warn_headroom(data.per_query)
    if fmt == "json":  # fpr.run-results/1: one document per stored run (each with its headroom), then the pivot
        click.echo(dumps(api.report_document(data, pivot=pivot.records())))
        return
    if fmt == "table":
        head = (f"run{'s' if len(data.runs) > 1 else ''} {', '.join(data.runs)}  encoders "
                f"{', '.join(data.encoders)}  (mean [95% bootstrap interval])")
        click.echo(_wrap(head, cols))
    click.echo(rep.render(pivot, fmt, width=cols))
    if fmt == "table":
        click.echo("\n" + rep.sim_map_chart(data.summary, methods=pivot.methods, encoders=data.encoders,
                                            width=cols or 100))
    if fmt not in ("table", "markdown"):
        return
    from fpr.eval.similarity import SIM_SOURCES
    from fpr.render.result import nan_reason_text

    n_skipped = int((data.per_query["status"] != "ok").sum())
    notes = [rep.hidden_note(data.summary, pivot),
             # one line per definition: each phrase stays whole on its line
             "\n".join(("Sim: " if k == 0 else "     ") + f"{SIM_SOURCES[src]} ({n} queries)"
                       for k, (src, n) in enumerate(data.sim_definition.items())) or None,
             interval_footnote(data.summary), nan_reason_text(data.aux),
             f"({n_skipped} queries skipped; '--format json' lists them with reasons)" if n_skipped else None]
    for note in filter(None, notes):  # prose wraps at the table's width (never cut)
        click.echo("\n".join(_wrap(line, cols) for line in note.splitlines()))
    _print_headroom(data.per_query, fmt, cols)


def _print_headroom(per_query, fmt: str, width: int | None) -> None:
    """The headroom table (per encoder and method: AP = 1 share, AP tie share of within-identity pairs)."""
    from fpr.metrics.headroom import HEADROOM_NOTE, headroom, headroom_table

    rows = headroom_table(headroom(per_query))
    if not rows:
        return
    click.echo("\nheadroom: can this gallery tell the best methods apart?")
    if fmt == "markdown":
        cols = list(rows[0])
        click.echo("\n".join(["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
                             + ["| " + " | ".join("-" if r[c] is None else str(r[c]) for c in cols) + " |"
                                for r in rows]))
    else:
        click.echo(render_rows(rows, fmt, width=width))
    click.echo(_wrap(HEADROOM_NOTE, width))


def _wrap(text: str, width: int | None) -> str:
    """Prose at the table's width (None: a machine format, whole)."""
    return wrap_text(text, width) if width else text


@cli.group("runs", invoke_without_command=True)
@width_options()
@format_option()
@click.pass_context
def runs_cmd(ctx, width, wide, fmt) -> None:
    """List stored runs ('fpr runs delete RUN' deletes one)."""
    if ctx.invoked_subcommand is None:
        api.require_workspace(ctx.obj["workspace"])
        click.echo(render_rows(api.list_runs(workspace=ctx.obj["workspace"]), fmt, width=table_width(width, wide)))


@runs_cmd.command("delete")
@click.argument("run")
@click.pass_context
def runs_delete_cmd(ctx, run) -> None:
    """Delete a run with its per-query rows, scores and rankings."""
    api.delete_run(run, workspace=ctx.obj["workspace"])
    click.echo(f"deleted run {run}")


@cli.command("export")
@click.option("--run", required=True, help="Run id (a multi-encoder run: one row per query and encoder).")
@click.option("--out", default=None, type=click.Path(dir_okay=False),
              help=".csv, .tsv or .parquet; .json: the fpr.run-results/1 document with the per-query rows.")
@click.option("--format", "fmt", type=click.Choice(["json"]), default=None,
              help="json: print the fpr.run-results/1 document with the per-query rows on stdout (no --out).")
@click.pass_context
def export_cmd(ctx, run, out, fmt) -> None:
    """Write a run's per-query table (or print it as the result document)."""
    if bool(out) == bool(fmt):
        raise InputError("give exactly one of --out FILE or --format json",
                         hint="e.g. fpr export --run R --out per_query.csv, or fpr export --run R --format json")
    if fmt == "json":
        click.echo(dumps(api.export_document(run, workspace=ctx.obj["workspace"])))
        return
    path = api.export_run(run, out, workspace=ctx.obj["workspace"])
    click.echo(str(path))


@cli.command("score")
@click.option("--run", required=True, help="Stored run to add scores to.")
@click.option("--scorers", default=None, help="Comma-separated scorer names.")
@click.option("--from-csv", "from_csv", default=None, type=click.Path(dir_okay=False),
              help="Attach external per-query scores: a CSV/Parquet with query_id and numeric metric columns.")
@click.option("--scorer", "scorer_name", default=None, help="With --from-csv: the name the scores are stored under.")
@scorer_option()
@device_option()
@click.option("--overwrite", is_flag=True, help="Replace scores a scorer already stored for this run.")
@engine_options()
@format_option()
@click.pass_context
def score_cmd(ctx, run, scorers, from_csv, scorer_name, scorer_options, device, overwrite, engine, ray_address,
              ray_actors, ray_shard_size, fmt) -> None:
    """Add auxiliary scores to a stored run (scorers, or an external table), then reprint its summary."""
    ws = ctx.obj["workspace"]
    if bool(scorers) == bool(from_csv):
        raise InputError("give exactly one of --scorers or --from-csv")
    if from_csv:
        if not scorer_name:
            raise InputError("--from-csv needs --scorer NAME (the name its columns are stored under)")
        if engine != "local" or ray_address or ray_actors or ray_shard_size:
            raise InputError("--engine and the --ray-* options go with --scorers (--from-csv runs nothing)")
        api.score_from_table(run, from_csv, scorer_name, workspace=ws, overwrite=overwrite)
        _print_scored(run, ws, fmt)
        return
    if scorer_name:
        raise InputError("--scorer goes with --from-csv; use --scorers for built-in scorers")
    api.score_run(run, scorers, workspace=ws, device=device, overwrite=overwrite,
                  scorer_options=parse_options(scorer_options), engine=engine,
                  ray=ray_settings(engine, ray_address, ray_actors, ray_shard_size))
    _print_scored(run, ws, fmt)


def _print_scored(run: str, ws, fmt: str) -> None:
    ids = api.run_ids(run, workspace=ws)
    if ids != [run]:
        data, pivot = api.paper_report(run, workspace=ws, allow_stale=True)
        click.echo(dumps(api.report_document(data, pivot=pivot.records())) if fmt == "json"
                   else render_rows(pivot.records(), fmt))
        return
    print_run(api.report(run, workspace=ws, allow_stale=True), fmt, ws)


@cli.command("compare")
@click.option("--run", required=True, help="Stored run holding both methods.")
@click.option("--a", "method_a", required=True, help="Method A.")
@click.option("--b", "method_b", required=True, help="Method B.")
@click.option("--metric", default="ap", show_default=True,
              help="Per-query column to compare: ap, sim, cmc1, inp or a scorer's scorer.metric.")
@click.option("--seed", type=int, default=0, show_default=True, help="Bootstrap seed.")
@format_option()
@click.pass_context
def compare_cmd(ctx, run, method_a, method_b, metric, seed, fmt) -> None:
    """Paired comparison of two methods on shared (group, identity, prompt), overall and per group:
    Wilcoxon signed-rank test and a paired-bootstrap 95% interval of the mean difference."""
    res = api.compare(run, method_a, method_b, metric=metric, workspace=ctx.obj["workspace"], seed=seed)
    if fmt == "json":
        click.echo(dumps(res))
        return
    cols = ["encoder", "group", "n_pairs", "n_repeats", "mean_a", "mean_b", "mean_diff", "ci_lo", "ci_hi", "p_value"]
    if fmt == "csv":
        click.echo(render_rows(res["rows"], "csv", ["method_a", "method_b", "metric"] + cols))
        return
    click.echo(f"{metric}: {method_a} (mean_a) vs {method_b} (mean_b); mean_diff = a - b")
    click.echo(render_rows(res["rows"], "table", cols))
    click.echo(f"tests: {res['tests']}")
    click.echo(f"pairing: {res['pairing']}")


@cli.command("embed")
@click.option("--encoder", required=True, help="Encoder id (fpr encoders list).")
@click.option("--images", required=True, type=click.Path(dir_okay=False), help="CSV/Parquet with a path column.")
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="Output .npy (rows in file order).")
@weights_option()
@device_option()
@batch_size_option()
@workers_option()
@engine_options()
def embed_cmd(encoder, images, out, weights, device, batch_size, workers, engine, ray_address, ray_actors,
              ray_shard_size) -> None:
    """Write L2-normalised embeddings of the listed images."""
    res = api.embed(encoder, images, out=out, weights=weights, device=device, batch_size=batch_size,
                    workers=workers, engine=engine, ray=ray_settings(engine, ray_address, ray_actors, ray_shard_size))
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
