"""``sbert_pipeline.io.filesystems.FileSystems`` answers as Beam's ``FileSystems`` does, locally
without importing Beam, and hands every other path (and every error) to Beam."""

import gzip
import subprocess
import sys
from pathlib import Path

import pytest
from apache_beam.io.filesystem import BeamIOError
from apache_beam.io.filesystems import FileSystems as BeamFileSystems
from sbert_pipeline.io.filesystems import CompressionTypes, FileSystems

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def tree(tmp_path) -> Path:
    for name in ("part-00000.parquet", "part-00001.parquet", "x.json", "a/part-00002.parquet"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(name.encode())
    (tmp_path / "a" / "b").mkdir()
    (tmp_path / "a" / "b" / ".hidden.tmp").write_bytes(b"")
    return tmp_path


@pytest.mark.parametrize(
    "pattern",
    ["part-*.parquet", "**", "*", "a/**", "a/*", "**.parquet", "x.json", "a", "missing", "no/*"],
)
def test_match_finds_what_beam_finds(tree, pattern):
    ours = FileSystems.match([str(tree / pattern)])[0]
    beams = BeamFileSystems.match([str(tree / pattern)])[0]
    assert ours.pattern == beams.pattern
    found = sorted((m.path, m.size_in_bytes) for m in ours.metadata_list)
    assert found == sorted((m.path, m.size_in_bytes) for m in beams.metadata_list)


def test_a_directory_pattern_matches_the_files_under_it(tree):
    found = {m.path for m in FileSystems.match([f"{tree}/"])[0].metadata_list}
    assert found == {m.path for m in BeamFileSystems.match([f"{tree}/"])[0].metadata_list}
    assert str(tree / "x.json") in found


def test_join_exists_create_open_rename_delete(tmp_path):
    path = FileSystems.join(str(tmp_path), "new", "deep", "f.bin")
    assert path == BeamFileSystems.join(str(tmp_path), "new", "deep", "f.bin")
    assert not FileSystems.exists(path)
    with FileSystems.create(path) as handle:  # the folders are made
        handle.write(b"payload")
    assert FileSystems.exists(path) and FileSystems.exists(str(tmp_path / "new"))
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as handle:
        assert handle.read() == b"payload"
    moved = str(tmp_path / "new" / "g.bin")
    FileSystems.rename([path], [moved])
    assert not FileSystems.exists(path) and Path(moved).read_bytes() == b"payload"
    FileSystems.delete([str(tmp_path / "new")])  # a folder with everything in it
    assert not (tmp_path / "new").exists()


def test_compressed_files_are_read_and_written_by_beam(tmp_path):
    path = str(tmp_path / "t.txt.gz")
    with FileSystems.create(path) as handle:
        handle.write(b"line\n")
    assert gzip.decompress(Path(path).read_bytes()) == b"line\n"
    with FileSystems.open(path) as handle:
        assert handle.read() == b"line\n"


def test_errors_are_beams(tmp_path):
    with pytest.raises(BeamIOError):
        FileSystems.delete([str(tmp_path / "missing")])
    with pytest.raises(BeamIOError):
        FileSystems.rename([str(tmp_path / "missing")], [str(tmp_path / "other")])
    with pytest.raises(OSError):
        FileSystems.mkdirs(str(tmp_path))  # exists already
    with pytest.raises(OSError):
        FileSystems.open(str(tmp_path / "missing"))


def test_other_schemes_go_to_beam():
    with pytest.raises(ValueError, match="Unable to get filesystem"):
        FileSystems.exists("nosuchscheme://bucket/x")


def test_local_paths_load_no_beam(tmp_path):
    code = (
        "import sys\n"
        "from sbert_pipeline.io.filesystems import FileSystems as F\n"
        f"root = {str(tmp_path)!r}\n"
        "with F.create(F.join(root, 'd', 'f.txt')) as h:\n"
        "    h.write(b'x')\n"
        "assert [m.path for m in F.match([root + '/**'])[0].metadata_list]\n"
        "F.rename([root + '/d/f.txt'], [root + '/d/g.txt'])\n"
        "assert F.open(root + '/d/g.txt').read() == b'x'\n"
        "F.delete([root + '/d'])\n"
        "F.mkdirs(root + '/e')\n"
        "print('apache_beam' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
