"""``fpr scorers list`` and ``fpr scorers show``: the registered scorers, their metrics and declared options."""
from __future__ import annotations

from fpr.scorers import all_scorers, get_scorer


def list_scorers() -> list[dict]:
    """One row per registered scorer: name, what it needs, its metrics and option names, a description."""
    return [{"name": name, "needs": ",".join(sorted(sc.needs)),
             "metrics": ",".join(f"{name}.{m}" for m in sc.metrics),
             "options": ",".join(f"{name}.{o.name}" for o in sc.options), "description": sc.description}
            for name, sc in all_scorers().items()]


def scorer_options(name: str) -> list[dict]:
    """The declared options of one scorer: ``<scorer>.<option>``, type, default, allowed values, help."""
    sc = get_scorer(name)
    return [{"option": f"{name}.{o.name}", "type": o.type.__name__,
             "default": "none" if o.default is None else str(o.default),
             "choices": ",".join(o.choices) if o.choices else "", "help": o.help} for o in sc.options]
