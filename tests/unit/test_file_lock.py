"""Kafka's FileLock (storage/file_lock.py): one holder of a directory's `.lock`, in this process or another."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from storage.file_lock import DirLockError, lock_dir, lock_failed_message

REPO = Path(__file__).resolve().parents[2]
HOLD = "import sys\nfrom pathlib import Path\nfrom storage.file_lock import lock_dir\nlock_dir(Path(sys.argv[1]))\nprint('locked', flush=True)\nsys.stdin.read()"


def test_a_held_directory_is_refused_in_this_process_and_its_lock_survives_the_refusal(tmp_path: Path) -> None:
    lock = lock_dir(tmp_path)
    with pytest.raises(DirLockError) as refused:
        lock_dir(tmp_path)
    assert str(refused.value) == lock_failed_message(tmp_path)
    # The refusal closed no descriptor of the file: another process still finds it held.
    probe = subprocess.run([sys.executable, "-c", HOLD, str(tmp_path)], cwd=REPO, input="", capture_output=True, text=True, timeout=30)
    assert probe.returncode != 0 and lock_failed_message(tmp_path) in probe.stderr
    lock.destroy()
    assert not (tmp_path / ".lock").exists()  # Kafka's destroy on a clean shutdown


def test_another_process_holding_the_lock_refuses_this_one_until_it_is_gone(tmp_path: Path) -> None:
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path)], cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
        with pytest.raises(DirLockError):
            lock_dir(tmp_path)
    finally:
        holder.kill()
        holder.wait(10)
    # Its death released it; the file stays, as after Kafka's crash, and is taken again.
    assert (tmp_path / ".lock").exists()
    lock = lock_dir(tmp_path)
    lock.unlock_and_close()
    assert (tmp_path / ".lock").exists()
    lock_dir(tmp_path).destroy()
