"""``/brokers/<id>``: the broker's configs as DescribeConfigs answers them (value, source,
read-only; sensitive values masked), and the cluster-wide dynamic defaults."""

from __future__ import annotations

from collections.abc import Mapping

from pybroker.console.configs import ConfigRow
from pybroker.console.html import esc, table
from pybroker.console.listing import Column, arrange, filter_form, headers, order

COLUMNS = (
    Column("config", "config", lambda c: c.name),
    Column("value", "value"),
    Column("source", "source", lambda c: (c.source, c.name)),
    Column("mode", "dynamic update"),
)


def _value(c: ConfigRow) -> str:
    if c.sensitive:
        return '<i class="note">(sensitive: hidden)</i>'
    return esc(c.value) if c.value is not None else "&ndash;"


def _rows(configs: list[ConfigRow]) -> list[list[str]]:
    return [
        [
            esc(c.name) if c.is_default else f'<b class="set">{esc(c.name)}</b>',
            _value(c),
            esc(c.source),
            "read-only" if c.read_only else "dynamic",
        ]
        for c in configs
    ]


def render_configs(
    broker_id: int,
    own: list[ConfigRow],
    defaults: list[ConfigRow],
    params: Mapping[str, str],
) -> str:
    o = order(params, COLUMNS, "config")
    got = arrange(own, COLUMNS, o, lambda c: f"{c.name} {c.source}")
    grid = table(
        headers(COLUMNS, o, params),
        _rows(got),
        cls="grid compact",
        tid="broker-configs",
        safe_headers=True,
    )
    cluster = (
        table(
            ["config", "value", "source", "dynamic update"],
            _rows(defaults),
            cls="grid compact",
            tid="default-configs",
        )
        if defaults
        else '<p id="default-configs-none">None stored.</p>'
    )
    return (
        f'<p class="note">Broker {esc(broker_id)}\'s configs as DescribeConfigs answers them '
        "(kafka-configs --describe --entity-type brokers --entity-name "
        f"{esc(broker_id)} --all); names in bold are set (not Kafka's default). Each "
        "broker's console shows that broker's configs.</p>"
        + filter_form(params, o, "by name or source", len(got), len(own), "configs")
        + grid
        + "<h2>Cluster-wide dynamic defaults</h2>"
        + '<p class="note">Stored for every broker (kafka-configs --entity-default); a '
        "broker's own dynamic value wins.</p>" + cluster
    )
