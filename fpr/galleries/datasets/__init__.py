"""Importers for the paper's real datasets and their curation presets.

Each importer reads a dataset in its official (or a common re-distributed) layout,
validates it, and returns :class:`~fpr.galleries.records.ImageRecord` s; a layout
problem is one :class:`~fpr.errors.InputError` line naming exactly what is
missing. :mod:`.presets` turns them into the paper's galleries.
"""
from fpr.galleries.datasets.cars import read_stanford_cars
from fpr.galleries.datasets.cub import read_cub
from fpr.galleries.datasets.presets import PRESETS, PresetResult, build_preset
from fpr.galleries.datasets.wildlife import read_wildlife_reid10k

__all__ = ["read_cub", "read_stanford_cars", "read_wildlife_reid10k", "PRESETS", "PresetResult", "build_preset"]
