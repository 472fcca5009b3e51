"""`python -m vllm_cpu_ops [--json]`: what this CPU has, which variants are built, which one runs."""

import sys

from ._cpubuild.report import main

sys.exit(main())
