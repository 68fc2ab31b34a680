"""``fpr sql``: read-only SQL over the workspace (the store's locked-down connection)."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from fpr.store import records as db
from fpr.store.workspace import Workspace


def sql(query: str, *, workspace: str | Path | None = None) -> pd.DataFrame:
    """Run a SQL query on a connection that can neither write nor reach files, extensions or the network."""
    return db.user_sql(Workspace.open(workspace), query)

