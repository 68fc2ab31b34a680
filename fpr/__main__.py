"""``python -m fpr`` is the ``fpr`` command."""
from fpr.cli.main import main

main()
