"""Helpers shared by the Python tests: running binaries and IREE's tools."""
import os
import pathlib
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[1]
VENV_BIN = pathlib.Path(os.environ.get("TAPEOUT_VENV", ROOT / ".venv")) / "bin"


def iree_tool(name: str) -> str:
    return str(VENV_BIN / name)


def run(*args, check=True, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, check=check, **kw)
