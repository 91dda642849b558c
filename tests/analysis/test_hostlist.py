"""Slurm host lists: the grammar, the errors, the round trip, and what real scontrol printed."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apps.analysis import hostlist
from apps.analysis.hostlist import HostlistError, compress, expand

# --- Recorded facts ------------------------------------------------------------------------
# Printed by `scontrol show hostnames SPEC` of Slurm 22.05.8 (Debian 12, this machine), 24.11.5
# (Debian 13: `chroot /var/lib/slurm-modern/trixie scontrol ...`) and 26.05.5 (Debian unstable:
# `chroot /var/lib/slurm-modern/unstable scontrol ...`, both with a one-node SLURM_CONF), the
# same on all three unless a release is named.
SCONTROL_HOSTNAMES = {
    "rack[1-2]-node[01-02]": ["rack1-node01", "rack1-node02", "rack2-node01", "rack2-node02"],
    "gpu[1-3]x[2-3]": ["gpu1x2", "gpu1x3", "gpu2x2", "gpu2x3", "gpu3x2", "gpu3x3"],
    "gpu[08-10]": ["gpu08", "gpu09", "gpu10"],
    "gpu[01,03-04],login1,cpu[1-2]": ["gpu01", "gpu03", "gpu04", "login1", "cpu1", "cpu2"],
    "gpu[01-02]-ib[1-2]": ["gpu01-ib1", "gpu01-ib2", "gpu02-ib1", "gpu02-ib2"],
    "n[5]": ["n5"],
    " a1 , b2 ": ["a1", "b2"],
    "a[1-2] b": ["a1", "a2", "b"],
    "a1,a1,a2": ["a1", "a1", "a2"],
    "a[1,1,2]": ["a1", "a1", "a2"],
    ",,a1,": ["a1"],
    "a[01-2]": ["a01", "a02"],
    "a[1-010]": ["a1", "a2", "a3", "a4", "a5", "a6", "a7", "a8", "a9", "a10"],
    "a[001-3]": ["a001", "a002", "a003"],
    "a[0-0]": ["a0"],
    "a-[1-2]": ["a-1", "a-2"],
    "[1-2]": ["1", "2"],
    "a,[1-2]": ["a", "1", "2"],
    "a1-2": ["a1-2"],
    "": [],
    # 22.05 prints "Invalid hostlist" for text after the last bracket; 24.11 and 26.05 read it:
    "gpu[01-02]-ib": ["gpu01-ib", "gpu02-ib"],
    "gpu[01-02]ib": ["gpu01ib", "gpu02ib"],
    "a[1-2]b[3-4]c": ["a1b3c", "a1b4c", "a2b3c", "a2b4c"],
    "[1-2]b": ["1b", "2b"],
    "rack[1-2]-node[01-02]-ib": ["rack1-node01-ib", "rack1-node02-ib",
                                 "rack2-node01-ib", "rack2-node02-ib"],
}

# Printed by `scontrol show hostlistsorted NAMES` (same three releases, same output on each), for
# names without duplicates: `compress` is that command after Slurm's hostlist_uniq.
SCONTROL_HOSTLISTSORTED = {
    "rack1-node01,rack1-node02,rack2-node01": "rack1-node[01-02],rack2-node01",
    "rack1-node01,rack2-node01,rack1-node02,rack2-node02": "rack1-node[01-02],rack2-node[01-02]",
    "gpu01,gpu02,gpu03,gpu05": "gpu[01-03,05]",
    "login1,gpu01,cpu1,gpu02": "cpu1,gpu[01-02],login1",
    "gpu9,gpu10,gpu11": "gpu[9-11]",
    "gpu09,gpu10": "gpu[09-10]",
    "gpu098,gpu099,gpu100": "gpu[098-100]",
    "gpu098,gpu099,gpu100,gpu1000": "gpu[098-100,1000]",
    "gpu100,gpu99,gpu098": "gpu[99,098,100]",
    "x0,x00,x000,x1,x01": "x[0-1,00-01,000]",
    "n08,n8,n9,n09,n10": "n[8-9,08-10]",
    "n9,n10,n010,n0010": "n[9-10,010,0010]",
    "z01,z1,z02,z2": "z[1-2,01-02]",
    "a1,a01,a001": "a[1,01,001]",
    "n100,n08": "n[08,100]",
    "n1,n2,n": "n,n[1-2]",
    "node,node1,nod": "nod,node,node1",
    "rack10-node1,rack2-node1,rack1-node1": "rack1-node1,rack2-node1,rack10-node1",
    "a10b1,a9b1": "a9b1,a10b1",
    "a1b1,a2b1,a1b2": "a1b[1-2],a2b1",
    "ab2,a2,ab10,a10": "a[2,10],ab[2,10]",
    "x1,x-1,x_1,xa1,X1": "X1,x1,x-1,x_1,xa1",
    "n2,N1,n1,_x1,-x1": "-x1,N1,_x1,n[1-2]",
    "gpu01-ib,gpu02-ib": "gpu01-ib,gpu02-ib",  # only a trailing number folds
    "n1.ib,n2.ib": "n1.ib,n2.ib",
    "1,2,3": "[1-3]",
}
# Where Slurm's answer depends on the order of its input we differ: scontrol printed
# n[8-10,08] for "n8,n9,n10,n08" but n[8-9,08-10] for "n08,n8,n9,n09,n10", the same set.


@pytest.mark.parametrize(("spec", "names"), SCONTROL_HOSTNAMES.items())
def test_it_expands_as_scontrol_show_hostnames(spec, names):
    assert expand(spec) == names
    assert hostlist.count(spec) == len(names)


@pytest.mark.parametrize(("names", "folded"), SCONTROL_HOSTLISTSORTED.items())
def test_it_compresses_as_scontrol_show_hostlistsorted(names, folded):
    assert compress(names.split(",")) == folded
    assert sorted(expand(folded)) == sorted(names.split(","))


# --- The issue's examples ------------------------------------------------------------------


def test_the_examples_of_issue_25():
    assert expand("rack[1-2]-node[01-02]") == ["rack1-node01", "rack1-node02",
                                               "rack2-node01", "rack2-node02"]
    assert expand("gpu[01-02]-ib") == ["gpu01-ib", "gpu02-ib"]


# --- More grammar -------------------------------------------------------------------------


@pytest.mark.parametrize(("spec", "names"), [
    ("gpu01", ["gpu01"]),
    ("login", ["login"]),
    ("gpu[01-03]", ["gpu01", "gpu02", "gpu03"]),
    ("gpu[1]", ["gpu1"]),
    ("gpu[007]", ["gpu007"]),
    ("gpu[01,03],login1", ["gpu01", "gpu03", "login1"]),
    ("a[1-2],b[3-4]", ["a1", "a2", "b3", "b4"]),
    ("a[2,1]", ["a2", "a1"]),  # order kept, as written
    ("a1\tb1\nc1", ["a1", "b1", "c1"]),
    ("gpu[08-10].ib", ["gpu08.ib", "gpu09.ib", "gpu10.ib"]),
    ("n[99-101]", ["n99", "n100", "n101"]),
    ("n[098-100]", ["n098", "n099", "n100"]),
])
def test_it_reads_the_whole_grammar(spec, names):
    assert expand(spec) == names


@pytest.mark.parametrize(("spec", "message"), [
    ("a[1-2", "'[' at 1 is never closed"),
    ("a1-2]", "']' without '[' at 4"),
    ("a[1-2]]", "']' without '[' at 6"),
    ("a[[1-2]]", "'[' inside brackets at 2"),
    ("a[]", "bad range '' (want N or LO-HI)"),
    ("a[1-2,]", "bad range ''"),
    ("a[1,,2]", "bad range ''"),
    ("a[3-1]", "bad range '3-1': it ends before it starts"),
    ("a[1-]", "bad range '1-'"),  # Slurm reads a1; Slurm never writes it
    ("a[-1]", "bad range '-1'"),
    ("a[x-y]", "bad range 'x-y'"),
    ("a[1-2-3]", "bad range '1-2-3'"),
    ("a[ 1-2 ]", "bad range ' 1-2 '"),
    ("a[1-9/2]", "bad range '1-9/2'"),  # no step syntax in Slurm
    ("a[0-9999999999999999999]", "number too long"),
    ("a[1-1000001]", "more than 1,000,000 names"),
    ("a[1-1000][1-1001]", "more than 1,000,000 names"),  # a product over the bound
])
def test_it_refuses_malformed_host_lists(spec, message):
    with pytest.raises(HostlistError, match="bad host list") as info:
        expand(spec)
    assert message in str(info.value)
    with pytest.raises(HostlistError):
        hostlist.count(spec)


def test_the_error_is_a_value_error_that_quotes_a_long_spec_briefly():
    with pytest.raises(ValueError, match=r"'x{80}\.\.\.': '\[' at 200 is never closed"):
        expand("x" * 200 + "[")


def test_a_hostile_range_fails_before_anything_is_built():
    # 10**18 names would never finish: the bound is checked on the counts first
    for spec in ("a[0-999999999999999999]", "a[0-999999][0-999999][0-999999]"):
        with pytest.raises(HostlistError, match="more than 1,000,000 names"):
            expand(spec)


def test_the_bound_counts_the_whole_list(monkeypatch):
    monkeypatch.setattr(hostlist, "MAX_NAMES", 100)
    assert len(expand("a[1-10][1-10]")) == 100  # exactly the bound is fine
    for spec in ("a[1-10][1-10],b", "a," * 101, "a[1-50],b[1-51]"):
        with pytest.raises(HostlistError, match="more than 100 names"):
            expand(spec)
        with pytest.raises(HostlistError, match="more than 100 names"):
            hostlist.count(spec)


# --- Compressing ---------------------------------------------------------------------------


@pytest.mark.parametrize(("names", "folded"), [
    ([], ""),
    (["gpu01"], "gpu01"),
    (["gpu02", "gpu01", "gpu01"], "gpu[01-02]"),  # sorted, duplicates dropped
    (["gpu1", "gpu3"], "gpu[1,3]"),
    (["gpu08", "gpu09", "gpu10"], "gpu[08-10]"),  # padding kept
    (["login1", "gpu02", "cpu2", "gpu01"], "cpu2,gpu[01-02],login1"),
])
def test_it_compresses(names, folded):
    assert compress(names) == folded


@pytest.mark.parametrize("name", ["", "a,b", "a b", "a[1]", "a]", "a\n"])
def test_it_refuses_names_a_host_list_cannot_hold(name):
    with pytest.raises(HostlistError, match="cannot be a node name"):
        compress(["gpu01", name])


@pytest.mark.parametrize(("values", "text"), [
    ([], ""), ([3], "3"), ([5, 0, 1, 2], "0-2,5"), ([0, 2, 2, 4], "0,2,4"),
    (list(range(8)), "0-7"),
])
def test_index_ranges_both_ways(values, text):
    assert hostlist.compress_ranges(values) == text
    assert hostlist.expand_ranges(text) == sorted(set(values))


@pytest.mark.parametrize("text", ["0-", "3-1", "a", "0,,1", "1-" + "9" * 30])
def test_bad_index_ranges_are_refused(text):
    with pytest.raises(HostlistError, match=f"bad host list {text!r}"):
        hostlist.expand_ranges(text)


# --- Properties ------------------------------------------------------------------------------

_PREFIX = st.text("abgpurack-._", min_size=0, max_size=6)
_DIGITS = st.integers(0, 200).flatmap(
    lambda n: st.sampled_from([str(n), str(n).zfill(2), str(n).zfill(3), ""]))
_NAME = st.builds(lambda p, d, s: p + d + s, _PREFIX, _DIGITS,
                  st.sampled_from(["", "", "", "-ib", ".x"])).filter(bool)
_NAMES = st.lists(_NAME, max_size=40)
# no per-example deadline: the suite runs on two busy cores, where a slow example is not a bug
_CALM = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_CALM
@given(_NAMES)
def test_compress_round_trips_to_the_sorted_unique_names(names):
    folded = compress(names)
    back = expand(folded)
    assert sorted(back) == sorted(set(names))
    assert len(back) == len(set(names))
    assert compress(back) == folded  # and in compress's own order, so folding again is stable
    assert compress(reversed(names)) == folded  # the input order does not matter


@_CALM
@given(st.lists(_NAME, min_size=1, max_size=20))
def test_a_plain_list_expands_to_itself_duplicates_and_all(names):
    assert expand(",".join(names)) == names


@_CALM
@given(st.lists(st.integers(0, 300), max_size=40))
def test_index_ranges_round_trip(values):
    assert hostlist.expand_ranges(hostlist.compress_ranges(values)) == sorted(set(values))
