"""sagedoctor: install SageAttention correctly, and prove it works."""

__version__ = "0.1.0"
