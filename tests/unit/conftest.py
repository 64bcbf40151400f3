from pathlib import Path

import pytest

from control.p4info import P4Info

REPO = Path(__file__).resolve().parents[2]
# The P4Info of p4src/main.p4 (tests/e2e/test_build.py checks it matches a fresh
# compile; `make fixtures` refreshes it).
P4INFO = REPO / "tests" / "fixtures" / "main.p4info.txtpb"


@pytest.fixture(scope="session")
def p4info() -> P4Info:
    return P4Info.from_file(P4INFO)
