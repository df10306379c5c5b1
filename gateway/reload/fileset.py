"""What a policy set is made of on disk, looked at cheaply: the files a load would read, each with its
size, times, inode and the path it resolves to through symlinks.

Two equal fingerprints taken a settle interval apart mean nobody wrote in between, so a load then
reads whole files rather than a save in progress. The resolved path is part of the stamp so that a
Kubernetes ConfigMap update (the kubelet swaps the ``..data`` symlink to a new directory) is one
change of every file at once.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from gateway.policy.load import discover

__all__ = ["FileStamp", "Fingerprint", "Moved", "Settler", "display_path", "fingerprint", "read_stamped",
           "swapped_whole"]


@dataclass(frozen=True, slots=True)
class FileStamp:
    """One file as ``stat`` sees it; ``size`` is -1 when it could not be read (gone, dangling link)."""

    path: str
    real: str
    size: int
    mtime_ns: int
    ctime_ns: int
    inode: int
    device: int


@dataclass(frozen=True, slots=True)
class Fingerprint:
    """The policy files of a set (in load order), other watched files (a manifest), and the
    configured paths that do not exist."""

    files: tuple[FileStamp, ...]
    extra: tuple[FileStamp, ...] = ()
    missing: tuple[str, ...] = ()


class Moved(Exception):
    """A file is no longer the one its stamp saw: it changed between the look and the read."""


_DATA = "..data"  # Kubernetes' symlink to the current version of a mounted ConfigMap or Secret


def swapped_whole(path: Path) -> bool:
    """Whether the files at ``path`` (a directory, or a file in one) change in one rename: a mounted
    Kubernetes ConfigMap or Secret, whose ``..data`` symlink the kubelet swaps to a complete new version."""
    folder = path if path.is_dir() else path.parent
    return (folder / _DATA).is_symlink()


def _real(path: Path, data_links: dict[Path, str | None]) -> str:
    """Where ``path`` resolves. A file linked through ``..data`` is resolved with the one reading of
    ``..data`` shared by its whole directory, so every file of a set comes from the same version."""
    folder = path.parent
    if folder not in data_links:
        try:
            data_links[folder] = os.readlink(folder / _DATA)
        except OSError:
            data_links[folder] = None
    target = data_links[folder]
    if target is not None and path.is_symlink():
        link = os.readlink(path)
        if link.startswith(_DATA + "/"):
            return os.path.realpath(folder / target / link[len(_DATA) + 1:])
    return os.path.realpath(path)


def _stamp(path: Path, data_links: dict[Path, str | None]) -> FileStamp:
    try:
        real = _real(path, data_links)
        st = os.stat(real)
    except OSError:
        return FileStamp(str(path), "", -1, 0, 0, 0, 0)
    return FileStamp(str(path), real, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev)


def fingerprint(roots: Sequence[Path], extra: Sequence[Path] = ()) -> Fingerprint:
    """Stamps of the policy files under ``roots`` (as a load would find them) and of ``extra`` files."""
    files, problems = discover(roots)
    links: dict[Path, str | None] = {}
    return Fingerprint(tuple(_stamp(f, links) for f in files), tuple(_stamp(f, links) for f in extra),
                       tuple(d.file for d in problems))


def read_stamped(stamp: FileStamp, limit: int) -> bytes:
    """Up to ``limit`` + 1 bytes of exactly the file ``stamp`` saw (same inode, size and time).

    Raises ``Moved`` when the file there now is another one, ``OSError`` when it cannot be read.
    """
    with open(stamp.real or stamp.path, "rb") as f:  # no real path: could not stat; open says why
        st = os.fstat(f.fileno())
        if (st.st_ino, st.st_dev, st.st_size, st.st_mtime_ns) != (stamp.inode, stamp.device, stamp.size,
                                                                  stamp.mtime_ns):
            raise Moved(stamp.path)
        return f.read(limit + 1)


class Settler:
    """Says when files that changed have stayed the same for ``settle`` seconds."""

    def __init__(self, settle: float, loaded: Fingerprint) -> None:
        self.settle = settle
        self.loaded = loaded
        self._pending: Fingerprint | None = None
        self._since = 0.0

    @property
    def pending(self) -> bool:
        """Whether a change was seen that has not been loaded yet."""
        return self._pending is not None

    def ready(self, seen: Fingerprint, now: float) -> bool:
        """True when ``seen`` differs from what was loaded and has not changed for ``settle`` seconds."""
        if seen == self.loaded:
            self._pending = None  # changed and changed back: nothing to do
            return False
        if seen != self._pending:
            self.restart(seen, now)
            return False
        return now - self._since >= self.settle

    def restart(self, seen: Fingerprint, now: float) -> None:
        """Wait a full settle interval again from ``now`` (files moved during a load, or it must be retried)."""
        self._pending, self._since = seen, now

    def done(self, seen: Fingerprint) -> None:
        """``seen`` was looked at (loaded, or refused): wait for the next change."""
        self.loaded, self._pending = seen, None


def display_path(file: str, base: Path | None, roots: Sequence[Path]) -> str:
    """``file`` as shown to API callers: relative to the config directory, else to its policy root
    (named by the root's last part); never absolute, so a key holder learns nothing of the host."""
    path = Path(file)
    if not path.is_absolute():
        return path.as_posix()
    if base is not None and path.is_relative_to(base):
        return path.relative_to(base).as_posix()
    for root in roots:
        if path.is_relative_to(root):
            return (Path(root.name) / path.relative_to(root)).as_posix()
    return path.name
