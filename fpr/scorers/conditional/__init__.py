"""Judges of conditional image generation: ``viescore`` (VIEScore) and ``cigeval`` (the CIGEval agent), on the
shared judge kit :mod:`fpr.scorers.judges`.
Importing this package imports neither (finding one scorer imports its module only).
"""
