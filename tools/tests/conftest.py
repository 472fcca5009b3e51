"""Fixtures shared with cpukern's tests (tests/); the helpers are in tools/tests/testsupport.py."""

from testsupport import repo  # noqa: F401 (a fixture)
