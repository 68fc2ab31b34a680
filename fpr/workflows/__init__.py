"""User operations, one module each: what `fpr <command>`, the Python API and the service call."""
