"""Election ids: the controller's default and how they are parsed."""
import pytest

from control.switch import CONTROLLER_ELECTION_ID, READER_ELECTION_ID, parse_election_id


def test_the_controller_outranks_tools_left_at_their_defaults():
    assert CONTROLLER_ELECTION_ID > (1, 0), "p4runtime-shell's default"
    assert READER_ELECTION_ID < CONTROLLER_ELECTION_ID


def test_election_ids_parse_or_say_what_is_wrong():
    assert parse_election_id("1000,0") == CONTROLLER_ELECTION_ID
    assert parse_election_id("7") == (7, 0)
    for bad in ("a,b", "1,2,3", "-1,0", f"{2 ** 64},0"):
        with pytest.raises(ValueError, match="election id"):
            parse_election_id(bad)
