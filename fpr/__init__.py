"""fpr: Finer-Personalization Rank."""
__version__ = "0.1.0"
