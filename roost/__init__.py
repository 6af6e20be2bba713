"""roost: a terminal supervisor for coding agents."""

__version__ = "0.1.0"
