"""The SSRF guard's decisions. No test here opens a connection to a non-loopback address:
decisions are asserted on ``vet_url`` itself, and name resolution goes through a fake resolver
(or the system resolver only for "localhost")."""

from __future__ import annotations

import ipaddress
import shutil
import socket
import ssl
import subprocess
from collections.abc import Sequence
from pathlib import Path

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from loopback import LoopbackServer, Reply
from superdialog_core.tools.http import pinned_http_client, send
from superdialog_core.tools.ssrf import (
    HostUnresolved,
    UrlRefused,
    blocked_reason,
    parse_ip_literal,
    vet_url,
)


def fake_resolver(table: dict[str, list[str]]):
    """A resolver answering from ``table``; an unknown name fails like DNS would."""
    asked: list[str] = []

    async def resolve(host: str, port: int) -> Sequence[str]:
        asked.append(host)
        if host not in table:
            raise OSError(f"Name or service not known: {host}")
        return table[host]

    resolve.asked = asked  # type: ignore[attr-defined]
    return resolve


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1", "127.0.0.1"),
        ("2130706433", "127.0.0.1"),
        ("0x7f.1", "127.0.0.1"),
        ("0x7f000001", "127.0.0.1"),
        ("0177.0.0.1", "127.0.0.1"),
        ("127.1", "127.0.0.1"),
        ("10.1.2", "10.1.0.2"),
        ("0", "0.0.0.0"),
        ("::ffff:127.0.0.1", "::ffff:7f00:1"),
        ("example.com", None),
        ("1e100.net", None),
    ],
)
def test_ip_literals_fold_to_the_address_they_mean(text: str, expected: str | None) -> None:
    parsed = parse_ip_literal(text)
    assert (str(parsed) if parsed is not None else None) == expected


@pytest.mark.parametrize("text", ["1.2.3.4.5", "256.1.1.1", "09.1.1.1", "1.0x100.1.1"])
def test_numeric_looking_names_that_are_not_addresses_are_refused(text: str) -> None:
    with pytest.raises(UrlRefused, match="not a valid IP address"):
        parse_ip_literal(text)


@pytest.mark.parametrize(
    "url",
    [
        "http://10.0.0.1/x",
        "http://169.254.169.254/latest/meta-data/",
        "http://2130706433/",
        "http://0x7f.1/",
        "http://0177.0.0.1/",
        "http://[::ffff:127.0.0.1]/",
        "http://[::ffff:169.254.169.254]/",
        "http://[::1]:8080/",
        "http://[fd00:ec2::254]/",
        "http://[fe80::1%25eth0]/",
        "http://[2002:a00:1::]/",  # 6to4 wrapping 10.0.0.1
        "http://0.0.0.0/",
        "http://224.0.0.1/",
        "http://100.64.0.1/",
        "http://192.168.1.1/",
        "http://localhost:8080/",
        "http://metadata/",
        "http://metadata.google.internal/computeMetadata/v1/",
        "http://app.localhost/",
    ],
)
async def test_private_loopback_link_local_and_metadata_targets_are_refused(url: str) -> None:
    resolver = fake_resolver({})
    with pytest.raises(UrlRefused) as info:
        await vet_url(url, (), resolver=resolver)
    assert "policies.allow_hosts" in info.value.reason
    assert resolver.asked == []  # decided without any lookup


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("file:///etc/passwd", "scheme 'file' is not allowed"),
        ("gopher://example.com/", "scheme 'gopher'"),
        ("example.com/path", r"scheme '\(none\)'"),
        ("http:///path", "no host"),
        ("http://example.com:99999/", "malformed URL"),
    ],
)
async def test_malformed_urls_are_refused_with_a_reason(url: str, message: str) -> None:
    with pytest.raises(UrlRefused, match=message):
        await vet_url(url, (), resolver=fake_resolver({}))


async def test_a_name_resolving_to_loopback_is_refused() -> None:
    resolver = fake_resolver({"rebind.example": ["127.0.0.1"]})
    with pytest.raises(UrlRefused, match=r"127\.0\.0\.1 is loopback.*rebind\.example"):
        await vet_url("http://rebind.example/", (), resolver=resolver)


async def test_one_private_address_among_public_ones_refuses_the_name() -> None:
    resolver = fake_resolver({"mixed.example": ["93.184.216.34", "10.0.0.7"]})
    with pytest.raises(UrlRefused, match=r"10\.0\.0\.7 is private"):
        await vet_url("https://mixed.example/", (), resolver=resolver)


async def test_system_resolver_sees_localhost_as_loopback_when_allowed_by_ip_only() -> None:
    # "localhost" is refused by name before any lookup; allowing the IP does not open the name.
    with pytest.raises(UrlRefused, match="local or metadata name"):
        await vet_url("http://localhost/", ["127.0.0.1"])


async def test_public_name_is_pinned_to_its_vetted_address() -> None:
    resolver = fake_resolver({"api.example.com": ["2606:2800:220:1::1", "93.184.216.34"]})
    target = await vet_url(
        "https://user:pw@API.example.com./v1/visits?date=2026-12-01#frag", (), resolver=resolver
    )
    assert target.address == "93.184.216.34"  # IPv4 first
    assert target.addresses == ("93.184.216.34", "2606:2800:220:1::1")
    assert target.pinned_url == "https://user:pw@93.184.216.34:443/v1/visits?date=2026-12-01"
    assert target.host_header == "api.example.com"
    assert target.userinfo == "user:pw"


