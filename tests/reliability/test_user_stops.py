"""Item 9 of issue 25: one line, no traceback, for the failures a user causes.

Ctrl-C (exit 130), SIGTERM (exit 143), a full disk in the middle of a stage and an output on a
read-only file system (exit 1) each end ``sbert`` with one line on stderr: what happened, that
the previous output is unchanged, and the exit status. Each test checks that promise: the
previous output is readable with the same rows and every other file is byte-identical. The
real full disk (a small tmpfs) and the real read-only mount need root; a monkeypatched variant
of each always runs.
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import io
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import apache_beam as beam
import pytest
import sbert_pipeline.io.output_dir as output_dir
from apache_beam.io.localfilesystem import LocalFileSystem
from output_folders_helpers import embed_argv, snapshot, start_cli, texts, write_txt
from sbert_pipeline.io.embeddings import EmbeddingsDataset
from sbert_pipeline.jobs.cli import main as sbert
from sbert_pipeline.jobs.cli import stops_raise
from sbert_pipeline.jobs.user_stops import user_stop
from sbert_pipeline.stage_api.beam_run import run_pipeline
from sbert_pipeline.stage_api.stops import Terminated

UNCHANGED = "the running stage published nothing and its previous output is unchanged"


@pytest.fixture(scope="module")
def first(tmp_path_factory, tiny_st_dir):
    """A complete embed output of 60 texts: (folder, its ids)."""
    root = tmp_path_factory.mktemp("first")
    out = root / "out"
    corpus = write_txt(root / "in", texts(60))
    assert sbert(["-q", "embed", *embed_argv(corpus, out, tiny_st_dir)]) == 0
    return out, sorted(EmbeddingsDataset.open(str(out)).load()[0])


@pytest.fixture
def job(first, tmp_path):
    """A folder holding a copy of the complete output (``out``) and a user's file beside it:
    (folder, output folder). The tests write their input corpus into it too."""
    out = tmp_path / "out"
    shutil.copytree(first[0], out)
    (tmp_path / "notes.txt").write_text("the user's own file\n")
    return tmp_path, out


def _published(folder: Path) -> dict[str, str]:
    """Every file below ``folder`` but a stopped run's scratch (its attempt area and marker),
    which the next run clears."""
    return {
        name: digest
        for name, digest in snapshot(folder).items()
        if not name.startswith(("out/_attempts/", "out/_STARTED"))
    }


def _assert_unchanged(first, folder: Path, before: dict[str, str]) -> None:
    assert _published(folder) == before
    assert sorted(EmbeddingsDataset.open(str(folder / "out")).load()[0]) == first[1]


def _one_line(text: str, status: int) -> str:
    lines = text.splitlines()
    assert len(lines) == 1, text
    assert "Traceback" not in text
    assert lines[0].startswith("sbert: ") and lines[0].endswith(f"(exit status {status})")
    assert UNCHANGED in lines[0]
    return lines[0]


# ---------------------------------------------------------------------------- Ctrl-C, SIGTERM


@pytest.mark.parametrize(
    ("stop", "status", "words"),
    [(signal.SIGINT, 130, "interrupted by Ctrl-C (SIGINT)"), (signal.SIGTERM, 143, "SIGTERM")],
)
def test_a_signal_stops_the_run_in_one_line(first, job, tiny_st_dir, stop, status, words):
    folder, out = job
    corpus = write_txt(folder / "in", texts(40_000, offset=100))
    before = _published(folder)
    log = folder.parent / f"{folder.name}.log"  # outside the folder compared
    argv = ["-q", "embed", *embed_argv(corpus, out, tiny_st_dir, "--overwrite")]
    process = start_cli(argv, log)
    deadline = time.monotonic() + 180
    # The stage is running once it has recorded the files it read.
    while not list(out.glob("_attempts/*/_reads/*.json")) and time.monotonic() < deadline:
        assert process.poll() is None, log.read_text()
        time.sleep(0.05)
    time.sleep(0.5)
    assert process.poll() is None, "the run finished before it could be stopped; use more texts"
    os.killpg(process.pid, stop)  # as a terminal's Ctrl-C reaches the whole process group
    assert process.wait(timeout=120) == status, log.read_text()
    assert words in _one_line(log.read_text(), status)
    _assert_unchanged(first, folder, before)


@pytest.fixture
def default_stop_handlers():
    """Python's own SIGINT and SIGTERM handlers for the test, whatever the test process
    inherited: a job started in the background by a non-interactive shell (``cmd &``) starts
    with SIGINT ignored, and ``stops_raise`` leaves an ignored signal ignored, by design."""
    before = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    yield
    for signum, handler in before.items():
        signal.signal(signum, handler)


@pytest.mark.usefixtures("default_stop_handlers")
def test_a_stop_python_drops_is_sent_again_and_the_handlers_are_put_back():
    class StopInDel:
        def __del__(self):
            # The handler's exception raised here cannot propagate (Python drops it); the
            # relay sends the signal again, to land in the loop below.
            signal.raise_signal(signal.SIGTERM)

    before = (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM))
    with pytest.raises(Terminated), stops_raise():
        StopInDel()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            time.sleep(0.01)
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before


@pytest.mark.parametrize(
    ("signum", "kind"), [(signal.SIGINT, KeyboardInterrupt), (signal.SIGTERM, Terminated)]
)
@pytest.mark.usefixtures("default_stop_handlers")
def test_a_stop_library_code_swallows_is_raised_before_the_next_pipeline(signum, kind):
    pipeline = beam.Pipeline()
    _ = pipeline | beam.Create([1])
    with stops_raise():
        # Swallowed, as a bare ``except:`` around an optional import does.
        with contextlib.suppress(BaseException):
            signal.raise_signal(signum)
        with pytest.raises(kind):
            run_pipeline(pipeline, pipeline.options)
    run_pipeline(pipeline, pipeline.options)  # the command is over: nothing is pending


# ------------------------------------------------------------------------------ a full disk


@contextlib.contextmanager
def _mounted(*commands: list[str]):
    """Run mount commands on one mount point (the first command's last argument), unmounted
    after; skip the test where mounting is not allowed (not root, a container without it)."""
    try:
        for command in commands:
            done = subprocess.run(command, capture_output=True, text=True)
            if done.returncode != 0:
                why = (done.stderr.strip().splitlines() or ["refused"])[0]
                pytest.skip(f"cannot mount here ({' '.join(command)}: {why})")
        yield
    finally:
        # Not checked: where the first mount was refused there is nothing to unmount.
        subprocess.run(["umount", "-l", commands[0][-1]], capture_output=True)


def _disk_full_on_write(monkeypatch, out: Path) -> None:
    """Every file the stage creates in its attempt area fails at its first write with ENOSPC."""
    create = LocalFileSystem.create

    class FullDisk(io.RawIOBase):
        def writable(self) -> bool:
            return True

        def write(self, data) -> int:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def full_create(self, path, *args, **kwargs):
        if str(path).startswith(str(out / "_attempts")):
            return FullDisk()
        return create(self, path, *args, **kwargs)

    monkeypatch.setattr(LocalFileSystem, "create", full_create)


def test_a_full_disk_in_the_middle_of_a_stage_is_one_line(
    first, job, tiny_st_dir, monkeypatch, capsys
):
    folder, out = job
    corpus = write_txt(folder / "in", texts(200, offset=100))
    before = _published(folder)
    _disk_full_on_write(monkeypatch, out)
    status = sbert(["-q", "embed", *embed_argv(corpus, out, tiny_st_dir, "--overwrite")])
    monkeypatch.undo()
    assert status == 1
    assert "no space left on device" in _one_line(capsys.readouterr().err, 1)
    _assert_unchanged(first, folder, before)
    # The stopped run let go of the folder: the next run takes it, clears the remains, publishes.
    small = write_txt(folder / "small", texts(25))
    assert sbert(["-q", "embed", *embed_argv(small, out, tiny_st_dir, "--overwrite")]) == 0
    assert EmbeddingsDataset.open(str(out)).count == 25
    assert not (out / "_attempts").exists()


def test_a_full_disk_at_the_manifest_write_is_one_line(
    first, job, tiny_st_dir, monkeypatch, capsys
):
    """The commit step's error, unwrapped by the embed launcher from Beam's: still one line."""
    folder, out = job
    corpus = write_txt(folder / "in", texts(30, offset=100))
    before = _published(folder)

    def disk_full(directory, manifest):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(output_dir, "write_manifest", disk_full)
    status = sbert(["-q", "embed", *embed_argv(corpus, out, tiny_st_dir, "--overwrite")])
    monkeypatch.undo()
    assert status == 1
    assert "no space left on device" in _one_line(capsys.readouterr().err, 1)
    _assert_unchanged(first, folder, before)


def test_a_real_full_disk_is_one_line(first, tmp_path, tiny_st_dir, capsys):
    disk = tmp_path / "disk"
    disk.mkdir()
    with _mounted(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(disk)]):
        out = disk / "out"
        shutil.copytree(first[0], out)
        (disk / "notes.txt").write_text("the user's own file\n")
        corpus = write_txt(tmp_path / "in", texts(5000, offset=100))  # about 1 MB of vectors
        before = _published(disk)
        status = sbert(["-q", "embed", *embed_argv(corpus, out, tiny_st_dir, "--overwrite")])
        assert status == 1
        assert "no space left on device" in _one_line(capsys.readouterr().err, 1)
        _assert_unchanged(first, disk, before)


# ---------------------------------------------------------------------- a read-only output


def _read_only(monkeypatch, root: Path) -> None:
    """Fail every write below ``root`` as a read-only mount does (root ignores mode bits)."""

    def guarded(real, writes=lambda *args, **kwargs: True):
        def call(path, *args, **kwargs):
            if writes(*args, **kwargs) and str(path).startswith(str(root)):
                raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
            return real(path, *args, **kwargs)

        return call

    def os_open_writes(flags: int, *args, **kwargs) -> bool:
        return bool(flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT))

    def open_writes(mode: str = "r", *args, **kwargs) -> bool:
        return any(letter in mode for letter in "wax+")

    for name in ("mkdir", "rename", "replace", "remove", "unlink", "rmdir"):
        monkeypatch.setattr(os, name, guarded(getattr(os, name)))
    monkeypatch.setattr(os, "open", guarded(os.open, os_open_writes))
    for module in (builtins, io):
        monkeypatch.setattr(module, "open", guarded(io.open, open_writes))


@pytest.mark.parametrize("where", ["out", "new"])
def test_an_output_on_a_read_only_file_system_is_one_line(
    first, job, tiny_st_dir, monkeypatch, capsys, where
):
    folder, _ = job
    corpus = write_txt(folder / "in", texts(30, offset=100))
    before = snapshot(folder)
    _read_only(monkeypatch, folder)
    previous = signal.getsignal(signal.SIGTERM)
    status = sbert(["-q", "embed", *embed_argv(corpus, folder / where, tiny_st_dir, "--overwrite")])
    monkeypatch.undo()
    assert signal.getsignal(signal.SIGTERM) is previous  # the CLI put its handler back
    assert status == 1
    line = _one_line(capsys.readouterr().err, 1)
    assert f"read-only file system ({folder / where}" in line
    assert snapshot(folder) == before
    assert sorted(EmbeddingsDataset.open(str(folder / "out")).load()[0]) == first[1]


def test_a_real_read_only_mount_is_one_line(first, job, tmp_path_factory, tiny_st_dir, capsys):
    folder, _ = job
    view = tmp_path_factory.mktemp("read_only_view")
    corpus = write_txt(tmp_path_factory.mktemp("in"), texts(30, offset=100))
    before = snapshot(folder)
    bind = ["mount", "--bind", str(folder), str(view)]
    with _mounted(bind, ["mount", "-o", "remount,bind,ro", str(view)]):
        for where in ("out", "new"):
            argv = embed_argv(corpus, view / where, tiny_st_dir, "--overwrite")
            assert sbert(["-q", "embed", *argv]) == 1
            line = _one_line(capsys.readouterr().err, 1)
            assert f"read-only file system ({view / where}" in line
        assert sorted(EmbeddingsDataset.open(str(view / "out")).load()[0]) == first[1]
    assert snapshot(folder) == before


# ------------------------------------------------------------------ Beam's wrapped messages


@pytest.mark.parametrize(
    ("err", "expected"),
    [
        (RuntimeError("KeyboardInterrupt [while running 'Embed/Map']"), 130),
        (RuntimeError("OSError: [Errno 28] No space left on device [while running 'W']"), 1),
        (OSError("[Errno 30] Read-only file system: '/data/out/_STARTED'"), 1),
        (RuntimeError("ValueError: 28 [while running 'Embed/Map']"), None),
        (OSError(errno.EACCES, "Permission denied"), None),
    ],
)
def test_beams_wrapped_messages_are_recognised(err, expected):
    stop = user_stop(err)
    assert (stop and stop.status) == expected
