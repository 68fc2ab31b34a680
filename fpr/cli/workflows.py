"""``fpr ablate``, ``fpr filter`` and ``fpr scorers list``: the two workflows users come for."""
from __future__ import annotations

import math

import click

from fpr.cli.main import cli, format_option, parse_options, scorer_option
from fpr.cli.output import dumps, render_rows
from fpr.errors import InputError


# --------------------------------------------------------------------------- scorers

@cli.group("scorers")
def scorers_group() -> None:
    """Auxiliary per-query scorers (joined to retrieval results on the query id)."""


@scorers_group.command("list")
@format_option()
def scorers_list_cmd(fmt) -> None:
    """List scorers: name, what they need, the metrics they store, options."""
    from fpr.eval.scorers import all_scorers

    rows = []
    for name, sc in all_scorers().items():
        options = getattr(sc, "options", {}) or {}
        rows.append({"name": name, "needs": ",".join(sorted(sc.needs)),
                     "metrics": ",".join(f"{name}.{m}" for m in sc.metrics),
                     "options": ",".join(options), "description": sc.description})
    click.echo(render_rows(rows, fmt, ["name", "needs", "metrics", "options", "description"]))


# --------------------------------------------------------------------------- ablate

ABLATE_COLUMNS = ["variant", "per_identity", "identities", "sampling", "method", "repeats", "oracle_map",
                  "oracle_map_std", "oracle_sim", "generated_map", "generated_map_std", "generated_sim",
                  "gallery_images"]


@cli.command("ablate")
@click.option("--gallery", required=True, help="Stored gallery whose gallery images are the pool to draw from.")
@click.option("--encoder", required=True)
@click.option("--queries", default=None, type=click.Path(dir_okay=False),
              help="Generated images (CSV/Parquet: path,identity,group,method); oracle-only when omitted.")
@click.option("--per-identity", default="1,5,10,20", show_default=True,
              help="Gallery images per identity (comma list; 'all' = every pool image).")
@click.option("--identities", default="2,5,10", show_default=True,
              help="Identities each query competes against (itself + N-1 of its group; 'all').")
@click.option("--sampling", default="random,kmeans", show_default=True, help="random and/or kmeans.")
@click.option("--repeats", type=int, default=5, show_default=True, help="Repeats per variant (seed + r).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--design", type=click.Choice(["one-at-a-time", "grid"]), default="one-at-a-time", show_default=True,
              help="Vary one factor at a time around the baseline (10, 10, random), or the full grid.")
@click.option("--run-prefix", "--name", "name", default=None,
              help="Ablation id for the 'ablations' table (default: generated).")
@click.option("--plot", default=None, type=click.Path(dir_okay=False), help="Write a PNG/PDF/SVG plot.")
@click.option("--raw", is_flag=True, help="Print one row per (variant, repeat, method) instead of means.")
@click.option("--weights", default=None)
@click.option("--skip-missing-identities", is_flag=True)
@click.option("--device", default="auto", show_default=True)
@click.option("--batch-size", type=int, default=64, show_default=True)
@click.option("--workers", type=int, default=None)
@click.option("--overwrite", is_flag=True, help="Replace a stored ablation with the same id.")
@format_option()
@click.pass_context
def ablate_cmd(ctx, gallery, encoder, queries, per_identity, identities, sampling, repeats, seed, design, name,
               plot, raw, weights, skip_missing_identities, device, batch_size, workers, overwrite, fmt) -> None:
    """Gallery ablation: oracle and generated mAP/Sim per gallery variant (one embedding pass)."""
    from fpr import api

    res = api.ablate(gallery, encoder, queries, per_identity=per_identity, identities=identities, sampling=sampling,
                 repeats=repeats, seed=seed, design=design, name=name, workspace=ctx.obj["workspace"],
                 weights=weights, device=device, batch_size=batch_size, workers=workers,
                 skip_missing_identities=skip_missing_identities, plot=plot, overwrite=overwrite)
    table = res.rows if raw else res.summary
    rows = [{k: (None if _isna(v) else v) for k, v in r.items()} for r in table.to_dict("records")]
    if fmt == "json":
        click.echo(dumps({"ablation": res.name, "baseline": res.baseline.id, "images_embedded": res.n_images,
                          "computed": res.n_computed, "seconds": res.seconds, "plot": res.plot, "rows": rows}))
        return
    cols = list(table.columns) if raw else ABLATE_COLUMNS
    if fmt == "table":
        click.echo(f"ablation {res.name}  gallery {gallery}  encoder {encoder}  baseline {res.baseline.id}  "
                   f"{res.n_images} images embedded once ({res.n_computed} computed)")
    click.echo(render_rows(rows, fmt, cols))
    if plot and fmt == "table":
        click.echo(f"plot: {res.plot}")