async def test_unresolvable_host_is_a_network_failure_not_a_refusal() -> None:
    with pytest.raises(HostUnresolved, match=r"cannot resolve host 'nowhere\.example'"):
        await vet_url("http://nowhere.example/", (), resolver=fake_resolver({}))


async def test_allow_hosts_opens_exactly_the_hosts_written() -> None:
    target = await vet_url("http://127.0.0.1:8080/a", ["127.0.0.1"])
    assert (target.address, target.port, target.host_header) == ("127.0.0.1", 8080, "127.0.0.1:8080")
    # The same address spelled differently is the same host.
    assert (await vet_url("http://2130706433/", ["127.0.0.1"])).address == "127.0.0.1"
    # Allowing one private address does not open another.
    with pytest.raises(UrlRefused):
        await vet_url("http://127.0.0.2/", ["127.0.0.1"])
    resolver = fake_resolver({"localhost": ["::1", "127.0.0.1"]})
    target = await vet_url("http://LOCALHOST:9/", ["localhost"], resolver=resolver)
    assert target.address == "127.0.0.1"
    assert target.host_header == "localhost:9"


def test_blocked_reason_passes_public_addresses() -> None:
    assert blocked_reason(ipaddress.ip_address("93.184.216.34")) is None
    assert blocked_reason(ipaddress.ip_address("2606:2800:220:1::1")) is None
    assert "metadata" in (blocked_reason(ipaddress.ip_address("169.254.169.254")) or "")


async def test_allowed_loopback_host_is_reachable_through_the_pinned_address() -> None:
    async with LoopbackServer() as server:
        server.route("GET", "/ping", Reply(json={"pong": True}))
        url = server.url("/ping").replace("127.0.0.1", "localhost")
        target = await vet_url(url, ["localhost"], resolver=fake_resolver({"localhost": ["127.0.0.1"]}))
        async with httpx.AsyncClient(trust_env=False) as client:
            response = await client.get(target.pinned_url, headers={"Host": target.host_header})
        assert response.json() == {"pong": True}
        assert server.requests[0].header("host") == f"localhost:{server.port}"


@pytest.fixture(scope="module")
def clinic_cert(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate for api.clinic.test (made with the openssl command)."""
    if shutil.which("openssl") is None:
        # .ci/run installs it; elsewhere say what is missing instead of passing quietly.
        pytest.fail("the openssl command is needed to make a test certificate: apt-get install openssl")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-keyout", str(key), "-out", str(cert), "-subj", "/CN=api.clinic.test",
         "-addext", "subjectAltName=DNS:api.clinic.test"],
        check=True, capture_output=True,
    )
    return cert, key


async def test_https_is_pinned_to_the_vetted_address_and_verified_against_the_name(
    clinic_cert: tuple[Path, Path],
) -> None:
    cert, key = clinic_cert
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(cert, key)
    client_ctx = ssl.create_default_context(cafile=str(cert))
    resolver = fake_resolver({"api.clinic.test": ["127.0.0.1"], "evil.test": ["127.0.0.1"]})
    allow = ["api.clinic.test", "evil.test"]
    async with LoopbackServer(ssl_context=server_ctx) as server:
        server.route("GET", "/slots", Reply(json={"free": 2}))
        good = await vet_url(f"https://api.clinic.test:{server.port}/slots", allow, resolver=resolver)
        other = await vet_url(f"https://evil.test:{server.port}/slots", allow, resolver=resolver)
        assert good.pinned_url == f"https://127.0.0.1:{server.port}/slots"

        async with pinned_http_client(verify=client_ctx) as client:
            reply = await send(client, "GET", good, headers={}, body=None, timeout=5)
            assert (reply.status, reply.data) == (200, {"free": 2})
            # Same address, another name: a new connection, verified against that name (the
            # certificate does not cover it), not the pooled one verified for api.clinic.test.
            with pytest.raises(httpx.ConnectError, match="certificate"):
                await send(client, "GET", other, headers={}, body=None, timeout=5)
            # The transport refuses any new connection the guard did not vet.
            with pytest.raises(httpx.ConnectError, match="did not vet"):
                await client.get(f"https://127.0.0.1:{server.port}/slots")

        # A client that is not pinning gets the rewritten URL plus Host and SNI.
        async with httpx.AsyncClient(verify=client_ctx, trust_env=False) as plain:
            reply = await send(plain, "GET", good, headers={}, body=None, timeout=5)
            assert reply.status == 200
        assert [r.header("host") for r in server.requests] == [f"api.clinic.test:{server.port}"] * 2


_spelling = st.tuples(
    st.integers(min_value=0, max_value=(1 << 32) + 5),
    st.sampled_from(["dec", "hex", "HEX", "oct"]),
).map(lambda p: {"dec": str(p[0]), "hex": hex(p[0]), "HEX": hex(p[0]).upper().replace("0X", "0x"),
                 "oct": "0" + oct(p[0])[2:]}[p[1]])


@given(st.lists(_spelling, min_size=1, max_size=5).map(".".join))
def test_ip_literal_folding_agrees_with_inet_aton(text: str) -> None:
    """Resolvers fold numeric names with inet_aton; the guard must read them the same way."""
    try:
        expected = ipaddress.IPv4Address(socket.inet_aton(text))
    except OSError:
        with pytest.raises(UrlRefused):
            parse_ip_literal(text)
        return
    assert parse_ip_literal(text) == expected
