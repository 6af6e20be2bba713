"""The network policy's pure rules: patterns on the exact host and port, and the strictest wins."""

from __future__ import annotations

import pytest

from roost.rules.egress import MAX_PATTERNS, PatternError, Policy, from_record, parse_list, resolve, url_pattern


def allow(*patterns: str, provider: tuple[str, ...] = ()) -> Policy:
    return Policy(chain=(patterns,), provider=provider)


@pytest.mark.parametrize("host,port,ok", [
    ("api.anthropic.com", 443, True), ("API.Anthropic.com.", 443, True), ("api.anthropic.com", 80, True),
    ("api.anthropic.com", 22, False), ("anthropic.com", 443, False), ("evil-api.anthropic.com", 443, False),
    ("api.github.com", 443, True), ("a.b.github.com", 443, True), ("github.com", 443, False),
    ("github.com.evil.net", 443, False), ("localhost", 8080, True), ("localhost", 8081, False),
    ("10.0.0.1", 443, True), ("10.0.0.2", 443, False), ("::1", 443, False),
    ("2130706433", 80, False), ("0x7f.1", 80, False), ("", 443, False), ("a b", 443, False),
])
def test_a_host_passes_only_on_its_exact_name_and_port(host, port, ok):
    policy = allow("api.anthropic.com", "*.github.com", "localhost:8080", "10.0.0.1")
    assert policy.allows(host, port) is ok


def test_no_wildcard_matches_an_address():
    assert not allow("*.x.org").allows("127.0.0.1", 443)
    for wild in ("*.0.0.1", "*.127.0.0.1"):
        with pytest.raises(PatternError):
            parse_list([wild], "allow")


def test_the_provider_passes_whatever_the_lists_say_and_none_passes_nothing():
    policy = Policy(chain=((), ("x.org",)), provider=("api.openai.com:443",))
    assert policy.allows("api.openai.com", 443) and not policy.allows("api.openai.com", 80)
    assert not policy.allows("x.org", 443)  # not on every list of the chain
    assert not Policy(mode="none", provider=("api.openai.com:443",)).allows("api.openai.com", 443)
    assert Policy(mode="all").allows("anything.example", 1)


@pytest.mark.parametrize("url,pattern", [
    ("https://api.anthropic.com", "api.anthropic.com:443"), ("http://127.0.0.1:4321/v1", "127.0.0.1:4321"),
    ("http://[::1]:9/", "[::1]:9"), ("ftp://x.org", None), ("not a url", None), ("http://h:99999", None),
])
def test_a_base_url_gives_its_host_and_port(url, pattern):
    assert url_pattern(url) == pattern


def test_bad_patterns_are_refused_saying_which():
    for bad in ("", "a:b", "*", "x.org:0", "x.org:70000", "http://x.org", "a..b"):
        with pytest.raises(PatternError, match="allow"):
            parse_list([bad], "allow")
    parse_list(["x.org"] * MAX_PATTERNS, "allow")
    with pytest.raises(PatternError, match=f"at most {MAX_PATTERNS}"):
        parse_list(["x.org"] * (MAX_PATTERNS + 1), "allow")


def test_a_child_is_never_more_open_than_its_parent():
    parent = resolve("allow", ["*.github.com"], None, None, None).stored()
    child = resolve("all", None, None, None, parent)
    assert child.mode == "allow" and child.chain == (("*.github.com",),)
    child = resolve("allow", ["*.github.com", "x.org"], "allow", ["x.org", "api.github.com"], parent)
    assert Policy(child.mode, child.chain).allows("api.github.com", 443)
    assert not Policy(child.mode, child.chain).allows("x.org", 443)  # the parent's list does not name it
    assert resolve(None, None, "all", None, resolve("none", None, None, None, None).stored()).mode == "none"
    assert resolve(None, None, "none", None, resolve("all", None, None, None, None).stored()).mode == "none"


def test_the_default_is_allow_with_only_the_provider():
    policy = from_record(resolve(None, None, None, None, None).stored(), ["api.anthropic.com:443"])
    assert policy.mode == "allow"
    assert policy.allows("api.anthropic.com", 443) and not policy.allows("github.com", 443)
    assert from_record(None, []).allows("api.anthropic.com", 443) is False
