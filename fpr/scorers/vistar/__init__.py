"""The VISTAR family: the per-aspect scorers ``vistar-tr``, ``-cse``, ``-gc``, ``-li``, ``-psc``, ``-cpa`` and
``hwpq`` (VISTAR's questionnaire, answered by a judge), with VISTAR's prompts, roles and packaged data
(``data/``: the relevance mask, the CPA lexicon and weights, the light directions).
Importing this package imports none of them (finding one scorer imports its module only).
"""
