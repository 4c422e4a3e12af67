"""The one file deleter: a file already gone counts as deleted, and each caller says what a failure does."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from pyiceberg.io.pyarrow import PyArrowFileIO

from floe.kit.files import delete_paths


class _Refusing(PyArrowFileIO):
    """A FileIO that cannot delete the paths it is told to refuse."""

    def __init__(self, refused: set[str], error: Exception) -> None:
        super().__init__()
        self.refused, self.error = refused, error

    def delete(self, location: object) -> None:
        if str(location) in self.refused:
            raise self.error
        super().delete(location)  # type: ignore[arg-type]


def _files(tmp_path: Path, *names: str) -> list[str]:
    for name in names:
        (tmp_path / name).write_bytes(b"x")
    return [str(tmp_path / name) for name in names]


@pytest.mark.parametrize("workers", [1, 8])
def test_deletes_and_counts_a_missing_file_as_deleted(tmp_path: Path, workers: int) -> None:
    paths = [*_files(tmp_path, "a", "b"), str(tmp_path / "gone")]
    assert delete_paths(PyArrowFileIO(), paths, workers=workers) == paths
    assert not any(Path(p).exists() for p in paths)


def test_log_warns_and_goes_on(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    a, b = _files(tmp_path, "a", "b")
    with caplog.at_level(logging.WARNING):
        assert delete_paths(_Refusing({a}, PermissionError("denied")), [a, b]) == [b]
    assert f"could not delete {a} (left for orphan cleanup): denied" in caplog.text


@pytest.mark.parametrize("workers", [1, 8])
def test_raise_raises(tmp_path: Path, workers: int) -> None:
    a, b = _files(tmp_path, "a", "b")
    with pytest.raises(PermissionError):
        delete_paths(_Refusing({a}, PermissionError("denied")), [a, b], workers=workers, on_error="raise")


def test_a_callable_gets_any_error(tmp_path: Path) -> None:
    (a,) = _files(tmp_path, "a")
    failed: list[tuple[str, Exception]] = []
    error = ValueError("odd")
    assert delete_paths(_Refusing({a}, error), [a], on_error=lambda p, e: failed.append((p, e))) == []
    assert failed == [(a, error)]
    with pytest.raises(ValueError):
        delete_paths(_Refusing({a}, error), [a])
