"""Model judges: one client for OpenAI-compatible endpoints, its cache, prompt templates and agent tools.

Used by the scorers ``dreambench-concept``, ``dreambench-prompt``, ``viescore``,
``cigeval`` and ``hwpq``. Importing this package imports neither ``openai`` nor
``transformers``; they load when a request is made or a detector is used.
"""
