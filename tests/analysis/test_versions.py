"""The version comparator on the odd strings inventories print, and the advisory table's
branch logic (a fixed version per maintained branch)."""

from __future__ import annotations

import pytest

from apps.analysis.versions import Advisory, is_vulnerable, parse_version


@pytest.mark.parametrize(("raw", "release", "pre"), [
    ("22.05.8", (22, 5, 8), (0, 0)),
    ("slurm-wlm 22.05.8-1+deb12u1", (22, 5, 8), (0, 0)),
    ("slurm 23.11.1", (23, 11, 1), (0, 0)),
    ("v1.17.8", (1, 17, 8), (0, 0)),
    ("nvidia-container-toolkit v1.16.1", (1, 16, 1), (0, 0)),
    ("1.17.8-rc.1", (1, 17, 8), (-1, 1)),
    ("2.6.0a0+git1234", (2, 6, 0), (-3, 0)),
    ("2.6.0.dev20240101", (2, 6, 0), (-4, 20240101)),
    ("1.0~rc1", (1, 0), (-1, 1)),
    ("1:0.5.15-2", (0, 5, 15), (0, 0)),
    ("2.5.1+cu121", (2, 5, 1), (0, 0)),
    ("4.2.3-4.1.3", (4, 2, 3), (0, 0)),
    ("1.17.8 (commit abc)", (1, 17, 8), (0, 0)),
    (5, (5,), (0, 0)),
])
def test_versions_are_read_from_odd_strings(raw, release, pre):
    version = parse_version(raw)
    assert version is not None and version.release == release and version.pre == pre


@pytest.mark.parametrize("raw", ["main-d5e5f51", "", "   ", "x1.2", None, True, [], {"v": 1},
                                 "v", "unknown", "\x00\x01", "9" * 5000])
def test_unreadable_versions_are_none_never_an_error(raw):
    assert parse_version(raw) is None or parse_version(raw).release  # never raises
    if raw != "9" * 5000:
        assert parse_version(raw) is None


@pytest.mark.parametrize(("lower", "higher"), [
    ("2.6.0a0", "2.6.0"), ("1.17.8-rc.1", "1.17.8"), ("23.02.7", "23.02.10"),
    ("2.6.0.dev1", "2.6.0a0"), ("0.5.17", "0.5.18"), ("22.05.11", "23.02.0"),
])
def test_versions_order_like_releases(lower, higher):
    assert parse_version(lower) < parse_version(higher)


def test_trailing_zeros_do_not_matter():
    assert parse_version("22.05") == parse_version("22.05.0") == parse_version("22.5.0.0")


SLURM = Advisory("slurm", ("22.05.11", "23.02.7", "23.11.1"), ("CVE-2023-49933",))
MUNGE = Advisory("munge", ("0.5.18",), ("CVE-2026-25506",), affected_from="0.5")
CTK_0132 = Advisory("nvidia_container_toolkit", ("1.16.2",), ("CVE-2024-0132",))
CTK_23266 = Advisory("nvidia_container_toolkit", ("1.17.8",), ("CVE-2025-23266",))
TORCH = Advisory("pytorch", ("2.6.0",), ("CVE-2025-32434",))


@pytest.mark.parametrize(("advisory", "version", "affected"), [
    (SLURM, "22.05.8", True), (SLURM, "22.05.11", False), (SLURM, "23.02.6", True),
    (SLURM, "23.02.7", False), (SLURM, "23.11.0", True), (SLURM, "23.11.1", False),
    (SLURM, "24.05.1", False), (SLURM, "21.08.8", True), (SLURM, "23.05.1", True),
    (MUNGE, "0.5.15", True), (MUNGE, "0.5.17", True), (MUNGE, "0.5.18", False),
    (MUNGE, "0.4.14", False), (MUNGE, "0.5", True),
    (CTK_0132, "1.16.1", True), (CTK_0132, "1.16.2", False),
    (CTK_23266, "1.17.7", True), (CTK_23266, "1.17.8", False), (CTK_23266, "1.16.1", True),
    (CTK_23266, "1.18.0", False),
    (TORCH, "2.5.1", True), (TORCH, "2.6.0", False), (TORCH, "2.6.0a0+git1", True),
    (TORCH, "1.13.1", True), (TORCH, "2.7.0", False),
])
def test_advisories_know_their_branches(advisory, version, affected):
    assert is_vulnerable(parse_version(version), advisory) is affected
