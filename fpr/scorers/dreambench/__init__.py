"""The DreamBench++ family: the judge scorers ``dreambench-concept`` (``concept``) and ``dreambench-prompt``
(``prompt``), on the shared judge kit :mod:`fpr.scorers.judges`.
Importing this package imports neither (finding one scorer imports its module only).
"""
