"""What a traced child process tried to reach: the strace prefix that records its connect/send calls (or the reason
it cannot run here), and the addresses those calls name."""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys

import pytest

from infra.ray_runtime import is_loopback

_ADDR_RE = re.compile(
    r"sin6?_port=htons\((?P<port>\d+)\)[^}]*?"
    r'(?:inet_addr\("(?P<v4>[^"]+)"\)|inet_pton\(AF_INET6,\s*"(?P<v6>[^"]+)")'
)
_SYSCALLS = ("connect(", "sendto(", "sendmsg(", "sendmmsg(")


def inet_destinations(trace: str) -> list[tuple[str, int, str]]:
    """Return ``(ip, port, line)`` for each IPv4/IPv6 address in traced calls."""
    found = []
    for line in trace.splitlines():
        if not any(call in line for call in _SYSCALLS):
            continue
        for m in _ADDR_RE.finditer(line):
            found.append((m["v4"] or m["v6"], int(m["port"]), line.strip()))
    return found


def non_loopback(destinations: list[tuple[str, int, str]]) -> list[tuple[str, int, str]]:
    """The destinations that are not loopback addresses."""
    return [d for d in destinations if not is_loopback(d[0])]


@functools.cache
def strace_cmd() -> list[str]:
    """The strace prefix to use, or pytest.skip with the reason it cannot be used."""
    exe = shutil.which("strace")
    if exe is None:
        pytest.skip("strace is not installed (Debian/Ubuntu: apt-get install -y strace)")
    base = [exe, "-f", "-qq", "-e", "trace=connect,sendto,sendmsg,sendmmsg"]
    errors = []
    # --seccomp-bpf (strace >= 5.3) only stops on the traced syscalls: ~30 % faster.
    for cmd in ([*base[:2], "--seccomp-bpf", *base[2:]], base):
        probe = subprocess.run(
            [*cmd, "-o", os.devnull, sys.executable, "-c", "pass"],
            capture_output=True,
            text=True,
        )
        if probe.returncode == 0:
            return cmd
        errors.append(probe.stderr.strip())
    pytest.skip(f"strace cannot trace child processes here: {errors[-1]}")
