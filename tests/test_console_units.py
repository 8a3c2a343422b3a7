"""The web console's pieces without a broker (pybroker/console/): escaping, the bounded record
decoder of the message browser, the lag ring buffer and chart, HTTP Basic parsing and the
credential checks (PLAIN / SCRAM through the broker's own SASL code), and the HTTP server's
prefix routes and read-only answers.  Pages in a browser: compat_tests/test_console.py."""

from __future__ import annotations

import asyncio
import base64
import json
import socket

import pytest

from pybroker.config import ConfigError, build_config
from pybroker.console import auth, html, records
from pybroker.console.lag import CAPACITY, Ring, chart
from pybroker.errors import ErrorCode
from pybroker.http_server import HttpResponse, HttpServer
from pybroker.security.scram import make_credential
from pybroker.wire.records import build_batch, parse_batches

HOSTILE = "<script>alert('x')</script>&\""


def test_every_helper_escapes():
    assert "<" not in html.esc(HOSTILE) and '"' not in html.esc(HOSTILE)
    assert html.link("/topics/" + html.url(HOSTILE), HOSTILE) == (
        '<a href="/topics/%3Cscript%3Ealert%28%27x%27%29%3C%2Fscript%3E%26%22">'
        "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;&amp;&quot;</a>"
    )
    page = html.page(
        HOSTILE, "", section="topics", broker_id=0, cluster_id=HOSTILE, principal=HOSTILE,
        render_ms="1",
    )  # fmt: skip
    assert "<script>" not in page
    assert html.size(1536) == "1.5 KiB" and html.num(12345) == "12,345" and html.num(None)


def _batch(values, compression=0, base_offset=0):
    data = bytearray(
        build_batch(
            [(f"k{i}".encode(), v, [("h", b"1")]) for i, v in enumerate(values)],
            base_offset=base_offset,
            timestamp=1000,
            compression=compression,
        )
    )
    return bytes(data)


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])  # none, gzip, snappy, lz4, zstd
def test_records_are_decoded_from_any_codec_within_the_range(codec):
    data = _batch([b"a", b"b", b"c", b"d"], codec, base_offset=10) + _batch([b"e"], codec, 14)
    d = records._decode(data, 11, 15, 10)
    assert [(r.offset, r.key, r.value, r.headers) for r in d.matches] == [
        (11, b"k1", b"b", [("h", b"1")]),
        (12, b"k2", b"c", [("h", b"1")]),
        (13, b"k3", b"d", [("h", b"1")]),
        (14, b"k0", b"e", [("h", b"1")]),
    ]
    assert d.upto == 15 and d.scanned == 4 and not d.cut
    d = records._decode(data, 11, 13, 10)  # the high watermark bounds it
    assert [r.offset for r in d.matches] == [11, 12] and d.upto == 13
    d = records._decode(data, 10, 15, 2)  # and the limit
    assert [r.offset for r in d.matches] == [10, 11] and d.upto == 12
    d = records._decode(data, 10, 15, 10, max_scan=3)  # and the scan budget
    assert [r.offset for r in d.matches] == [10, 11, 12] and d.scanned == 3 and d.upto == 13
    # a filter: the records looked at and passed over still move the position on
    d = records._decode(data, 10, 15, 10, match=records.Match(None, b"e"))
    assert [r.offset for r in d.matches] == [14] and d.scanned == 5 and d.upto == 15
    d = records._decode(data, 10, 15, 10, match=records.Match(b"k2", None))
    assert [r.offset for r in d.matches] == [12]


def test_a_batch_inflating_past_the_budget_shows_its_first_records(monkeypatch):
    monkeypatch.setattr(records, "DECODE_BUDGET", 64 * 1024)
    data = _batch([bytes(10_000)] * 40, compression=1)  # 400 KB of zeros, gzip
    (h,) = parse_batches(data)
    got, cut = records._records(data, h, 0, 40, 100)
    assert cut and 0 < len(got) < 40
    assert [r.offset for r in got] == list(range(len(got)))


def test_values_render_as_text_json_or_hex_and_are_capped():
    assert records.render_bytes(b'{"a": [1]}', "json") == ('{\n  "a": [\n    1\n  ]\n}', "")
    assert records.render_bytes(b"not json", "json") == ("not json", "")
    assert records.render_bytes(b"\x00\xff", "hex") == ("00 ff", "")
    assert records.render_bytes(b"\xff", "text") == ("\ufffd", "")
    assert records.render_bytes(None, "text") == ("", "null")
    text, note = records.render_bytes(b"x" * 10_000, "text")
    assert len(text) == records.SHOW_BYTES and note == "10,000 bytes"


def test_timestamps_are_milliseconds_or_iso_8601_in_utc():
    assert records.parse_timestamp("1700000000000") == 1_700_000_000_000
    assert records.parse_timestamp("2023-11-14T22:13:20Z") == 1_700_000_000_000
    assert records.parse_timestamp("2023-11-14T22:13:20") == 1_700_000_000_000
    assert records.parse_timestamp("2023-11-14T23:13:20+01:00") == 1_700_000_000_000
    with pytest.raises(ValueError):
        records.parse_timestamp("yesterday")


