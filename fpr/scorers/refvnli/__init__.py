"""The RefVNLI family: ``refvnli`` (``scorer``), its training data (``data``) and model (``model``), and the
packaged world-trained weights (``weights/``).
Importing this package imports none of them (finding one scorer imports its module only).
"""
