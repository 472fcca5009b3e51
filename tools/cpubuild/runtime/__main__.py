"""`python -m <package>._cpubuild [--json]`: the dispatcher's report (what `python -m <package>` prints)."""

import sys

from .report import main

sys.exit(main())
