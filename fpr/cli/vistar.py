"""``fpr vistar run``: VISTAR's role-centric evaluation of a folder of generations against structured prompts."""
from __future__ import annotations

import click

from fpr import api
from fpr.cli.main import cli, device_option, parse_options, scorer_option

REPORT_FORMATS = ("table", "json", "csv")


@cli.group("vistar")
def vistar_group() -> None:
    """VISTAR: structured prompts routed to role x aspect scorers, Core and Hard splits."""


@vistar_group.command("run")
@click.option("--generations", required=True, type=click.Path(file_okay=False),
              help="Folder of <model>/<prompt_id>.png images (one sub-folder per model).")
@click.option("--prompts", "prompts_file", required=True, type=click.Path(dir_okay=False),
              help='CSV/TSV/Parquet with prompt_id, prompt ([role|aspect] text {key="value"}) and optional split '
                   "(core|hard).")
@click.option("--run", "run_id", required=True, help="Name of the stored run.")
@click.option("--relevance", default=None, type=click.Path(dir_okay=False),
              help="Your own role x aspect relevance mask (CSV role,aspect,relevant[,source]); default: fpr's.")
@scorer_option()
@device_option("the scorers' models")
@click.option("--overwrite", is_flag=True, help="Replace a stored run of that name.")
@click.option("--format", "fmt", type=click.Choice(REPORT_FORMATS), default="table", show_default=True,
              help="Output format on stdout.")
@click.pass_context
def vistar_run_cmd(ctx, generations, prompts_file, run_id, relevance, scorer_options, device, overwrite, fmt) -> None:
    """Score each model's image of each prompt with its aspect's scorer; print per-aspect, Core/Hard and role
    scores ('fpr report --run RUN --by role' prints them again)."""
    rep = api.vistar_run(generations, prompts_file, run_id, workspace=ctx.obj["workspace"], relevance=relevance,
                         options=parse_options(scorer_options), device=device, overwrite=overwrite)
    from fpr.render.roles import role_report_text  # pandas: imported when a report is printed, not at start-up

    click.echo(role_report_text(rep.aspects, rep.splits, rep.roles, fmt, rep.nan_reasons))
