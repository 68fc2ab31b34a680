"""Reading and writing the tabular files users hand to fpr (CSV or Parquet)."""
from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pandas as pd

from fpr.cards import utf8_path
from fpr.errors import InputError
from fpr.files import atomic_write_path

TABLE_SUFFIXES = (".csv", ".parquet", ".pq", ".tsv")


def table_format(path: Path, what: str) -> str:
    """``parquet``, ``csv`` or ``tsv`` by suffix; any other suffix is one line naming the file."""
    suffix = path.suffix.lower()
    if suffix in (".parquet", ".pq"):
        return "parquet"
    if suffix in (".csv", ".tsv"):
        return suffix[1:]
    raise InputError(f"{what} must be .csv, .tsv or .parquet", where=str(path))


def iter_table_chunks(path: Path, chunk_size: int, columns: list[str] | None = None, *,
                      what: str = "table") -> Iterator[pd.DataFrame]:
    """A table in chunks of ``chunk_size`` rows (CSV/TSV cells as strings), never whole in memory."""
    fmt = table_format(path, what)
    try:
        if fmt == "parquet":
            import pyarrow.parquet as pq

            for batch in pq.ParquetFile(path).iter_batches(batch_size=chunk_size, columns=columns):
                yield batch.to_pandas()
        else:
            with pd.read_csv(path, sep="\t" if fmt == "tsv" else ",", dtype=str, keep_default_na=False,
                             chunksize=chunk_size, usecols=columns) as reader:
                yield from reader
    except (ValueError, OSError, pd.errors.ParserError) as exc:
        raise InputError(f"cannot read {what}: {str(exc).splitlines()[0]}", where=str(path)) from None


def table_columns(path: Path, *, what: str = "table") -> list[str]:
    """The column names of a table, reading only its header (or Parquet schema)."""
    fmt = table_format(path, what)
    try:
        if fmt == "parquet":
            import pyarrow.parquet as pq

            return [str(c) for c in pq.read_schema(path).names]
        return [str(c) for c in pd.read_csv(path, sep="\t" if fmt == "tsv" else ",", nrows=0).columns]
    except (ValueError, OSError, pd.errors.EmptyDataError) as exc:
        raise InputError(f"cannot read {what}: {str(exc).splitlines()[0]}", where=str(path)) from None


def read_table(path: str | Path, *, required: tuple[str, ...], what: str = "manifest") -> pd.DataFrame:
    """Read a CSV/TSV/Parquet file as strings; check required columns and that they have no blanks."""
    p = Path(path)
    if not p.exists():
        raise InputError(f"{what} not found", where=str(p))
    if p.stat().st_size == 0:
        raise InputError(f"{what} is empty (0 bytes)", where=str(p))
    fmt = table_format(p, what)
    try:
        if fmt == "parquet":
            df = pd.read_parquet(p)
        else:
            df = pd.read_csv(p, sep="\t" if fmt == "tsv" else ",", dtype=str, keep_default_na=False)
    except Exception as exc:  # pandas/pyarrow raise many types for malformed files
        raise InputError(f"cannot parse {what}: {str(exc).splitlines()[0]}", where=str(p)) from None
    df.columns = [str(c).strip() for c in df.columns]
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise InputError(f"{what} lacks required column(s) {', '.join(missing)}", where=str(p),
                         hint=f"required: {', '.join(required)}; found: {', '.join(df.columns) or '(none)'}")
    if df.empty:
        raise InputError(f"{what} has no rows", where=str(p))
    df = df.astype(object).where(df.notna(), "")
    for col in df.columns:
        df[col] = df[col].map(lambda v: v if isinstance(v, str) else ("" if v is None else str(v))).str.strip()
    for col in required:
        blank = df.index[df[col] == ""]
        if len(blank):
            raise InputError(f"{what} has an empty '{col}' in row {int(blank[0]) + 2}"
                             + (f" (and {len(blank) - 1} more)" if len(blank) > 1 else ""), where=str(p))
    return df


def resolve_path(value: str, base: Path) -> str:
    """``value`` against the table's folder ``base``; a result whose name is not UTF-8 is one line."""
    p = Path(value).expanduser()
    return utf8_path(p if p.is_absolute() else (base / p), what="listed file name")


def split_paths(value, base: Path) -> list[str]:
    """A ';'-joined list of paths (or a list of them), each resolved against ``base``: the queries file's
    ``reference_paths`` and the VISTAR prompts file's, read alike."""
    parts = [str(v) for v in value] if isinstance(value, (list, tuple)) else str(value or "").split(";")
    return [resolve_path(v.strip(), base) for v in parts if v.strip()]


def write_table(df: pd.DataFrame, path: str | Path) -> Path:
    """Write CSV or Parquet (by suffix) atomically (a reader never sees half a file), mode per the umask."""
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix not in TABLE_SUFFIXES:
        raise InputError("output must end in .csv, .tsv or .parquet", where=str(p))

    def write(tmp: Path) -> None:
        if suffix in (".parquet", ".pq"):
            df.to_parquet(tmp, index=False)
        else:
            df.to_csv(tmp, index=False, sep="\t" if suffix == ".tsv" else ",")

    return atomic_write_path(p, write, hint="choose an output path in a writable folder")
