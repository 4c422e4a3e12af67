"""A process's files that no commit took (lost attempts) are found by name and removed."""

from __future__ import annotations

from pathlib import Path

from pyiceberg.io.fsspec import FsspecFileIO
from pyiceberg.io.pyarrow import PyArrowFileIO

from floe.optimizing.leftovers import remove_uncommitted_outputs

PROCESS = "db.t-20260101T000000-abcdef"


def _touch(path: Path) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x")
    return str(path)


def test_only_the_process_files_the_commit_did_not_take_are_removed(tmp_path: Path) -> None:
    part = tmp_path / "data" / "day=1"
    committed = _touch(part / f"{PROCESS}-t0000-11111111-00000.parquet")
    lost_attempt = _touch(part / f"{PROCESS}-t0000-11111111-00001.parquet")
    failed_task = _touch(tmp_path / "data" / "day=2" / f"{PROCESS}-t0001-22222222-00000.parquet")
    writer_file = _touch(part / "00000-0-writer.parquet")
    other_process = _touch(part / "db.t-20260101T000000-999999-t0000-33333333-00000.parquet")
    nested = _touch(part / "deeper" / f"{PROCESS}-t0000-44444444-00000.parquet")

    removed = remove_uncommitted_outputs(
        PyArrowFileIO(),
        PROCESS,
        {str(part), f"file://{tmp_path}/data/day=2", str(tmp_path / "data" / "day=3")},
        committed=[f"file://{committed}"],
    )

    assert sorted(removed) == sorted([lost_attempt, failed_task])
    for kept in (committed, writer_file, other_process, nested):
        assert Path(kept).exists(), kept
    assert not Path(lost_attempt).exists() and not Path(failed_task).exists()


def test_without_a_listing_file_io_the_reported_files_not_committed_are_removed(tmp_path: Path) -> None:
    kept = _touch(tmp_path / f"{PROCESS}-t0000-a-00000.parquet")
    reported = _touch(tmp_path / f"{PROCESS}-t0000-a-00001.parquet")
    removed = remove_uncommitted_outputs(
        FsspecFileIO({}), PROCESS, {str(tmp_path)}, committed=[kept], reported=[kept, reported]
    )
    assert removed == [reported]
    assert Path(kept).exists() and not Path(reported).exists()


def test_a_reported_file_outside_the_output_dirs_or_of_another_name_is_never_removed(tmp_path: Path) -> None:
    outside = _touch(tmp_path / "elsewhere" / f"{PROCESS}-t0000-a-00000.parquet")
    foreign = _touch(tmp_path / "out" / "precious.parquet")
    removed = remove_uncommitted_outputs(
        FsspecFileIO({}), PROCESS, {str(tmp_path / "out")}, committed=[], reported=[outside, foreign]
    )
    assert removed == []
    assert Path(outside).exists() and Path(foreign).exists()
