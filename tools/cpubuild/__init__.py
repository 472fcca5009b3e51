"""cpubuild: one C++ kernel tree -> CPU wheels and images for every ISA."""

__version__ = "0.2.0"
