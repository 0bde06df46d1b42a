"""Object store over a local (or mounted) filesystem directory.

Writes are atomic: data goes to a temporary file in the target directory, is fsynced, and is then
linked (create) or renamed (overwrite) into place, so a crash never leaves a torn object and
``os.link`` gives put-if-absent for concurrent committers on the same machine or on any POSIX
filesystem that implements link atomically.

Data files are the exception to the fsync per object: a write publishes them with
``durable=False`` (linked into place as soon as they are complete, not synced) and makes them
durable together with ``sync`` before they are committed: one ``syncfs`` of the filesystem on
Linux when there are more than ``SYNC_FILE_BY_FILE`` of them, else an fsync of each file and each
directory they are in. A write into 30,000 partitions used to do 60,000 fsyncs.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import re
import stat
import sys
import uuid
from collections.abc import Iterator

import pyarrow as pa

from deltaplane.engine.errors import ObjectExistsError, ObjectNotFoundError, StorageError
from deltaplane.engine.storage.base import ObjectMeta, PutMode, split_prefix

# Up to this many objects are synced one by one (about 0.26 ms a file here); more with one
# syncfs (1,000 files: 20 ms, against 260 ms file by file). syncfs also writes back every other
# process's dirty pages on the filesystem, which only a write of many files should wait for.
SYNC_FILE_BY_FILE = 64


class LocalStore:
    """Store rooted at a local directory; keys are paths relative to it."""

    remote = False  # reads cost microseconds: no thread pools for a handful of them

    def __init__(self, root: str):
        self._root = os.path.abspath(root).rstrip(os.sep) or os.sep

    @property
    def root(self) -> str:
        return self._root

    def _path(self, key: str) -> str:
        return os.path.join(self._root, *key.split("/")) if key else self._root

    def uri(self, key: str) -> str:
        return self._path(key)

    def get(self, key: str) -> bytes:
        try:
            with open(self._path(key), "rb") as f:
                return f.read()
        except OSError as e:
            raise _read_error(e, self._path(key)) from None

    def get_range(self, key: str, start: int, length: int) -> bytes:
        try:
            with open(self._path(key), "rb") as f:
                f.seek(start)
                return f.read(length)
        except OSError as e:
            raise _read_error(e, self._path(key)) from None

    def head(self, key: str) -> ObjectMeta:
        try:
            st = os.stat(self._path(key))
        except OSError as e:
            raise _read_error(e, self._path(key)) from None
        if not stat.S_ISREG(st.st_mode):  # a directory is not an object
            raise ObjectNotFoundError(f"not a file: {self._path(key)}")
        return ObjectMeta(key, st.st_size, st.st_mtime_ns // 1_000_000)

    def put(self, key: str, data: bytes, *, mode: PutMode = "overwrite") -> None:
        path = self._path(key)
        directory = os.path.dirname(path)
        _make_directory(directory, path)
        tmp = os.path.join(directory, f".{os.path.basename(path)}.{uuid.uuid4().hex}.tmp")
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            if mode == "create":
                try:
                    os.link(tmp, path)
                except FileExistsError:
                    raise ObjectExistsError(f"object already exists: {path}") from None
            elif mode == "overwrite":
                os.replace(tmp, path)
                tmp = ""
            else:
                raise ValueError(f"unknown put mode {mode!r}")
            _fsync_dir(directory)
        except OSError as e:
            if isinstance(e, FileExistsError | ObjectExistsError):
                raise
            raise _write_error(e, path) from e
        finally:
            if tmp:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(tmp)

    def list_temporary(self, prefix: str = "") -> Iterator[ObjectMeta]:
        dir_key, _ = split_prefix(prefix)
        found: list[ObjectMeta] = []
        for dirpath, _dirnames, filenames in os.walk(self._path(dir_key)):
            rel = os.path.relpath(dirpath, self._root).replace(os.sep, "/")
            rel = "" if rel == "." else rel + "/"
            for name in filenames:
                key = rel + name
                if key.startswith(prefix) and _is_temporary(name):
                    meta = self._meta(os.path.join(dirpath, name), key)
                    if meta is not None:
                        found.append(meta)
        found.sort(key=lambda m: m.key)
        return iter(found)

    def list(
        self, prefix: str, *, start_after: str | None = None, recursive: bool = False
    ) -> Iterator[ObjectMeta]:
        dir_key, name_prefix = split_prefix(prefix)
        base = self._path(dir_key)
        found: list[ObjectMeta] = []
        if recursive:
            for dirpath, _dirnames, filenames in os.walk(base):
                rel = os.path.relpath(dirpath, self._root).replace(os.sep, "/")
                rel = "" if rel == "." else rel + "/"
                for name in filenames:
                    key = rel + name
                    if key.startswith(prefix) and not _is_temporary(name):
                        meta = self._meta(os.path.join(dirpath, name), key)
                        if meta is not None:
                            found.append(meta)
        else:
            try:
                entries = list(os.scandir(base))
            except (FileNotFoundError, NotADirectoryError):
                return iter(())  # as an object store lists a prefix nothing is under
            except OSError as e:
                raise StorageError(f"cannot list {base}: {e.strerror or e}") from None
            key_dir = dir_key + "/" if dir_key else ""
            for entry in entries:
                key = key_dir + entry.name
                if start_after is not None and key <= start_after:
                    continue  # skipped before the stat: listings from a version stay cheap
                if entry.name.startswith(name_prefix) and not _is_temporary(entry.name):
                    meta = self._meta(entry.path, key)
                    if meta is not None:
                        found.append(meta)
        found.sort(key=lambda m: m.key)
        if start_after is not None:
            found = [m for m in found if m.key > start_after]
        return iter(found)

    @staticmethod
    def _meta(path: str, key: str) -> ObjectMeta | None:
        """Metadata of a listed file; ``None`` if it vanished since the directory was read."""
        try:
            st = os.stat(path)
        except FileNotFoundError:
            return None
        if not stat.S_ISREG(st.st_mode):
            return None
        return ObjectMeta(key, st.st_size, st.st_mtime_ns // 1_000_000)

    def delete(self, key: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._path(key))

    def remove_empty_directories(self, keys: list[str]) -> int:
        directories: set[str] = set()
        for key in keys:
            parts = key.split("/")[:-1]
            directories |= {"/".join(parts[:i]) for i in range(1, len(parts) + 1)}
        removed = 0
        for directory in sorted(directories, key=lambda d: (-d.count("/"), d)):  # deepest first
            try:
                os.rmdir(self._path(directory))  # only ever removes an empty directory
            except OSError:
                continue  # not empty, or already gone
            removed += 1
        return removed

    def open_output(self, key: str, *, durable: bool = True) -> LocalPendingFile:
        return LocalPendingFile(self._path(key), durable=durable)

    def sync(self, keys: list[str]) -> None:
        if not keys:
            return
        try:
            if len(keys) > SYNC_FILE_BY_FILE and _syncfs(self._root):
                return
            directories = set()
            for key in keys:
                path = self._path(key)
                fd = os.open(path, os.O_RDONLY)
                try:
                    os.fsync(fd)
                finally:
                    os.close(fd)
                directory = os.path.dirname(path)
                while directory.startswith(self._root) and directory not in directories:
                    directories.add(directory)  # and its parents: directories the write made
                    directory = os.path.dirname(directory)
            for directory in directories:
                _fsync_dir(directory)
        except OSError as e:
            raise _write_error(e, self._root) from e

    def open_input(self, key: str, *, size: int | None = None) -> pa.NativeFile:
        try:
            return pa.OSFile(self._path(key), "rb")
        except OSError as e:
            raise _read_error(e, self._path(key)) from None

    def arrow_files(self):
        return _local_filesystem(), "/", "/"  # a key's URI is its absolute path


@functools.cache
def _local_filesystem():
    import pyarrow.fs as pafs

    return pafs.LocalFileSystem()


_TEMPORARY = re.compile(r"^\..+\.[0-9a-f]{32}\.tmp$")


def _read_error(error: OSError, path: str) -> StorageError:
    """A read that failed: absent (also under a file, or a directory where a file should be) or
    unreadable, said in words rather than errno."""
    if isinstance(error, FileNotFoundError | NotADirectoryError):
        return ObjectNotFoundError(f"no such object: {path}")
    if isinstance(error, IsADirectoryError):
        return ObjectNotFoundError(f"not a file: {path} is a directory")
    if isinstance(error, PermissionError):
        return StorageError(f"permission denied reading {path}")
    return StorageError(f"cannot read {path}: {error.strerror or error}")


def _write_error(error: OSError, path: str) -> StorageError:
    if isinstance(error, PermissionError):
        return StorageError(f"permission denied writing {path}")
    if error.errno == errno.ENOSPC:
        return StorageError(f"no space left on the device writing {path}")
    if isinstance(error, NotADirectoryError):
        return StorageError(f"cannot write {path}: {_file_in_the_way(path)} is a file, not a directory")
    return StorageError(f"cannot write {path}: {error.strerror or error}")


def _file_in_the_way(path: str) -> str:
    """The nearest ancestor of ``path`` that exists and is not a directory."""
    parent = os.path.dirname(path)
    while parent and parent != os.path.dirname(parent):
        if os.path.exists(parent) and not os.path.isdir(parent):
            return parent
        parent = os.path.dirname(parent)
    return os.path.dirname(path)


def _make_directory(directory: str, path: str) -> None:
    try:
        os.mkdir(directory)  # most often the one directory missing (a new partition's), or none
        return
    except FileExistsError:
        if os.path.isdir(directory):
            return
    except OSError:
        pass  # a parent missing, or a file in the way: the general case says which
    try:
        os.makedirs(directory, exist_ok=True)
    except FileExistsError:
        in_the_way = _file_in_the_way(os.path.join(directory, "x"))
        raise StorageError(f"cannot write {path}: {in_the_way} is a file, not a directory") from None
    except OSError as e:
        raise _write_error(e, path) from None


def _is_temporary(name: str) -> bool:
    """Our own in-flight writes (``.<name>.<uuid>.tmp``): not objects yet, never listed."""
    return name.startswith(".") and _TEMPORARY.match(name) is not None


def _syncfs(path: str) -> bool:
    """``syncfs(2)`` on the filesystem holding ``path``: every dirty page and inode of it reaches
    the disk in one call (Linux, which reports write-back errors since 5.8); False where there is
    no such call, so the caller syncs file by file."""
    libc = _libc()
    if libc is None:
        return False
    fd = os.open(path, os.O_RDONLY)
    try:
        if libc.syncfs(fd) != 0:
            import ctypes

            code = ctypes.get_errno()
            raise OSError(code, os.strerror(code), path)
    finally:
        os.close(fd)
    return True


@functools.cache
def _libc():
    if not sys.platform.startswith("linux"):
        return None
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return libc if hasattr(libc, "syncfs") else None
    except OSError:
        return None


def _fsync_dir(directory: str) -> None:
    """Make a new directory entry durable; some filesystems refuse, which is harmless."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