def _isna(v) -> bool:
    try:
        return v is None or (isinstance(v, float) and math.isnan(v)) or bool(v != v)
    except (TypeError, ValueError):
        return False


# --------------------------------------------------------------------------- filter

@cli.command("filter")
@click.option("--index", "index_name", required=False, help="Index to rank the generated images against.")
@click.option("--queries", required=False, type=click.Path(dir_okay=False),
              help="Generated images (CSV/Parquet: path,identity,group[,method,prompt,reference_paths,...]).")
@click.option("--keep", default=None, help='Keep-rule, e.g. "top1 and ap >= 0.5 and clip_t >= 0.25 and not copy_paste".')
@click.option("--out", default=None, type=click.Path(dir_okay=False), help="Kept rows (.csv/.tsv/.parquet).")
@click.option("--rejected", default=None, type=click.Path(dir_okay=False), help="Rejected rows with a reason.")
@click.option("--copy-to", default=None, type=click.Path(file_okay=False),
              help="Copy kept images to DIR/<group>/<identity>/ (a tree 'fpr gallery import --folder' reads).")
@click.option("--scorers", default="", help="Extra scorers to run (those the rule names run anyway).")
@scorer_option()
@click.option("--chunk-size", type=int, default=1000, show_default=True, help="Rows per chunk (unit of resume).")
@click.option("--scope", type=click.Choice(["group", "all"]), default="group", show_default=True)
@click.option("--skip-missing-identities", is_flag=True, help="Reject (instead of refusing) queries whose "
                                                              "identity has no gallery image.")
@click.option("--restart", is_flag=True, help="Ignore the saved progress of an interrupted run.")
@click.option("--list-names", is_flag=True, help="List the names a keep-rule can use, and exit.")
@click.option("--device", default="auto", show_default=True)
@click.option("--batch-size", type=int, default=64, show_default=True)
@click.option("--workers", type=int, default=None)
@format_option()
@click.pass_context
def filter_cmd(ctx, index_name, queries, keep, out, rejected, copy_to, scorers, scorer_options, chunk_size, scope,
               skip_missing_identities, restart, list_names, device, batch_size, workers, fmt) -> None:
    """Keep generated images that preserved identity (paper 5.4); streams, resumes after a kill."""
    from fpr import api
    from fpr.eval.filter import describe_variables

    if list_names:
        click.echo(render_rows(describe_variables(), fmt, ["name", "column", "scorer", "description"]))
        return
    missing = [n for n, v in (("--index", index_name), ("--queries", queries), ("--keep", keep), ("--out", out))
               if not v]
    if missing:
        raise InputError(f"missing option(s) {', '.join(missing)}",
                         hint='e.g. fpr filter --index I --queries gen.csv --keep "top1 and ap >= 0.5" --out kept.csv')
    res = api.filter_queries(index_name, queries, keep, out, rejected=rejected, copy_to=copy_to, scorers=scorers,
                         chunk_size=chunk_size, workspace=ctx.obj["workspace"], scope=scope,
                         skip_missing_identities=skip_missing_identities, device=device, batch_size=batch_size,
                         workers=workers, scorer_options=parse_options(scorer_options), restart=restart)
    if fmt == "json":
        click.echo(dumps({**res.as_row(), "scorers": res.scorers, "reasons": res.reasons}))
        return
    click.echo(render_rows([res.as_row()], fmt))
    if fmt == "table" and res.reasons:
        click.echo(render_rows([{"failed clause": k, "rows": v} for k, v in res.reasons.items()], "table"))
