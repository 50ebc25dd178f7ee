"""Files and folders for the user only: run data (queries, events, reports, the egress ledger) is created
0700 (folders) and 0600 (files) whatever the umask. Used by :mod:`actors.steps.run.rundir` and
:mod:`infra.net.egress`."""

from __future__ import annotations

import os
from pathlib import Path


def private_dir(path: Path) -> Path:
    """Create ``path`` and its missing parents for the user only (0700, whatever the umask); folders
    that already exist keep their mode."""
    path = Path(path)
    missing = []
    p = path
    while not p.exists():
        missing.append(p)
        p = p.parent
    for folder in reversed(missing):
        try:
            folder.mkdir(mode=0o700)
        except FileExistsError:
            pass
        os.chmod(folder, 0o700)  # mkdir's mode is masked by the umask
    return path


def private_append(path: Path, line: str) -> None:
    """Append one line to a user-only (0600) file in a user-only folder, in one write."""
    private_dir(path.parent)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line.encode("utf-8"))
    finally:
        os.close(fd)
