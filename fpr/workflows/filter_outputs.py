"""The filter's outputs: part files written atomically, assembled in order into the kept and rejected
tables (streaming), kept images copied into a folder tree, leftovers of a killed run removed.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd

from fpr.errors import InputError
from fpr.files import atomic_write_path, safe_stem


def _fmt_of(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix in (".parquet", ".pq"):
        return "parquet"
    if suffix in (".csv", ".tsv"):
        return suffix[1:]
    raise InputError("output must end in .csv, .tsv or .parquet", where=str(path))


def _write_part(df: pd.DataFrame, path: Path, fmt: str) -> None:
    if fmt == "parquet":
        atomic_write_path(path, lambda tmp: df.to_parquet(tmp, index=False))
    else:
        atomic_write_path(path, lambda tmp: df.to_csv(tmp, index=False, header=False,
                                                 sep="\t" if fmt == "tsv" else ","))


def _assemble(parts: list[Path], out: Path, fmt: str, columns: list[str]) -> None:
    """Concatenate part files into ``out`` (streaming, temp file + rename)."""
    if fmt == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        def write(tmp: str) -> None:
            schemas = [pq.read_schema(p) for p in parts]
            schema = pa.unify_schemas(schemas, promote_options="permissive") if schemas else pa.schema(
                [(c, pa.string()) for c in columns])
            schema = pa.schema([schema.field(c) for c in columns])
            with pq.ParquetWriter(tmp, schema) as w:
                for p in parts:
                    t = pq.read_table(p)
                    if t.num_rows:
                        w.write_table(t.select(columns).cast(schema))
    else:
        def write(tmp: str) -> None:
            with open(tmp, "w", newline="", encoding="utf-8") as fp:
                fp.write(pd.DataFrame(columns=columns).to_csv(index=False, sep="\t" if fmt == "tsv" else ","))
                for p in parts:
                    with open(p, "r", newline="", encoding="utf-8") as src:
                        shutil.copyfileobj(src, fp)
    atomic_write_path(out, write)


def _remove_temporary_outputs(out: Path, rej_path: Path | None) -> None:
    """The outputs' temporary files a killed run left (``.tmp-<name>.*``, from :func:`fpr.files.atomic_write_path`)."""
    for target in (out, rej_path):
        if target is not None:
            for tmp in target.parent.glob(f".tmp-{target.name}.*"):
                tmp.unlink(missing_ok=True)


def _copy_kept(df: pd.DataFrame, folder: Path) -> None:
    """``<folder>/<group>/<identity>/<query_id>-<file name>``: a folder tree ``fpr gallery import`` reads."""
    for path, group, ident, qid in zip(df["__path"], df["__group"], df["__identity"], df["__query_id"]):
        src = Path(path)
        # group and identity folders keep their names (they are read back as labels); the file's name is unique
        dest = (folder / safe_stem(group, unique=False) / safe_stem(ident, unique=False)
                / f"{safe_stem(qid)}-{safe_stem(src.stem, unique=False)}{src.suffix}")
        if dest.exists() and dest.stat().st_size == src.stat().st_size:
            continue
        atomic_write_path(dest, lambda tmp, src=src: shutil.copyfile(src, tmp))
