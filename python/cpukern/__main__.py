"""`python -m cpukern [--json]`: what this CPU has, what is built, what runs.

The report of the runtime cpubuild ships into the package, plus cpukern's
thread binding. Needs only the standard library (it must run where NumPy
cannot import, e.g. a CPU without XSAVE)."""

from __future__ import annotations

import sys
from typing import Any

from . import _dispatch, _threads
from ._cpubuild import report as _report


def _render_threads(data: dict[str, Any]) -> list[str]:
    threads = data["threads"]
    if threads["error"]:
        return [f"threads: error: {threads['error']}"]
    return [f"threads: {threads['summary']} (at first use)"]


def main(argv: list[str] | None = None) -> int:
    # CPUKERN_OMP_THREADS_BIND, applied when the pool starts
    code: int = _report.main(argv, dispatcher=_dispatch.DISPATCHER, extra={"threads": _threads.report},
                             render_extra=_render_threads)
    return code


if __name__ == "__main__":
    sys.exit(main())
