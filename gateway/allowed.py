"""The library folders a run started through the gateway may read: the owner's allow-list.

The gateway reads files as its owner. Without a list, anyone holding the token could name any folder the owner
can read (``"library": "/home/owner/private"``) and read its text back through the run's evidence: a confused
deputy. So the API's ``library`` must lie inside a folder the owner allowed (``forage library allow DIR``), kept
one resolved path per line in ``$XDG_CONFIG_HOME/forage/allowed-libraries`` (0600). Paths are compared after
resolving symlinks and ``..``, and such a run reads only files whose real path lies inside its library folder
(``search.library_confined``: a link pointing out of it is skipped and reported).

The CLI's own runs are the owner's and read any folder the owner names.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from actors.steps.run.rundir import atomic_write
from gateway.api import config_dir


def allow_list_path() -> Path:
    return config_dir() / "allowed-libraries"


def allowed_libraries(path: Path | None = None) -> list[Path]:
    """The allowed folders, resolved; [] when there is no list (then the API accepts no ``library``)."""
    path = path or allow_list_path()
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    return [Path(line) for line in (raw.strip() for raw in lines) if line]


def _write(folders: Sequence[Path], path: Path) -> None:
    atomic_write(path, "".join(f"{folder}\n" for folder in folders))  # 0600 in a 0700 folder, never half-written


def allow(folder: Path, path: Path | None = None) -> Path:
    """Add ``folder`` (resolved; it must be an existing folder) to the list; returns the resolved folder."""
    resolved = Path(folder).expanduser().resolve()
    if not resolved.is_dir():
        raise ValueError(f"{folder} is not a folder")
    path = path or allow_list_path()
    folders = allowed_libraries(path)
    if resolved not in folders:
        _write([*folders, resolved], path)
    return resolved


def disallow(folder: Path, path: Path | None = None) -> bool:
    """Remove ``folder`` from the list; False when it was not on it."""
    resolved = Path(folder).expanduser().resolve()
    path = path or allow_list_path()
    folders = allowed_libraries(path)
    if resolved not in folders:
        return False
    _write([f for f in folders if f != resolved], path)
    return True


def allowed_root(folder: Path, allowed: Sequence[Path]) -> Path | None:
    """The allowed folder that ``folder`` (already resolved) lies in, or None."""
    for root in allowed:
        if folder == root or folder.is_relative_to(root):
            return root
    return None
