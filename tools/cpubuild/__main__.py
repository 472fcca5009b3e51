"""`python -m cpubuild`: the same as the `cpubuild` command."""

import sys

from .cli import main

sys.exit(main())
