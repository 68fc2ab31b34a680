"""Pure numbers: ranking metrics and their kernels, per-query metric declarations, summaries and
intervals, keep-rules, agreement statistics. NumPy and pandas only: no files, no models, no store."""
