"""The process that imported cpukern: a variant library first loaded in a
child forked from it stays on its own thread pool (_threads.configure), since
an OpenMP runtime the parent used (torch's libgomp) hangs in the child."""

from __future__ import annotations

import os

IMPORTED_IN = os.getpid()
