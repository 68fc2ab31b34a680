"""``fpr ablate``, ``fpr filter`` and ``fpr scorers list``: the two workflows users come for."""
from __future__ import annotations

import math

import click

from fpr.cli.main import (batch_size_option, cli, device_option, engine_options, format_option, parse_options,
                          ray_settings, scope_option, scorer_option, table_width, weights_option, width_options,
                          workers_option)
from fpr.errors import InputError
from fpr.files import check_plot_path
from fpr.render.cells import dumps, render_rows

# --------------------------------------------------------------------------- scorers

@cli.group("scorers")
def scorers_group() -> None:
    """Auxiliary per-query scorers (joined to retrieval results on the query id)."""


@scorers_group.command("list")
@width_options()
@format_option()
def scorers_list_cmd(width, wide, fmt) -> None:
    """List scorers: name, what they need, the metrics they store (as <scorer>.<metric>), option names."""
    from fpr import api

    click.echo(render_rows(api.list_scorers(), fmt, ["name", "needs", "metrics", "options", "description"],
                           width=table_width(width, wide)))


@scorers_group.command("show")
@click.argument("name")
@width_options()
@format_option()
def scorers_show_cmd(name, width, wide, fmt) -> None:
    """The options of scorer NAME: pass them as --scorer-option NAME.OPTION=VALUE."""
    from fpr import api

    click.echo(render_rows(api.scorer_options(name), fmt, ["option", "type", "default", "choices", "help"],
                           width=table_width(width, wide)))


# --------------------------------------------------------------------------- ablate

ABLATE_COLUMNS = ["variant", "per_identity", "identities", "sampling", "method", "repeats", "oracle_map",
                  "oracle_map_std", "oracle_sim", "generated_map", "generated_map_std", "generated_sim",
                  "gallery_images"]


@cli.command("ablate")
@click.option("--gallery", required=True, help="Stored gallery whose gallery images are the pool to draw from.")
@click.option("--encoder", required=True, help="Encoder id (fpr encoders list).")
@click.option("--queries", default=None, type=click.Path(dir_okay=False),
              help="Generated images (CSV/Parquet: path,identity,group,method); oracle-only when omitted.")
@click.option("--per-identity", default="1,5,10,20", show_default=True,
              help="Gallery images per identity (comma list; 'all' = every pool image).")
@click.option("--identities", default="2,5,10", show_default=True,
              help="Identities each query competes against (itself + N-1 of its group; 'all').")
@click.option("--sampling", default="random,kmeans", show_default=True, help="random and/or kmeans.")
@click.option("--repeats", type=click.IntRange(min=1), default=5, show_default=True, help="Repeats per variant (seed + r).")
@click.option("--seed", type=int, default=None, help="Base seed (default 0; official protocol: 101).")
@click.option("--design", type=click.Choice(["one-at-a-time", "grid"]), default="one-at-a-time", show_default=True,
              help="Vary one factor at a time around the baseline (10, 10, random), or the full grid.")
@click.option("--run-prefix", "--name", "name", default=None,
              help="Ablation id for the 'ablations' table (default: generated).")
@click.option("--plot", default=None, type=click.Path(dir_okay=False), help="Write a PNG/PDF/SVG plot.")
@click.option("--raw", is_flag=True, help="Print one row per (variant, repeat, method) instead of means.")
@weights_option()
@click.option("--skip-missing-identities", is_flag=True,
              help="Skip (and count) queries whose identity a variant's gallery lacks.")
@device_option()
@batch_size_option()
@workers_option()
@click.option("--overwrite", is_flag=True, help="Replace a stored ablation with the same id.")
@click.option("--protocol", type=click.Choice(["fpr", "official"]), default="fpr", show_default=True,
              help="official: the released code's settings grid and k-means/random galleries "
                   "(docs/reproduce-paper.md); --per-identity/--identities/--sampling/--repeats/--design are "
                   "then not used.")
@click.option("--settings", default=None,
              help="official: NxM list (identities x images per identity); default the released grid "
                   "15x10,25x10,10x10,100x10,10x1,10x5,10x20.")
@click.option("--selection", default="kmeans,random", show_default=True,
              help="official: gallery selections to run (kmeans, random; '' for none).")
@click.option("--cluster-encoder", default="miewid-msv2", show_default=True,
              help="official: encoder whose raw features k-means clusters (the released code: MiewID).")
@click.option("--cluster-weights", default=None, help="official: weights of --cluster-encoder.")
@click.option("--background", default="keep", show_default=True, metavar="keep,remove[:SEGMENTER]",
              help="Comma list of background steps; more than one repeats the sweep per step (Table 14).")
