"""The bus declared once (protocol/bus.py): no topic written anywhere else, docs in step."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from voxweft.actors import actor_class
from voxweft.deploy.topology import load
from voxweft.protocol import bus
from voxweft.protocol.messages import REGISTRY, Status, Transcript, Voice

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("actors", "protocol", "deploy", "tools")
#: A topic written as a bytes literal: `b"transcript."`, `b'status.capture'`.
LITERAL = re.compile(rf"""\bb["']({"|".join(sorted(REGISTRY))})\.[a-z_-]*["']""")


def test_every_message_type_has_one_route_and_every_route_a_registered_type():
    assert sorted(r.type for r in bus.ROUTES) == sorted(REGISTRY)
    assert len({r.message for r in bus.ROUTES}) == len(bus.ROUTES)
    for r in bus.ROUTES:
        assert r.senders and set(r.senders) <= {*bus.ACTORS, bus.ANY, bus.SUPERVISOR}, r
        assert set(r.takers) <= {*bus.ACTORS, bus.ANY}, r
        assert set(r.watchers) <= set(bus.TOOLS), r
        assert r.socket in (bus.PUB, bus.PUSH, bus.EVENTS) and r.why, r


def test_no_topic_is_written_anywhere_but_the_declaration():
    found = []
    for folder in PRODUCT:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path == ROOT / "protocol" / "bus.py":
                continue
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if LITERAL.search(line):
                    found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not found, "topics written outside protocol/bus.py:\n" + "\n".join(found)


def test_the_literal_check_sees_a_topic():
    """The pattern above would catch what it is there to catch."""
    assert LITERAL.search('subs = [("mt", b"translation.")]')
    assert LITERAL.search("listen([...], [b'status.capture'])")
    assert not LITERAL.search('open(out / "transcript.jsonl")')


@pytest.mark.parametrize("name", ["default", "mac", "two-hosts", "two-macs"])
def test_every_actor_subscribes_only_to_what_the_bus_declares(name):
    topo = load(ROOT / "deploy" / f"{name}.toml")
    for actor in topo.actors:
        for sender, kind in actor_class(actor)(topo, topo.actors[actor]).subscriptions():
            bus.check(actor, sender, kind)


def test_a_subscription_the_bus_does_not_declare_is_refused():
    bus.check("mt", "asr", Transcript)
    bus.check("player", "tts", Status)
    with pytest.raises(ValueError, match="protocol/bus.py"):
        bus.check("mt", "segmenter", Voice)
    with pytest.raises(ValueError):
        bus.check("mt", "supervisor", Status)


def test_who_pushes_who_pulls_and_what_each_tool_watches():
    assert [m.TYPE for m in bus.pushes("segmenter")] == ["segment"]
    assert bus.pulls("asr") and not bus.pulls("mt")
    assert b"supervision." in bus.watched("interpret", bus.EVENTS)
    assert b"supervision." not in bus.watched("interpret")
    assert bus.topic(Status, "capture") == b"status.capture"


def test_docs_protocol_holds_the_table_of_the_bus():
    doc = (ROOT / "docs" / "protocol.md").read_text(encoding="utf-8")
    assert bus.table() in doc, "docs/protocol.md: paste protocol.bus.table() in its place"


def test_the_readme_diagram_names_every_route():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    diagram = readme.split("```")[1]
    for r in bus.ROUTES:
        assert f"`{r.type}`" in diagram or re.search(rf"\b{r.type}\b", diagram), r.type
        if r.socket == bus.PUSH:
            assert f"{r.type} ({r.socket})" in diagram, r.type
