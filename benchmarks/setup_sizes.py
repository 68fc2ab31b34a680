"""What the set-up installs, by make target: each distribution's installed size in a venv (its RECORD's files,
as on disk), grouped by the closure of requirements of ``fpr[cpu]`` (make demo) and ``fpr[cpu,test]`` (make test).

    .venv/bin/python benchmarks/setup_sizes.py            # the venv running it

Run by the venv's own Python (it reads that environment's metadata). Result: benchmarks/results/setup.md.
"""
from __future__ import annotations

import os
import sys
from importlib import metadata

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

CUDA = ("nvidia-", "triton", "cuda-")


def installed() -> dict[str, metadata.Distribution]:
    return {canonicalize_name(d.metadata["Name"]): d for d in metadata.distributions()}


def size(dist: metadata.Distribution) -> int:
    total = 0
    for f in dist.files or ():
        try:
            total += os.lstat(dist.locate_file(f)).st_size
        except OSError:  # listed in RECORD, not on disk (a .pyc never written)
            pass
    return total


def closure(dists: dict[str, metadata.Distribution], name: str, extras: tuple[str, ...]) -> set[str]:
    """Every installed distribution ``name[extras]`` requires, itself included (markers evaluated here)."""
    seen, todo, names = set(), [(canonicalize_name(name), extras)], set()
    while todo:
        key = todo.pop()
        if key in seen:
            continue
        seen.add(key)
        n, ex = key
        if n not in dists:
            print(f"not installed: {n} (required; left out of the sums)", file=sys.stderr)
            continue
        names.add(n)
        for text in dists[n].requires or ():
            req = Requirement(text)
            if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in ("", *ex)):
                todo.append((canonicalize_name(req.name), tuple(sorted(req.extras))))
    return names


def main() -> None:
    dists = installed()
    sizes = {n: size(d) for n, d in dists.items()}
    demo = closure(dists, "fpr", ("cpu",))
    test = closure(dists, "fpr", ("cpu", "test"))
    gib = 2 ** 30
    print(f"venv: {sys.prefix}")
    print("| set | distributions | GiB | largest |")
    print("|---|---|---|---|")
    for label, names in (("make demo: fpr[cpu]", demo), ("make test adds: fpr[cpu,test] - fpr[cpu]", test - demo),
                         ("installed, required by neither", set(dists) - test)):
        top = sorted(names, key=lambda n: -sizes[n])[:6]
        print(f"| {label} | {len(names)} | {sum(sizes[n] for n in names) / gib:.2f} | "
              + ", ".join(f"{n} {sizes[n] / 2 ** 20:.0f} MiB" for n in top) + " |")
    cuda = sum(sizes[n] for n in demo if n.startswith(CUDA))
    torch = sizes.get("torch", 0)
    rest = sum(sizes[n] for n in demo) - cuda - torch
    print(f"\nof make demo's: torch {torch / gib:.2f} GiB, its CUDA libraries (nvidia-*, triton, cuda-*) "
          f"{cuda / gib:.2f} GiB; everything else {rest / gib:.2f} GiB")
    print(f"all installed: {sum(sizes.values()) / gib:.2f} GiB")


if __name__ == "__main__":
    main()
