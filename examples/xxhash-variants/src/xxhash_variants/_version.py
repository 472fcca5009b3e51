# The base version: `cpubuild wheel` adds the git distance and hash
# (0.1.0.devN+g<hash>); the wheel's copy of this file holds the full version.
__version__ = "0.1.0"
