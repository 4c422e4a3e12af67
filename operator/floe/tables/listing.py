"""Listing files through a table's pyarrow FileSystem, locally and on S3-style object stores alike.

Paths come back in the FileSystem's own form (``/dir/file`` locally, ``bucket/key`` on object
stores), to which ``file:/x``, ``file:///x``, ``/x`` and ``s3://bucket/key`` all map; each listed
file also carries the location to hand back to the FileIO (``scheme://bucket/key``).
"""

from __future__ import annotations

from pyarrow.fs import FileInfo, FileSelector, FileType
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.typedef import Properties


def fs_path(io: PyArrowFileIO, location: str) -> str:
    """`location` in the FileSystem's form, the form its listing returns."""
    return location_path(location, io.properties)


def location_path(location: str, properties: Properties) -> str:
    """`location` in the form the FileSystem of a FileIO with `properties` lists it."""
    _, _, path = PyArrowFileIO.parse_location(location, properties)
    return path.rstrip("/")


def list_files(io: PyArrowFileIO, roots: dict[str, str], recursive: bool = True) -> dict[FileInfo, str]:
    """Every file under `roots` (FileSystem path → location), with its location (plain local path
    or ``scheme://bucket/key``). A root that does not exist lists nothing."""
    files: dict[FileInfo, str] = {}
    for root, location in roots.items():
        scheme, netloc, _ = PyArrowFileIO.parse_location(location, io.properties)
        fs = io.fs_by_scheme(scheme, netloc)
        for info in fs.get_file_info(FileSelector(root, recursive=recursive, allow_not_found=True)):
            if info.type == FileType.File:
                files[info] = info.path if scheme == "file" else f"{scheme}://{info.path}"
    return files
