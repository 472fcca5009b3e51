"""Fixtures shared with cpubuild's tests (tools/tests/); the helpers are in tools/tests/testsupport.py."""

from testsupport import repo  # noqa: F401 (a fixture)
