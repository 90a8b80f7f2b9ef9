"""graphtree's version, in one place below every other module (a graph store records the version that wrote it)."""

__version__ = "0.1.0"
