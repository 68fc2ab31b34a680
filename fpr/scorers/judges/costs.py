"""The cost columns every judge scorer reports per query (how many replies came from the cache, how many requests
were made, their tokens, how many answers were missing). Declared apart from the judge machinery so that readers
of scores (the pipeline's sanity checks) can name them without importing the client, templates and tools."""
from __future__ import annotations

COST_METRICS = ("cached", "calls", "prompt_tokens", "completion_tokens", "missing")

__all__ = ["COST_METRICS"]
