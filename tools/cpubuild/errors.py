"""One error class per failure kind; the CLI turns them into one clear message.

`exit_code` 2 is a usage error (bad input), 1 a failure while doing the work.
"""

from __future__ import annotations


class CpubuildError(Exception):
    exit_code = 1

    def __init__(self, message: str, *, detail: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail  # e.g. the tail of a build log


class UsageError(CpubuildError):
    exit_code = 2


class MatrixFileError(UsageError):
    """isa_matrix.toml is invalid."""


class UnknownArchError(UsageError):
    """An arch name (or alias) that is not among those offered."""


class UnknownISAError(UsageError):
    """An ISA name that is not in the matrix for the target arch."""


class ToolMissingError(CpubuildError):
    """A required external tool (compiler, cmake, docker, qemu...) is absent."""


class BuildFailedError(CpubuildError):
    """A compile, link or repair step failed."""


class CompilerFlagsError(CpubuildError):
    """The compiler rejects the flags of a variant that was asked for."""


class EmulatedTestError(CpubuildError):
    """A wheel failed its checks (or crashed) under an emulated CPU model."""


class PublishError(CpubuildError):
    """Publishing to an index failed; the index is left as it was."""


class DockerError(CpubuildError):
    """The Docker daemon is unreachable or an image build failed."""


class BenchmarkError(CpubuildError):
    """The benchmark's measuring process failed (crashed or printed no results)."""
