"""The service's routes, one module per concern; each calls the :mod:`fpr.api` function the CLI calls."""
