"""End-to-end tests run on the real toolchain. Without it they fail loudly,
never skip (`make test` also checks first and says how to get it)."""
import os

import pytest

from control.toolchain import HOW_TO_GET, missing_tools


@pytest.fixture(autouse=True)
def _require_toolchain_and_root():
    missing = missing_tools()
    if missing:
        pytest.fail(f"end-to-end tests need p4c and BMv2; missing {', '.join(missing)}.\n{HOW_TO_GET}", pytrace=False)
    if os.geteuid() != 0:
        pytest.fail("end-to-end tests need root (network namespaces, veths, tc)", pytrace=False)
