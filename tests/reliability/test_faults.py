"""Write faults, for real (docs/reliability.md): a full file system and a file-size limit while `pack`, `convert`
and `export` write. Each must fail with exit code 1 and one sentence naming the file and the OS's reason, leave
nothing under the final name and no temporary file, and keep a previous archive byte for byte.

The full disk is a small tmpfs mounted for the test (root only; skipped elsewhere). The size limit is
RLIMIT_FSIZE on the real binary, with SIGXFSZ ignored so that the write returns EFBIG instead of killing it.
"""
import json
import os
import resource
import signal
import struct
import subprocess
import uuid

import numpy as np
import pytest

LIMIT = 1 << 20  # both faults strike after about 1 MiB
WEIGHT_BYTES = 4 << 20  # every command below writes more than that


@pytest.fixture
def tiny_fs(tmp_path):
    """A 1 MiB tmpfs, or a skip where this process may not mount one."""
    mnt = tmp_path / f"full-{uuid.uuid4().hex[:8]}"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={LIMIT}", "tmpfs", str(mnt)], capture_output=True,
                       text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({r.stderr.strip()}); the RLIMIT_FSIZE variant still runs")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def fsize_limited():
    resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT, LIMIT))
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # an ignored signal stays ignored across exec


def write_inputs(d):
    """Inputs for each command, all larger than LIMIT: a raw weight file, a safetensors file, a graph."""
    w = np.arange(WEIGHT_BYTES // 4, dtype=np.float32)
    (d / "w.bin").write_bytes(w.tobytes())
    header = json.dumps({"w": {"dtype": "F32", "shape": [len(w)], "data_offsets": [0, w.nbytes]}}).encode()
    header += b" " * ((-len(header)) % 8)
    (d / "w.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + w.tobytes())
    graph = {"name": "big", "tensors": [
        {"name": "x", "shape": [len(w)], "dtype": "f32"},
        {"name": "w", "shape": [len(w)], "dtype": "f32", "path": "model.w", "data": {"tensor": "w"}},
        {"name": "y", "shape": [len(w)], "dtype": "f32"}],
        "nodes": [{"op": "add", "inputs": ["x", "w"], "outputs": ["y"]}], "outputs": ["y"]}
    (d / "g.json").write_text(json.dumps(graph))


COMMANDS = {
    "pack": lambda i, o: ["pack", "-o", o / "out.irpa", f"model.w={i / 'w.bin'}"],
    "convert": lambda i, o: ["convert", i / "w.safetensors", "-o", o / "out.irpa"],
    # inline: the module itself outgrows the limit; external: the archive does.
    "export (module)": lambda i, o: ["export", i / "g.json", "--weights", i / "w.safetensors", "-o", o,
                                     "--name", "out", "--inline-all"],
    "export (archive)": lambda i, o: ["export", i / "g.json", "--weights", i / "w.safetensors", "-o", o,
                                      "--name", "out"],
}


def previous_archive(tapeout, d):
    """A small valid archive at the final name, standing for an earlier run's output."""
    (d / "old.bin").write_bytes(b"\x07" * 64)
    subprocess.run([str(tapeout), "pack", "-o", str(d / "out.irpa"), f"old={d / 'old.bin'}"], check=True,
                   capture_output=True)
    (d / "old.bin").unlink()
    return (d / "out.irpa").read_bytes()


def check_failed_cleanly(r, out_dir, before, reason):
    assert r.returncode == 1, (r.returncode, r.stdout, r.stderr)
    msg = r.stderr.strip()
    assert msg.startswith("tapeout: error: ") and "\n" not in msg, msg
    assert reason in msg, msg
    assert str(out_dir) in msg, f"the message names the file: {msg}"
    assert "tapeout-tmp" not in msg, f"the message names the destination, not the temporary: {msg}"
    left = sorted(p.name for p in out_dir.iterdir())
    assert not [n for n in left if "tapeout-tmp" in n], left
    assert not (out_dir / "out.mlir").exists(), left
    assert (out_dir / "out.irpa").read_bytes() == before, "the previous archive is intact"


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_full_disk_fails_cleanly(command, tapeout, tmp_path, tiny_fs):
    inputs = tmp_path / "in"
    inputs.mkdir()
    write_inputs(inputs)
    before = previous_archive(tapeout, tiny_fs)
    args = [str(a) for a in COMMANDS[command](inputs, tiny_fs)]
    r = subprocess.run([str(tapeout), *args], capture_output=True, text=True, timeout=60)
    check_failed_cleanly(r, tiny_fs, before, "No space left on device")


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_file_size_limit_fails_cleanly(command, tapeout, tmp_path):
    inputs, out = tmp_path / "in", tmp_path / "out"
    inputs.mkdir()
    out.mkdir()
    write_inputs(inputs)
    before = previous_archive(tapeout, out)
    args = [str(a) for a in COMMANDS[command](inputs, out)]
    r = subprocess.run([str(tapeout), *args], capture_output=True, text=True, timeout=60, preexec_fn=fsize_limited)
    check_failed_cleanly(r, out, before, "File too large")
