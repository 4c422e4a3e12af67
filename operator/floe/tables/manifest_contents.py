"""The live files of manifests already read, kept by manifest path.

A committed manifest never changes: later snapshots list the same file with the same sequence
number and ``first_row_id``. A table a writer appends to every minute gains one manifest a
commit, and each refresh that finds it changed scans every manifest again: 60 one-file manifests
cost 60 ms of CPU a scan here, of which the new manifest is 1 ms. Kept here, a scan decodes only
the manifests it has not seen.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass

from pyiceberg.manifest import FileFormat
from pyiceberg.typedef import Record

from floe.planning.files import ContentFile, FileKind, PartitionKey

DEFAULT_MAX_FILES = 20_000
"""About 20 MiB (1 KiB a file, measured on one-file manifests): the tables a writer keeps
changing among 10,000 (100 of them, 60 manifests each), not every table."""


@dataclass(frozen=True)
class ManifestContent:
    """One manifest's live files as planning sees them, with their partitions' Iceberg records."""

    files: tuple[ContentFile, ...]
    partition_records: tuple[tuple[PartitionKey, Record], ...]
    file_formats: frozenset[tuple[FileKind, FileFormat]]


class ManifestContents:
    """A bounded, thread-safe store of `ManifestContent` by (manifest path, format version),
    least recently used first out once it holds more than `max_files` files."""

    def __init__(self, max_files: int = DEFAULT_MAX_FILES) -> None:
        self.max_files = max_files
        self._contents: OrderedDict[tuple[str, int], ManifestContent] = OrderedDict()
        self._files = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, manifest_path: str, format_version: int) -> ManifestContent | None:
        """The manifest's content when it was read before, else None."""
        key = (manifest_path, format_version)
        with self._lock:
            content = self._contents.get(key)
            if content is None:
                self.misses += 1
                return None
            self._contents.move_to_end(key)
            self.hits += 1
            return content

    def put(self, manifest_path: str, format_version: int, content: ManifestContent) -> None:
        """Keep the manifest's content; one larger than the whole store is not kept."""
        if len(content.files) > self.max_files:
            return
        key = (manifest_path, format_version)
        with self._lock:
            old = self._contents.pop(key, None)
            if old is not None:
                self._files -= len(old.files)
            self._contents[key] = content
            self._files += len(content.files)
            while self._files > self.max_files:
                _, evicted = self._contents.popitem(last=False)
                self._files -= len(evicted.files)

    @property
    def files(self) -> int:
        """The files held, over all manifests."""
        with self._lock:
            return self._files


MANIFEST_CONTENTS = ManifestContents()
"""The process's store: what the engine's scans share."""
