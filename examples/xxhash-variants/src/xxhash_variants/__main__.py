"""`python -m xxhash_variants [--json]`: what this CPU has, which variants are built, which one runs."""

import sys

from ._cpubuild.report import main

sys.exit(main())
