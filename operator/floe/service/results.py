"""The task service's result check: `check_result` against each task's storage, with one FileIO
per distinct set of IO properties, and the files of a refused result deleted."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping

from pyiceberg.io import FileIO, load_file_io

from floe.kit.files import delete_paths
from floe.protocol.rewrite_task import RewriteTaskResult, RewriteTaskSpec
from floe.rewrite.result_check import check_result, own_files


class ResultChecker:
    """`check_result` against storage, with one FileIO per distinct set of IO properties.

    A task whose storage credentials stay in a mounted Secret (``storage_secret``) is checked
    with its process's own FileIO properties, which `use_storage` tells how to find.
    """

    def __init__(self) -> None:
        self._ios: dict[tuple[tuple[str, str], ...], FileIO] = {}
        self._lock = threading.Lock()
        self._storage: Callable[[str], Mapping[str, str] | None] = lambda _: None

    def use_storage(self, properties_of: Callable[[str], Mapping[str, str] | None]) -> None:
        """`properties_of(process_id)`: the FileIO properties of the process's table, if known."""
        self._storage = properties_of

    def check(self, spec: RewriteTaskSpec, result: RewriteTaskResult, process_id: str = "") -> None:
        """Raise ResultCheckFailed unless `result` is what `spec`'s attempt may produce; OSError when
        the storage does not answer."""
        check_result(spec, result, self.io(spec, process_id))

    def delete_own_files(
        self, spec: RewriteTaskSpec, result: RewriteTaskResult, process_id: str = ""
    ) -> list[str]:
        """Delete the files `result` names that the attempt may have written (`own_files`);
        a file named elsewhere is never touched. Returns the paths deleted or already gone."""
        return delete_paths(self.io(spec, process_id), own_files(spec, result))

    def io(self, spec: RewriteTaskSpec, process_id: str = "") -> FileIO:
        """The FileIO for the task's storage."""
        properties = dict(spec.io_properties)
        if spec.storage_secret is not None:
            properties = dict(self._storage(process_id) or properties)
        key = tuple(sorted(properties.items()))
        with self._lock:
            io = self._ios.get(key)
            if io is None:
                io = load_file_io(properties, location=spec.output_dir)
                self._ios[key] = io
            return io
