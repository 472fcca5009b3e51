"""Selection on macOS as a macOS wheel will see it: only the variants with
apple-clang flags are built (.dylib), features come from hw.optional sysctls
(the runtime probe's cpubuild_probe_sysctl), and Linux HWCAP bits mean nothing
there. cpubuild.runtime.select with cpukern's matrix and prefix."""

from __future__ import annotations

from typing import Any

import pytest
from cpubuild.contract import load_config
from cpubuild.matrix import load_matrix
from cpubuild.runtime import select as sel
from testsupport import CPUKERN_MATRIX, REPO

MATRIX = load_matrix(CPUKERN_MATRIX)
CONFIG = load_config(REPO)
ARCH = "aarch64"
MAC_BUILT = [v.name for v in MATRIX.variants_for(ARCH) if "apple-clang" in v.compilers]
MANIFEST: dict[str, Any] = MATRIX.manifest(ARCH, MAC_BUILT, "_cpukern_{variant}.dylib", probe="_cpukern_probe.dylib",
                                           project=CONFIG.runtime_facts())
SYSCTLS = {name: spec["sysctl"] for name, spec in MANIFEST["features"].items() if "sysctl" in spec}


def select(sysctl_values: dict[str, int], **raw: int) -> Any:
    report = sel.decode_features(MANIFEST["features"], sel.RawProbe(sysctl=sysctl_values, **raw), darwin=True)
    return sel.select_variant(MANIFEST["variants"], report.found, built=MAC_BUILT, env_prefix=CONFIG.env_prefix)


def test_every_macos_variant_is_detectable_by_sysctl() -> None:
    for v in MATRIX.variants_for(ARCH):
        if v.name in MAC_BUILT:
            assert set(v.requires) <= set(SYSCTLS), f"{v.name} could never be selected on a Mac"


def test_macos_libraries_are_dylibs() -> None:
    assert all(v["library"].endswith(".dylib") for v in MANIFEST["variants"])
    assert MANIFEST["probe"] == "_cpukern_probe.dylib" and MANIFEST["env_prefix"] == "CPUKERN"


def test_sve_is_linux_only() -> None:
    assert "sve" not in MAC_BUILT and "sve" not in SYSCTLS and "sve2" not in SYSCTLS
    report = sel.decode_features(MANIFEST["features"], sel.RawProbe(sysctl={k: 1 for k in SYSCTLS.values()}), darwin=True)
    assert report.not_found["sve"] == report.not_found["sve2"] == "not available on macOS"
    assert set(report.found) == set(SYSCTLS)


def test_all_sysctls_pick_the_best_macos_variant_not_sve() -> None:
    everything = {key: 1 for key in SYSCTLS.values()}
    best = max((v for v in MATRIX.variants_for(ARCH) if v.name in MAC_BUILT), key=lambda v: v.priority)
    chosen = select(everything)
    assert chosen.selected == best.name
    absent = [s for s in chosen.variants if s.name not in MAC_BUILT]
    assert absent and all(s.reason == "not built into this package" for s in absent)


def test_linux_hwcap_bits_are_ignored_on_macos() -> None:
    # every HWCAP bit set, every sysctl 0: a Mac that reports nothing runs the baseline
    chosen = select({}, hwcap=2**64 - 1, hwcap2=2**64 - 1)
    assert chosen.selected == MATRIX.baseline(ARCH).name


@pytest.mark.parametrize("missing", sorted(SYSCTLS))
def test_one_missing_sysctl_drops_the_variants_that_need_it(missing: str) -> None:
    values = {key: 1 for key in SYSCTLS.values()}
    values[SYSCTLS[missing]] = 0
    chosen = select(values)
    needs = MATRIX.variant(ARCH, chosen.selected).requires
    assert missing not in needs
    for status in chosen.variants:
        if status.name in MAC_BUILT and missing in MATRIX.variant(ARCH, status.name).requires:
            assert not status.supported and missing in status.missing
