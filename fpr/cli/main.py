"""The ``fpr`` command. Each sub-command module registers its commands on :data:`cli`.

Commands are thin: parse arguments, call the same function a notebook would
(``fpr.api`` and friends), print results to stdout and progress to stderr. Errors
a user can fix print as one line and exit non-zero; ``--debug`` shows tracebacks.
"""
from __future__ import annotations

import sys

import click

from fpr import __version__, progress, settings
from fpr.defaults import EMBED_BATCH_SIZE
from fpr.errors import FprError, InputError
from fpr.registry import import_module

# Sub-command modules; each defines commands with ``@cli.command`` / ``@cli.group``.
COMMAND_MODULES = ("gallery", "encoders", "datasets", "train", "index", "query", "evaluate", "demo", "workflows", "meta",
                   "refvnli", "vistar", "serve", "trajectories", "explain", "plan",
                   "benchmark", "reproduce")


# `fpr --help` lists the commands in these sections, in this order (a command in none: "other commands")
COMMAND_SECTIONS = {
    "evaluate": ("demo", "evaluate", "query", "score", "compare", "filter", "ablate", "plan", "explain", "reproduce",
                 "examples"),
    "galleries & indices": ("gallery", "index", "encoders", "embed"),
    "scorers & judges": ("scorers", "vistar", "refvnli", "meta", "export-trajectories"),
    "reports": ("report", "runs", "export", "sql"),
    "service & admin": ("serve", "benchmark"),
}

GLOBAL_FLAGS = ("-q", "--quiet", "--debug")
GLOBAL_VALUED = ("--workspace",)


def hoist_global_options(args: list[str]) -> list[str]:
    """``fpr query ... -q --workspace W`` as ``fpr -q --workspace W query ...``: the global options are
    accepted after the sub-command too (no sub-command has options of those names). Nothing after
    ``--`` moves."""
    front: list[str] = []
    rest: list[str] = []
    i = 0
    while i < len(args):
        a = args[i]
        if a == "--":
            rest += args[i:]
            break
        if a in GLOBAL_FLAGS:
            front.append(a)
        elif a in GLOBAL_VALUED and i + 1 < len(args):
            front += args[i:i + 2]
            i += 1
        elif any(a.startswith(f"{v}=") for v in GLOBAL_VALUED):
            front.append(a)
        else:
            rest.append(a)
        i += 1
    return front + rest


class FprGroup(click.Group):
    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if ctx.parent is None:  # the top-level group sees the whole command line
            args = hoist_global_options(list(args))
        return super().parse_args(ctx, args)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The top-level commands by what they are for (:data:`COMMAND_SECTIONS`), not alphabetically."""
        if ctx.parent is not None:
            return super().format_commands(ctx, formatter)
        names = [n for n in self.list_commands(ctx) if not getattr(self.get_command(ctx, n), "hidden", False)]
        placed = {n for members in COMMAND_SECTIONS.values() for n in members}
        sections = [(title, [n for n in members if n in names]) for title, members in COMMAND_SECTIONS.items()]
        sections.append(("other commands", [n for n in names if n not in placed]))
        width = max((len(n) for n in names), default=0)
        for title, members in sections:
            if members:
                rows = [(n, self.get_command(ctx, n).get_short_help_str(max(formatter.width - width - 6, 20)))
                        for n in members]
                with formatter.section(title.capitalize()):
                    formatter.write_dl(rows)

    def main(self, *args, **kwargs):
        """Usage errors (bad option values, unknown commands) as one line too, exit 2."""
        kwargs.pop("standalone_mode", None)
        try:
            rv = super().main(*args, standalone_mode=False, **kwargs)
        except click.UsageError as exc:
            if type(exc).__name__ in ("NoArgsIsHelpError", "NoArgsIsHelp"):  # no arguments: the help
                click.echo(exc.ctx.get_help() if exc.ctx else exc.format_message())
                sys.exit(0)
            cmd = exc.ctx.command_path if exc.ctx else "fpr"
            click.echo(f"fpr: error: {exc.format_message().rstrip('.')}; see '{cmd} --help'".replace("\n", " "),
                       err=True)
            sys.exit(exc.exit_code)
        except click.ClickException as exc:
            click.echo(f"fpr: error: {exc.format_message()}".replace("\n", " "), err=True)
            sys.exit(exc.exit_code)
        except click.exceptions.Abort:
            click.echo("fpr: aborted", err=True)
            sys.exit(1)
        if isinstance(rv, int) and rv:
            sys.exit(rv)
        sys.exit(0)

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except FprError as exc:
            if ctx.obj and ctx.obj.get("debug"):
                raise
            click.echo(f"fpr: error: {exc.one_line()}", err=True)
            sys.exit(exc.exit_code)
        except KeyboardInterrupt:
            click.echo("fpr: interrupted; stored state is unchanged and a rerun resumes", err=True)
            sys.exit(130)
        except (click.ClickException, click.exceptions.Exit, click.exceptions.Abort, SystemExit):
            raise
        except Exception as exc:  # a bug in fpr: say so in one line unless debugging
            if ctx.obj and ctx.obj.get("debug"):
                raise
            msg = str(exc).splitlines()[0] if str(exc) else ""
            click.echo(f"fpr: internal error: {type(exc).__name__}: {msg}; rerun with --debug for the traceback",
                       err=True)
            sys.exit(1)


@click.group(cls=FprGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--workspace", envvar="FPR_WORKSPACE", default="fpr-workspace", show_default=True,
              type=click.Path(file_okay=False), help="Workspace folder (fpr.duckdb + indices/).")
@click.option("--debug", is_flag=True, help="Show tracebacks.")
@click.option("-q", "--quiet", is_flag=True, help="No progress or log lines on stderr.")
# version= rather than package_name=: reading the installed metadata costs a scan of site-packages at start-up
# (tests/cli/test_startup.py checks that the two agree).
@click.version_option(version=__version__, prog_name="fpr")
@click.pass_context
def cli(ctx: click.Context, workspace: str, debug: bool, quiet: bool) -> None:
    """fpr: Finer-Personalization Rank — does a generated image keep its subject's identity?"""
    ctx.ensure_object(dict)
    ctx.obj["workspace"] = workspace
    ctx.obj["debug"] = debug or settings.flag("FPR_DEBUG")
    if quiet:
        progress.set_enabled(False)


