"""Fixtures shared with cpukern's tests (tests/); the helpers are in tools/tests/testsupport.py.

Also the collection order: under `pytest -n 2 --dist loadfile` (scripts/test.sh)
each worker takes the next whole file in collection order, so the longest files
go first (longest-processing-time-first); otherwise the longest, collected last
alphabetically, ran alone at the end while the other worker idled.
"""

from __future__ import annotations

import pytest
from testsupport import repo  # noqa: F401 (a fixture)

# Longest first: seconds per file of a cold-ccache CI run on 2 cores (2026-12-04).
LONGEST_FIRST = (
    "test_vllm_cpu.py",  # 780 s
    "test_release_workflow.py",  # 429
    "test_torch_project.py",  # 415
    "test_pypi_roundtrip.py",  # 313
    "test_image.py",  # 254
    "test_vllm_cpu_aarch64.py",  # 231
    "test_bochs_avx512.py",  # 222
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(LONGEST_FIRST)))  # stable: file order kept otherwise
