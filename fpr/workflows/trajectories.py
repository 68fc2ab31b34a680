"""``fpr export-trajectories``: a run's CIGEval trajectories as agent-tuning data (JSONL), filtered against humans.

CIGEval tunes small models on GPT-4o's trajectories, keeping a sample only when its score is within
0.3 of the human score (the paper: samples deviating by more than 0.3 are excluded; 2,274 remain).
The scale is 0-1: CIGEval's score (the minimum of 0-10 sub-scores) divided by 10, against
ImagenHub's semantic-consistency rating averaged over raters (0, 0.5 or 1 each). One JSONL line per
question of a kept sample::

    {"run", "query_id", "task", "question", "model_score", "human_score", "deviation", "template",
     "turns": [{"role": "observation"|"thought"|"action", "content", "loss"}, ...]}

``loss`` marks what is trained on (thoughts and actions; observations are masked context), see
:func:`fpr.scorers.conditional.cigeval.agent_turns`. Human scores come from an ImagenHub folder
(:mod:`fpr.workflows.imagenhub`) or a ratings file (``query_id,rating[,rater]``, ratings on 0-1);
without either every sample with a score is exported unfiltered (``human_score`` null).

Images: o_0 names the files behind the question's handles (``generated``, ``reference``, ...).
With ``images_dir`` the images tools made (Highlight) are rebuilt from those files exactly as
the judge's tools made them (same size, same box) and written there as PNG, named
``<safe stem of the query id>-<question>-<handle>.png`` (:func:`fpr.files.safe_stem`: any query id, ``/``
included, gives its own file name); their observation then carries ``"path"``.
"""
from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from fpr.errors import InputError
from fpr.files import atomic_write_text, safe_stem
from fpr.workflows.runs import load_run

MAX_DEVIATION = 0.3  # CIGEval's filter, on the 0-1 scale


@dataclass
class TrajectoryExport:
    out: Path
    samples: int  # queries with a CIGEval score and trajectory
    unmatched: int  # of those, without a human score (dropped when humans are given)
    kept: int  # samples within the deviation (all matched ones without humans)
    lines: int  # question trajectories written
    filtered: bool


def run_image_size(provenance: dict | None, run_id: str) -> int:
    """The size (px) the run's CIGEval tools worked at, from its provenance."""
    size = ((provenance or {}).get("scorers") or {}).get("cigeval", {}).get("image_size")
    if not isinstance(size, int):
        raise InputError(f"run '{run_id}' does not record the size CIGEval's images were sent at",
                         hint="pass image_size (--image-size) as the run's cigeval.image_size")
    return size


def write_tool_images(turns: list[dict], folder: Path, stem: str, size: int) -> None:
    """Rebuild the images Highlight made in ``turns`` and write them as ``<stem>-<handle>.png`` in ``folder``;
    each one's observation gets ``"path"``."""
    from PIL import Image

    from fpr.scorers.conditional.cigeval import judge_array
    from fpr.scorers.judges.tools import highlight

    arrays = {h: judge_array(p, size) for h, p in (turns[0]["content"].get("images") or {}).items() if p}
    pending: list[dict] = []  # highlight calls of the current step, in order (their observations follow)
    for t in turns:
        c = t["content"]
        if t["role"] == "action" and isinstance(c, dict) and c.get("tool") == "highlight":
            pending.append(c["arguments"])
        elif t["role"] == "observation" and isinstance(c, dict) and c.get("tool") == "highlight":
            args, handle = pending.pop(0), (c.get("result") or {}).get("image")
            if handle is None:
                continue  # the tool answered with an error: no image
            arrays[handle] = highlight(arrays[args["image"]], args["box"])
            path = folder / f"{stem}-{handle}.png"
            Image.fromarray(arrays[handle], "RGB").save(path)
            c["path"] = str(path)


def within(model_score: float, human_score: float, max_deviation: float = MAX_DEVIATION) -> bool:
    """CIGEval's filter: keep when |score / 10 - human| <= max_deviation (score 0-10, human 0-1)."""
    return abs(model_score / 10.0 - human_score) <= max_deviation + 1e-12  # 0.3 exactly is kept, float-safe