def test_the_ring_keeps_the_last_samples_in_bounded_memory():
    ring = Ring()
    size = ring._data.buffer_info()[1] * ring._data.itemsize
    for i in range(CAPACITY + 5):
        ring.add(i, 2 * i)
    got = ring.samples()
    assert (
        len(got) == CAPACITY and got[0] == (5, 10) and got[-1] == (CAPACITY + 4, 2 * CAPACITY + 8)
    )
    assert ring._data.buffer_info()[1] * ring._data.itemsize == size == 16 * CAPACITY
    svg = chart(got, 10)
    assert svg.startswith("<svg") and "<polyline" in svg
    assert "Collecting" in chart(got[:1], 10)


def test_basic_credentials_are_parsed_or_refused():
    token = base64.b64encode("alice:pa:ss wörd".encode()).decode()
    assert auth.basic_credentials(f"Basic {token}") == ("alice", "pa:ss wörd")
    for bad in (
        None,
        "",
        "Bearer x",
        "Basic !!!",
        "Basic " + base64.b64encode(b"nocolon").decode(),
    ):
        with pytest.raises(auth.Unauthenticated):
            auth.basic_credentials(bad)


def test_scram_and_plain_checks_use_the_broker_sasl_code():
    cred = make_credential("SCRAM-SHA-256", "secret", iterations=4096)
    assert auth._scram_ok("SCRAM-SHA-256", cred, "carol", "secret", b"k" * 32)
    assert not auth._scram_ok("SCRAM-SHA-256", cred, "carol", "wrong", b"k" * 32)
    assert not auth._scram_ok("SCRAM-SHA-256", None, "carol", "secret", b"k" * 32)
    assert auth._plain_ok({"alice": "pw"}, "alice", "pw")
    assert not auth._plain_ok({"alice": "pw"}, "alice", "nope")


def test_console_settings():
    cfg = build_config({"log.dirs": "/tmp/x"})
    assert cfg.console_enable and cfg.console_lag_sample_interval_ms == 10_000
    cfg = build_config({"log.dirs": "/tmp/x", "console.enable": "false"})
    assert not cfg.console_enable
    with pytest.raises(ConfigError, match="console.lag.sample.interval.ms"):
        build_config({"log.dirs": "/tmp/x", "console.lag.sample.interval.ms": "5"})


