"""Reading and writing the tabular files users hand to fpr (CSV or Parquet)."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from fpr.errors import InputError
from fpr.files import atomic_write_path

TABLE_SUFFIXES = (".csv", ".parquet", ".pq", ".tsv")


def read_table(path: str | Path, *, required: tuple[str, ...], what: str = "manifest") -> pd.DataFrame:
    """Read a CSV/TSV/Parquet file as strings; check required columns and that they have no blanks."""
    p = Path(path)
    if not p.exists():
        raise InputError(f"{what} not found", where=str(p))
    if p.stat().st_size == 0:
        raise InputError(f"{what} is empty (0 bytes)", where=str(p))
    suffix = p.suffix.lower()
    try:
        if suffix in (".parquet", ".pq"):
            df = pd.read_parquet(p)
        elif suffix in (".csv", ".tsv"):
            df = pd.read_csv(p, sep="\t" if suffix == ".tsv" else ",", dtype=str, keep_default_na=False)
        else:
            raise InputError(f"{what} must be .csv, .tsv or .parquet", where=str(p))
    except InputError:
        raise
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
    p = Path(value).expanduser()
    return str(p if p.is_absolute() else (base / p))


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
