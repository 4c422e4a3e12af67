"""The task service's default result check: `check_result` against each task's storage, with one
FileIO per distinct set of IO properties, and the files of a refused result deleted.

An optimizing process checks its tasks' results itself, against its own table's FileIO
(`GroupScheduler.result_check`); this serves processes added without a check of their own.
"""

from __future__ import annotations

import threading

from pyiceberg.io import FileIO, load_file_io

from floe.kit.files import delete_paths
from floe.protocol.rewrite_task import RewriteTaskResult, RewriteTaskSpec
from floe.rewrite.result_check import check_result, own_files


class ResultChecker:
    """`check_result` against the storage a task's spec names, with one FileIO per distinct set
    of IO properties."""

    def __init__(self) -> None:
        self._ios: dict[tuple[tuple[str, str], ...], FileIO] = {}
        self._lock = threading.Lock()

    def check(self, spec: RewriteTaskSpec, result: RewriteTaskResult) -> None:
        """Raise ResultCheckFailed unless `result` is what `spec`'s attempt may produce; OSError when
        the storage does not answer."""
        check_result(spec, result, self.io(spec))

    def delete_refused(self, spec: RewriteTaskSpec, result: RewriteTaskResult) -> list[str]:
        """Delete the files `result` names that the attempt may have written (`own_files`);
        a file named elsewhere is never touched. Returns the paths deleted or already gone."""
        return delete_paths(self.io(spec), own_files(spec, result))

    def io(self, spec: RewriteTaskSpec) -> FileIO:
        """The FileIO for the task's storage, from the properties its spec carries."""
        key = tuple(sorted(spec.io_properties.items()))
        with self._lock:
            io = self._ios.get(key)
            if io is None:
                io = load_file_io(dict(spec.io_properties), location=spec.output_dir)
                self._ios[key] = io
            return io
