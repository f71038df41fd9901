"""Shared fixtures for the IREE end-to-end tests.

The binaries under test are built by scripts/test (release profile) and found through
TAPEOUT_BIN / TAPEOUT_FIXTURE_BIN, falling back to target/release.
"""
import os
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _binary(env: str, default: pathlib.Path) -> pathlib.Path:
    path = pathlib.Path(os.environ.get(env, default))
    if not path.exists():
        pytest.fail(f"{path} is missing: run scripts/test (it builds the release binaries first)")
    return path


@pytest.fixture(scope="session")
def tapeout() -> pathlib.Path:
    return _binary("TAPEOUT_BIN", ROOT / "target/release/tapeout")


@pytest.fixture(scope="session")
def irpa_fixture() -> pathlib.Path:
    return _binary("TAPEOUT_FIXTURE_BIN", ROOT / "target/release/examples/irpa_fixture")


@pytest.fixture(scope="session")
def ggml_dequant() -> pathlib.Path:
    return _binary("TAPEOUT_GGML_BIN", ROOT / "target/release/examples/ggml_dequant")
