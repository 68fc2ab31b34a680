"""``fpr plan``: how many identities and generations per identity a paired comparison of two methods needs.

From a pilot (two methods of a stored run, paired as ``fpr compare`` pairs them) or from stated assumptions
(the standard deviation of one generation's paired AP difference, its correlation within identity), the
fewest identities, for each number of generations per identity, at which ``fpr compare``'s test detects a
given mAP difference with a given power, and the width its 95% interval will have. The statistics are
:mod:`fpr.metrics.power`; this module reads the run.
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from fpr.errors import InputError, NotFoundError
from fpr.metrics import power as pw


def plan(run_id: str | None = None, method_a: str | None = None, method_b: str | None = None, *,
         difference: float | None = None, power: float = 0.8, alpha: float = 0.05,
         per_identity: Sequence[int] | None = None, metric: str = "ap", sd: float | None = None,
         icc: float | None = None, pairing: str = "prompt", n_sim: int = pw.N_SIM, seed: int = 0,
         workspace: str | Path | None = None) -> dict:
    """The planned designs (``designs``: per generations-per-identity value, the fewest identities, the pairs,
    the generations per method, the predicted power, the false-alarm rate and the interval width).

    With ``run_id``: the pilot is methods ``method_a`` and ``method_b`` of that run (``difference`` defaults to
    the pilot's own; ``per_identity`` to 1, 2, 4, ... up to the pilot's generations per identity, at most
    that many). Without:
    ``sd``, ``icc`` and ``difference`` are the stated assumptions (``pairing``: ``prompt``, one pair per
    generation as with a prompt list shared by the methods; ``identity``, one pair per identity as with one
    prompt per identity)."""
    if n_sim < 100:
        raise InputError(f"--sims must be >= 100, got {n_sim}", hint="1000 (the default) gives power to about 1.5 points")
    if run_id is None:
        if sd is None or icc is None or difference is None:
            raise InputError("without a pilot run, give the assumptions --sd, --icc and --difference",
                             hint="or plan from a pilot: --run R --a M1 --b M2")
        return pw.assumed_power(sd=sd, icc=icc, difference=difference, power=power, alpha=alpha,
                                per_identity=tuple(per_identity or (1,)), pairing=pairing, n_sim=n_sim, seed=seed)
    if sd is not None or icc is not None:
        raise InputError("--sd and --icc are assumptions for planning without a pilot; a pilot run measures them",
                         hint="drop --sd/--icc, or drop --run")
    if not method_a or not method_b:
        raise InputError("a pilot run needs both methods", hint="--a M1 --b M2")
    if method_a == method_b:
        raise InputError(f"--a and --b are the same method '{method_a}'", hint="plan a comparison of two methods")
    from fpr.workflows.runs import load_run

    res = load_run(run_id, workspace=workspace, summary=False)
    per_query = res.per_query
    methods = list(dict.fromkeys(per_query["method"]))
    for m in (method_a, method_b):
        if m not in methods:
            raise NotFoundError(f"run '{run_id}' has no method '{m}'", hint=f"methods: {', '.join(methods)}")
    if metric not in per_query.columns:
        raise InputError(f"unknown metric '{metric}'", hint="e.g. ap, sim, cmc1, inp")
    pilot = pw.pilot_from_frame(per_query, method_a, method_b, metric=metric)
    out = pw.plan_from_pilot(pilot, difference=difference, power=power, alpha=alpha,
                             per_identity=tuple(per_identity) if per_identity else None, n_sim=n_sim, seed=seed)
    out["pilot"].update({"run": run_id, "encoder": res.encoder, "metric": metric})
    return out
