"""Rendering results: cells and tables for the CLI and the service, the paper's pivot, the HTML report."""