def _exchange(port: int, raw: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(raw)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
    return out


def test_prefix_routes_and_read_only_answers():
    async def main() -> list[bytes]:
        server = HttpServer("127.0.0.1", 0)
        seen = []

        async def exact(request):
            return HttpResponse(200, b"exact")

        async def prefixed(request):
            seen.append((request.path, request.peer[0]))
            return HttpResponse(200, b"prefix " + request.path.encode())

        server.route("/topics", exact)
        server.route_prefix("/topics/", prefixed)
        await server.start()
        port = server.bound[1]
        loop = asyncio.get_running_loop()
        try:
            answers = []
            for raw in (
                b"GET /topics HTTP/1.1\r\nConnection: close\r\n\r\n",
                b"GET /topics/a%2Fb?x=1 HTTP/1.1\r\nConnection: close\r\n\r\n",
                b"GET /topicsX HTTP/1.1\r\nConnection: close\r\n\r\n",
                b"POST /topics/a HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc",
                b"DELETE /topics HTTP/1.1\r\nConnection: close\r\n\r\n",
                b"GET /topics HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc",
            ):
                answers.append(await loop.run_in_executor(None, _exchange, port, raw))
            assert seen == [("/topics/a%2Fb", "127.0.0.1")]
            return answers
        finally:
            await server.stop()

    a = asyncio.run(main())
    assert a[0].startswith(b"HTTP/1.1 200") and a[0].endswith(b"exact")
    assert a[1].startswith(b"HTTP/1.1 200") and a[1].endswith(b"prefix /topics/a%2Fb")
    assert a[2].startswith(b"HTTP/1.1 404")
    # a request with a body: answered, then the connection closes (the body is never read)
    assert a[3].startswith(b"HTTP/1.1 405") and b"Allow: GET, HEAD" in a[3]
    assert b"Connection: close" in a[3]
    assert a[4].startswith(b"HTTP/1.1 405")
    assert a[5].startswith(b"HTTP/1.1 413") and b"Connection: close" in a[5]


def test_json_helper_sanity():
    # the browser's JSON view keeps non-ASCII text as it is
    assert records.render_bytes(json.dumps({"é": 1}).encode(), "json")[0] == '{\n  "é": 1\n}'


# -- sorting, filtering, refresh, and the new pages' markup -----------------------------------


def test_tables_sort_by_a_column_either_way_with_unknown_values_last():
    from pybroker.console.listing import Column, arrange, filter_form, headers, order

    cols = (Column("name", "name", lambda r: r[0]), Column("lag", "lag", lambda r: r[1], True))
    rows = [("b", 5), ("a", None), ("c", 7), ("ab", 1)]
    o = order({}, cols, "name")
    assert (o.sort, o.desc, o.q) == ("name", False, "")
    assert [r[0] for r in arrange(rows, cols, o)] == ["a", "ab", "b", "c"]
    o = order({"sort": "lag"}, cols, "name")  # counts: the largest first on the first click
    assert o.desc and [r[0] for r in arrange(rows, cols, o)] == ["c", "b", "ab", "a"]
    o = order({"sort": "lag", "dir": "asc", "q": " A "}, cols, "name")
    assert [r[0] for r in arrange(rows, cols, o, lambda r: r[0])] == ["ab", "a"]
    assert order({"sort": "<x>", "dir": "sideways"}, cols, "name") == order({}, cols, "name")
    # the sorted column's link turns it the other way round; the others start their own way
    o = order({"sort": "lag", "dir": "desc", "q": "a"}, cols, "name")
    name, lag = headers(cols, o, {"sort": "lag", "dir": "desc", "q": "a", "page": "3"})
    assert name == '<a href="?sort=name&amp;dir=asc&amp;q=a" class="sort">name</a>'
    assert lag == '<a href="?sort=lag&amp;dir=asc&amp;q=a" class="sort desc">lag</a>'
    form = filter_form({"q": HOSTILE, "sort": HOSTILE}, order({"q": HOSTILE}, cols, "name"),
                       "x", 1, 2, "t")  # fmt: skip
    assert "<script>" not in form and 'name="sort" value="&lt;script&gt;' in form
    assert '<span class="count" id="t-count">1 of 2</span>' in form


def test_refresh_adds_a_meta_tag_and_keeps_the_page_parameters():
    params = {"q": HOSTILE, "sort": "lag"}
    doc = html.page("T", "", section="groups", broker_id=0, cluster_id="c", principal=None,
                    render_ms="1", params=params, refresh=10)  # fmt: skip
    assert '<meta http-equiv="refresh" content="10">' in doc
    assert "auto-refresh (every 10 s)" in doc and '<b class="current">10 s</b>' in doc
    assert 'href="?q=%3Cscript%3E' in doc and "refresh=30" in doc and "<script>" not in doc
    doc = html.page("T", "", section="groups", broker_id=0, cluster_id="c", principal=None,
                    render_ms="1", params={}, refresh=0)  # fmt: skip
    assert "http-equiv" not in doc and 'href="?refresh=5"' in doc
    assert html.here({"a": "1", "b": "x y"}, a=None, c=2) == "?b=x+y&c=2"


def test_sensitive_config_values_are_never_shown(monkeypatch):
    from pybroker.console import configs
    from pybroker.console.views.brokers import render_configs

    async def fake(ctx, req):
        entry = {"read_only": False, "config_source": 2, "is_default": False, "synonyms": []}
        return {
            "results": [
                {
                    "error_code": 0,
                    "error_message": None,
                    "configs": [
                        {
                            **entry,
                            "name": "ssl.key.password",
                            "value": "s3cret",
                            "is_sensitive": True,
                        },
                        {**entry, "name": HOSTILE, "value": HOSTILE, "is_sensitive": False},
                    ],
                }
            ]
        }

    monkeypatch.setattr(configs, "describe_configs_handler", fake)
    viewer = auth.Viewer(None, "127.0.0.1")
    got = asyncio.run(configs.describe_configs(None, viewer, configs.BROKER, "0"))
    secret = next(c for c in got.rows if c.name == "ssl.key.password")
    assert secret.value is None and secret.sensitive and secret.source == "DYNAMIC_BROKER_CONFIG"
    page = render_configs(0, got.rows, got.rows, {})
    assert "s3cret" not in page and page.count("(sensitive: hidden)") == 2
    assert "<script>" not in page and "&lt;script&gt;" in page
    page = render_configs(0, got.rows, [], {"q": "<script>"})  # the filter finds it, escaped
    assert "<script>" not in page and 'id="configs-count">1 of 2<' in page


def test_acl_and_group_pages_escape_every_name():
    from pybroker.console.configs import AclRow, Acls
    from pybroker.console.state import GroupDetail, MemberRow, OffsetRow
    from pybroker.console.views import acls, groups

    row = AclRow("TOPIC", HOSTILE, "LITERAL", "User:" + HOSTILE, HOSTILE, "READ", "ALLOW")
    page = acls.render(Acls([row]), {"q": "script", "sort": "principal"})
    assert "<script>" not in page and page.count("&lt;script&gt;") >= 3
    assert "No authorizer" in acls.render(Acls([], ErrorCode.SECURITY_DISABLED), {})
    m = MemberRow(HOSTILE, None, HOSTILE, HOSTILE, [(HOSTILE, [0])])
    detail = GroupDetail(
        HOSTILE, "Stable", "consumer", "classic", "range", [m],
        [OffsetRow(HOSTILE, 0, None, 9, None, m), OffsetRow(HOSTILE, 1, 4, 9, 5, None)],
    )  # fmt: skip
    page = groups.render_group(detail, "", {"q": HOSTILE})
    assert "<script>" not in page and 'id="uncommitted-note"' in page
    assert '<span id="total-lag">5</span>' in page
