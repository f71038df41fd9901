"""Crash safety of the archive writer, with real processes: a SIGKILL in the middle of a multi-GiB export
leaves the destination absent or the previous complete file, and the next run leaves no temp file behind."""
import os
import signal
import subprocess
import time

import iree.runtime as rt

from harness import run


def temps(d):
    return sorted(p.name for p in d.iterdir() if p.name.endswith(".tapeout-tmp"))


def kill_mid_write(irpa_fixture, dest, count):
    p = subprocess.Popen([str(irpa_fixture), "index-f32", str(dest), "w", str(count)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 30
    # Wait until the temporary file holds real data, then kill without warning.
    while time.time() < deadline:
        t = temps(dest.parent)
        if t and os.stat(dest.parent / t[0]).st_blocks * 512 > 256 << 20:
            break
        time.sleep(0.02)
    p.send_signal(signal.SIGKILL)
    p.wait()
    return p.returncode


def test_sigkill_mid_write_never_leaves_a_partial_archive(irpa_fixture, tmp_path):
    dest = tmp_path / "model.irpa"
    count = 1 << 30  # 4 GiB of f32

    # No previous file: after the kill, the destination does not exist.
    assert kill_mid_write(irpa_fixture, dest, count) == -signal.SIGKILL
    assert not dest.exists()
    assert len(temps(tmp_path)) == 1, "the killed run's temp file is still there (removed by the next run)"

    # A complete previous archive survives a killed rewrite untouched.
    run(irpa_fixture, "index-f32", dest, "w", 1024)
    before = dest.read_bytes()
    for t in temps(tmp_path):
        (tmp_path / t).unlink()
    assert kill_mid_write(irpa_fixture, dest, count) == -signal.SIGKILL
    assert dest.read_bytes() == before
    idx = rt.ParameterIndex()
    idx.load(str(dest))
    assert dict(idx.items())["w"].length == 4096

    # The next run removes the dead process's temp file and leaves none of its own.
    run(irpa_fixture, "index-f32", dest, "w", 2048)
    assert temps(tmp_path) == []
    assert dest.stat().st_size == 12288  # 8192 data bytes at offset 192, padded to 4096
