"""The one evaluation pipeline: the queries table (``inputs``), gallery labels, scope and the opened index
(``relevance``), streamed block scores and metrics (``scoring``, ``recheck``), Sim (``similarity``),
per-query rows (``frames``), the oracle (``oracle``), sanity signs (``sanity``) and ``pipeline.evaluate``,
which runs them in order. It reads the store (an index's rows, the schema's metric columns) but never
opens a workspace for a user operation (docs/architecture.md, "Where we depart")."""
