"""The P4Info interface the fixture check compares (control/p4info.py
`interface`): equal across what compilers differ in, different where the
program changed."""
from pathlib import Path

from google.protobuf import text_format
from p4.config.v1 import p4info_pb2

from control.p4info import interface, interface_changes

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "main.p4info.txtpb"


def fixture() -> p4info_pb2.P4Info:
    return text_format.Parse(FIXTURE.read_text(), p4info_pb2.P4Info())


def table(info: p4info_pb2.P4Info, suffix: str) -> p4info_pb2.Table:
    return next(t for t in info.tables if t.preamble.name.endswith(suffix))


def test_what_a_newer_p4c_adds_is_not_a_change():
    """p4c 1.2.5.x writes P4Runtime 1.4's initial_default_action; annotations,
    documentation and the order of objects are no part of the interface either."""
    newer = fixture()
    for t in newer.tables:
        if t.const_default_action_id:
            t.initial_default_action.action_id = t.const_default_action_id
    newer.tables[0].preamble.annotations.append("@name(\"x\")")
    newer.actions[0].preamble.doc.brief = "an action"
    newer.tables.reverse()
    assert interface_changes(interface(fixture()), interface(newer)) == []


def test_a_changed_program_is_named_by_kind_and_object():
    changed = fixture()
    table(changed, "lb_group").match_fields[0].bitwidth = 32
    removed = changed.registers.pop()
    changed.actions[0].params.add(id=9, name="extra", bitwidth=8)
    added = changed.counters.add()
    added.CopyFrom(changed.counters[0])
    added.preamble.name, added.preamble.id = "FabricIngress.new_counter", 318000000
    lines = interface_changes(interface(fixture()), interface(changed))
    assert lines == [
        "tables: FabricIngress.forwarding.load_balancing.lb_group changed (match_fields)",
        f"actions: {changed.actions[0].preamble.name} changed (params)",
        "counters: FabricIngress.new_counter added",
        f"registers: {removed.preamble.name} removed",
    ]


def test_ids_and_table_actions_are_part_of_the_interface():
    renumbered, narrowed = fixture(), fixture()
    table(renumbered, "lb_group").preamble.id += 1
    del table(narrowed, "lb_group").action_refs[0]
    assert interface_changes(interface(fixture()), interface(renumbered)) == [
        "tables: FabricIngress.forwarding.load_balancing.lb_group changed (id)"]
    assert interface_changes(interface(fixture()), interface(narrowed)) == [
        "tables: FabricIngress.forwarding.load_balancing.lb_group changed (actions)"]
