"""The files a set of snapshots references: manifest lists, manifests, data and delete files.

Expiry and orphan cleanup both decide what may be deleted by comparing such sets, so
both read manifests the same way: each distinct manifest once (consecutive snapshots
share most of theirs), in parallel.
"""

from __future__ import annotations

from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from pyiceberg.io import FileIO
from pyiceberg.manifest import ManifestFile
from pyiceberg.table.snapshots import Snapshot


@dataclass
class ReferencedFiles:
    """Paths (as written in the metadata) with their sizes in bytes where the metadata has them."""

    manifest_lists: set[str] = field(default_factory=set)
    manifests: dict[str, int] = field(default_factory=dict)
    content_files: dict[str, int] = field(default_factory=dict)
    """Data and delete files."""

    def all_paths(self) -> set[str]:
        """Every path of the three kinds."""
        return self.manifest_lists | set(self.manifests) | set(self.content_files)


def referenced_files(io: FileIO, snapshots: Iterable[Snapshot], *, live_only: bool) -> ReferencedFiles:
    """The files `snapshots` reference.

    With `live_only`, only added and existing manifest entries count: a DELETED entry
    names a file its snapshot no longer reads. Without it every entry counts, which is
    what a conservative "is anything still pointing here" check wants.
    """
    found = ReferencedFiles()
    manifests: dict[str, ManifestFile] = {}
    for snapshot in snapshots:
        found.manifest_lists.add(snapshot.manifest_list)
        for manifest in snapshot.manifests(io):
            manifests.setdefault(manifest.manifest_path, manifest)
    for path, manifest in manifests.items():
        found.manifests[path] = manifest.manifest_length
    with ThreadPoolExecutor(max_workers=8) as pool:
        chunks = pool.map(lambda m: m.fetch_manifest_entry(io, discard_deleted=live_only), manifests.values())
        for entries in chunks:
            for entry in entries:
                found.content_files[entry.data_file.file_path] = entry.data_file.file_size_in_bytes
    return found