def _human_scores(per_query: pd.DataFrame, run_id: str, imagenhub: str | Path | None,
                  human: Sequence[str | Path] | None) -> dict[str, float] | None:
    if imagenhub is not None and human:
        raise InputError("give --imagenhub or --human, not both")
    if imagenhub is not None:
        from fpr.workflows import imagenhub as ih

        joined = ih.match_run(per_query, ih.human_scores(ih.read_imagenhub(imagenhub)), run_id)
        return dict(zip(joined["query_id"].astype(str), joined["human"].astype(float)))
    if human:
        from fpr.workflows.meta import read_judgments

        ratings = read_judgments(list(human)).ratings
        if ratings.empty:
            raise InputError("the human file holds no ratings (query_id,rating[,rater])",
                             where=", ".join(map(str, human)))
        bad = ratings[(ratings["rating"] < 0) | (ratings["rating"] > 1)]
        if len(bad):
            raise InputError(f"rating {bad['rating'].iloc[0]:g} of query {bad['query_id'].iloc[0]} is off the 0-1 "
                             "scale the 0.3 filter uses", where=", ".join(map(str, human)),
                             hint="divide ratings by their maximum (ImagenHub's SC is 0, 0.5 or 1)")
        return ratings.groupby("query_id")["rating"].mean().to_dict()
    return None


def export_trajectories(run_id: str, out: str | Path, *, workspace: str | Path | None = None,
                        imagenhub: str | Path | None = None, human: Sequence[str | Path] | None = None,
                        max_deviation: float = MAX_DEVIATION, images_dir: str | Path | None = None,
                        image_size: int | None = None) -> TrajectoryExport:
    """Write the run's CIGEval trajectories as JSONL (see the module doc); returns the counts."""
    from fpr.scorers.conditional.cigeval import agent_turns
    from fpr.scorers.judges.prompts import load_template

    if not max_deviation >= 0:
        raise InputError(f"the maximum deviation must be >= 0, got {max_deviation}")
    res = load_run(run_id, workspace=workspace, summary=False)
    aux = res.aux
    cig = aux[aux["scorer"] == "cigeval"] if aux is not None and not aux.empty else pd.DataFrame()
    traj = cig[cig["metric"] == "trajectory"].set_index("query_id")["note"].to_dict() if len(cig) else {}
    if not traj:
        raise InputError(f"run '{run_id}' has no CIGEval trajectories", hint="run it with --scorers cigeval")
    score = cig[cig["metric"] == "score"].set_index("query_id")["value"].astype(float).to_dict()
    humans = _human_scores(res.per_query, run_id, imagenhub, human)
    if images_dir is not None:
        size = image_size if image_size is not None else run_image_size(res.provenance, run_id)
        images_dir = Path(images_dir)
        images_dir.mkdir(parents=True, exist_ok=True)
    t = load_template("cigeval")
    system = t.render("system")
    samples = unmatched = kept = lines = 0
    out = Path(out)
    chunks: list[str] = []  # written whole through fpr.files (a reader never sees half a file)
    for qid in sorted(traj, key=str):
        s = score.get(qid, math.nan)
        if not math.isfinite(s) or not traj[qid]:
            continue  # a failed or missing judgment has no complete trajectory
        samples += 1
        h = None if humans is None else humans.get(str(qid))
        if humans is not None and h is None:
            unmatched += 1
            continue
        if h is not None and not within(s, h, max_deviation):
            continue
        kept += 1
        entries = json.loads(traj[qid])
        task = entries[0].get("task") if entries and "task" in entries[0] else None
        for question, turns in agent_turns(entries, system).items():
            if images_dir is not None:
                write_tool_images(turns, images_dir, f"{safe_stem(str(qid))}-{question}", size)
            rec = {"run": run_id, "query_id": str(qid), "task": task, "question": question,
                   "model_score": s / 10.0, "human_score": h,
                   "deviation": None if h is None else abs(s / 10.0 - h), "template": t.tag, "turns": turns}
            chunks.append(json.dumps(rec, ensure_ascii=False) + "\n")
            lines += 1
    atomic_write_text(out, "".join(chunks))
    return TrajectoryExport(out, samples, unmatched, kept, lines, humans is not None)
