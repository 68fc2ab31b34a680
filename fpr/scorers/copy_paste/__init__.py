"""The copy-paste family: ``copy-paste``, whether a query is a (transformed) copy of a reference.

``scorer`` registers it; ``align``, ``exact`` and ``kernels`` are the alignment search it runs.
Importing this package imports none of them (finding one scorer imports its module only).
"""
