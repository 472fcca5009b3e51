"""`python -m vecnorm [--json]`: the dispatcher's report (CPU features, variants, the choice)."""

import sys

from ._cpubuild.report import main

sys.exit(main())