class LocalPendingFile:
    """A file streamed to a temporary name beside its target, then fsynced and linked into place
    (not fsynced when not ``durable``: the store's ``sync`` does it later, for a group)."""

    def __init__(self, path: str, *, durable: bool = True):
        self._path = path
        self._durable = durable
        directory = os.path.dirname(path)
        _make_directory(directory, path)
        self._tmp = os.path.join(directory, f".{os.path.basename(path)}.{uuid.uuid4().hex}.tmp")
        try:
            self._sink = pa.OSFile(self._tmp, "wb")
        except OSError as e:
            raise _write_error(e, path) from None

    @property
    def sink(self) -> pa.NativeFile:
        return self._sink

    def commit(self) -> int:
        if not self._sink.closed:
            self._sink.close()
        try:
            if self._durable:
                fd = os.open(self._tmp, os.O_RDONLY)
                try:
                    os.fsync(fd)
                    size = os.fstat(fd).st_size
                finally:
                    os.close(fd)
            else:
                size = os.stat(self._tmp).st_size
            try:
                os.link(self._tmp, self._path)
            except FileExistsError:
                raise ObjectExistsError(f"object already exists: {self._path}") from None
            if self._durable:
                _fsync_dir(os.path.dirname(self._path))
            return size
        except ObjectExistsError:
            raise
        except OSError as e:
            raise _write_error(e, self._path) from e
        finally:
            self.abort()

    def abort(self) -> None:
        if not self._sink.closed:
            self._sink.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._tmp)