def format_option(default: str = "table"):
    return click.option("--format", "fmt", type=click.Choice(["table", "json", "csv"]), default=default,
                        show_default=True, help="Output format on stdout.")


def width_options():
    """``--width N`` and ``--wide`` of a listing: a table folds to the terminal (``COLUMNS``, else 100 off a
    terminal); ``--wide`` prints every cell whole, as ``--format csv`` does."""
    def decorate(f):
        f = click.option("--wide", is_flag=True, help="Print every cell whole (no folding to the terminal).")(f)
        return click.option("--width", type=click.IntRange(min=1), default=None,
                            help="Fold the table to N characters (default: COLUMNS, else the terminal's width, "
                                 "else 100).")(f)
    return decorate


def table_width(width: int | None, wide: bool) -> int:
    """The width a table folds to; :data:`~fpr.render.cells.WHOLE` (every cell on one line) for ``--wide``."""
    from fpr.render.cells import WHOLE, terminal_width

    return WHOLE if wide else terminal_width(width)


def device_option(what: str = "the encoder"):
    return click.option("--device", default="auto", show_default=True,
                        help=f"Where {what} runs: auto (CUDA when available, else CPU), cpu, cuda, cuda:N or mps.")


def batch_size_option():
    return click.option("--batch-size", type=click.IntRange(min=1), default=EMBED_BATCH_SIZE, show_default=True,
                        help="Images per embedding batch (decode + forward); CPU embeddings do not depend on it.")


def workers_option():
    return click.option("--workers", type=click.IntRange(min=0), default=None,
                        help="Image-decoding worker processes (default: on a CPU, threads between forward passes).")


def weights_option():
    return click.option("--weights", default=None,
                        help="Weights file or folder of the encoder (default: its registered weights).")


def scope_option():
    return click.option("--scope", type=click.Choice(["group", "all"]), default="group", show_default=True,
                        help="What a query is ranked against: its group's gallery images (the paper) or the "
                             "whole gallery.")


def scorer_option():
    return click.option("--scorer-option", "scorer_options", multiple=True, metavar="KEY=VALUE",
                        help="Scorer option, repeatable, e.g. copy-paste.encoder=clip-vit-b-32.")


def engine_options(shards: bool = True):
    """``--engine local|ray``, ``--ray-address``, ``--ray-actors`` (and ``--ray-shard-size``): see docs/ray.md."""
    def decorate(f):
        if shards:
            f = click.option("--ray-shard-size", type=click.IntRange(min=1), default=None,
                             help="With --engine ray: images per shard, the unit of resume (default 256, fewer "
                                  "for large inputs: at most 256 MB of decoded pixels).")(f)
        f = click.option("--ray-actors", type=click.IntRange(min=1), default=None,
                         help="With --engine ray: actors holding the encoder (default: one per GPU, else 1; "
                              "more actors than GPUs share them).")(f)
        f = click.option("--ray-address", default=None,
                         help="With --engine ray: a running cluster (ray://HOST:10001, HOST:6379 or auto); "
                              "default: a local Ray runtime on this machine.")(f)
        return click.option("--engine", type=click.Choice(["local", "ray"]), default="local", show_default=True,
                            help="Where to embed and score: this process, or Ray (pip install 'fpr[ray]').")(f)
    return decorate


def ray_settings(engine: str, address: str | None, actors: int | None, shard_size: int | None = None) -> dict | None:
    """The ``ray=`` argument of the API from the engine options (checked there: Ray options with the
    local engine are an error)."""
    if engine != "ray" and not (address or actors):
        return None
    return {"address": address, "actors": actors, **({"shard_size": shard_size} if shard_size else {})}


def parse_options(pairs: tuple[str, ...]) -> dict[str, str]:
    """``--scorer-option clip-t.encoder=clip-vit-b-32`` (repeatable) -> dict."""
    out: dict[str, str] = {}
    for p in pairs:
        if "=" not in p:
            raise InputError(f"--scorer-option must be KEY=VALUE, got '{p}'",
                             hint="e.g. --scorer-option copy-paste.encoder=clip-vit-b-32")
        k, v = p.split("=", 1)
        out[k.strip()] = v.strip()
    return out



for _name in COMMAND_MODULES:  # a listed module that is missing is a packaging bug: let the import fail loudly
    import_module(f"fpr.cli.{_name}")


def main() -> None:  # console-script entry point
    cli(obj={})


if __name__ == "__main__":
    main()
