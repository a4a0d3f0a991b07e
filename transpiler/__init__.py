"""transpile: an ahead-of-time, source-to-source compiler for PyTorch models."""

__version__ = "0.1.0"