@format_option()
@click.pass_context
def ablate_cmd(ctx, gallery, encoder, queries, per_identity, identities, sampling, repeats, seed, design, name,
               plot, raw, weights, skip_missing_identities, device, batch_size, workers, overwrite, protocol,
               settings, selection, cluster_encoder, cluster_weights, background, fmt) -> None:
    """Gallery ablation: oracle and generated mAP/Sim per gallery variant (one embedding pass)."""
    from fpr import api

    if protocol == "official":
        from click.core import ParameterSource

        unused = [f"--{p.replace('_', '-')}" for p in ("per_identity", "identities", "sampling", "repeats", "design",
                                                       "plot", "raw")
                  if ctx.get_parameter_source(p) == ParameterSource.COMMANDLINE]
        if unused:
            raise InputError(f"{', '.join(unused)} not used by --protocol official",
                             hint="the official protocol runs the released grid: choose it with --settings NxM,... "
                                  "and --selection kmeans,random")
        _ablate_official(ctx, gallery, encoder, queries, settings, selection, cluster_encoder, cluster_weights,
                         seed, name, weights, skip_missing_identities, device, batch_size, workers, overwrite, fmt)
        return

    if plot:
        check_plot_path(plot)  # before the sweep: nothing computed is lost to a bad figure path
    sweep = api.ablate_backgrounds(gallery, encoder, queries, backgrounds=background, name=name, plot=plot,
                                   per_identity=per_identity, identities=identities, sampling=sampling,
                                   repeats=repeats, seed=0 if seed is None else seed, design=design,
                                   workspace=ctx.obj["workspace"], weights=weights, device=device,
                                   batch_size=batch_size, workers=workers,
                                   skip_missing_identities=skip_missing_identities, overwrite=overwrite)
    results, steps = sweep.results, sweep.steps
    res = results[-1]
    table = sweep.table(raw=raw)
    rows = [{k: (None if _isna(v) else v) for k, v in r.items()} for r in table.to_dict("records")]
    if fmt == "json":
        click.echo(dumps({"ablation": res.name, "ablations": [r.name for r in results], "baseline": res.baseline.id, "images_embedded": res.n_images,
                          "computed": res.n_computed, "seconds": res.seconds, "plot": res.plot, "rows": rows}))
        return
    cols = list(table.columns) if raw else (["background"] if len(steps) > 1 else []) + ABLATE_COLUMNS
    if fmt == "table":
        for r in results:
            click.echo(f"ablation {r.name}  gallery {gallery}  encoder {encoder}  baseline {r.baseline.id}  "
                       f"{r.n_images} images embedded once ({r.n_computed} computed)")
    click.echo(render_rows(rows, fmt, cols))
    if plot and fmt == "table":
        click.echo(f"plot: {res.plot}")


OFFICIAL_COLUMNS = ["variant", "identities", "per_identity", "sampling", "group", "method", "baseline_map",
                    "baseline_sim", "generated_map", "generated_sim", "gallery_images"]


def _ablate_official(ctx, gallery, encoder, queries, settings, selection, cluster_encoder, cluster_weights, seed,
                     name, weights, skip_missing_identities, device, batch_size, workers, overwrite, fmt) -> None:
    from fpr import api
    from fpr.workflows.ablate_official import SUBSAMPLE_SEED

    res = api.ablate_official(gallery, encoder, queries, settings=settings,
                          selection=[s.strip() for s in selection.split(",") if s.strip()],
                          cluster_encoder=cluster_encoder, cluster_weights=cluster_weights,
                          seed=SUBSAMPLE_SEED if seed is None else seed, name=name, workspace=ctx.obj["workspace"],
                          weights=weights, device=device, batch_size=batch_size, workers=workers,
                          skip_missing_identities=skip_missing_identities, overwrite=overwrite)
    rows = [{k: (None if _isna(v) else v) for k, v in r.items()} for r in res.rows.to_dict("records")]
    if fmt == "json":
        click.echo(dumps({"ablation": res.name, "protocol": "official", "images_embedded": res.n_images,
                          "seconds": res.seconds, "distractors": res.params["distractors"], "rows": rows}))
        return
    if fmt == "table":
        click.echo(f"ablation {res.name}  gallery {gallery}  encoder {encoder}  protocol official "
                   f"(released settings; seed {res.params['seed']})")
    click.echo(render_rows(rows, fmt, OFFICIAL_COLUMNS))


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
@click.option("--chunk-size", type=click.IntRange(min=1), default=1000, show_default=True, help="Rows per chunk (unit of resume).")
@scope_option()
@click.option("--skip-missing-identities", is_flag=True, help="Reject (instead of refusing) queries whose "
                                                              "identity has no gallery image.")
@click.option("--restart", is_flag=True, help="Ignore the saved progress of an interrupted run.")
@click.option("--list-names", is_flag=True, help="List the names a keep-rule can use, and exit.")
@device_option()
@batch_size_option()
@workers_option()
@engine_options(shards=False)
@format_option()
@click.pass_context
def filter_cmd(ctx, index_name, queries, keep, out, rejected, copy_to, scorers, scorer_options, chunk_size, scope,
               skip_missing_identities, restart, list_names, device, batch_size, workers, engine, ray_address,
               ray_actors, fmt) -> None:
    """Keep generated images that preserved identity (paper 5.4); streams, resumes after a kill."""
    from fpr import api
    from fpr.workflows.filter import describe_variables

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
                         workers=workers, scorer_options=parse_options(scorer_options), restart=restart,
                         engine=engine, ray=ray_settings(engine, ray_address, ray_actors))
    if fmt == "json":
        click.echo(dumps({**res.as_row(), "scorers": res.scorers, "reasons": res.reasons,
                          **({"engine": res.engine} if res.engine else {})}))
        return
    click.echo(render_rows([res.as_row()], fmt))
    if fmt == "table" and res.reasons:
        click.echo(render_rows([{"failed clause": k, "rows": v} for k, v in res.reasons.items()], "table"))
