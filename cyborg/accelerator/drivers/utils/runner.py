# Copyright 2026 The Cyborg Authors.
#
# Licensed under the Apache License, Version 2.0 (the "License"); you may
# not use this file except in compliance with the License. You may obtain
# a copy of the License at
#
#      http://www.apache.org/licenses/LICENSE-2.0
#
# Unless required by applicable law or agreed to in writing, software
# distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
# WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the
# License for the specific language governing permissions and limitations

"""The one way drivers run vendor commands (``nvidia-smi``, ``fpgainfo``,
``xbmgmt``, ``npu-smi``, ``adf_ctl``...).

:class:`CommandRunner` looks the command up in its ``search_path`` (by
default ``PATH`` plus the sbin directories), runs it without a shell,
with a timeout (after which it and every process it started are
killed), in the C locale, and returns a :class:`CommandResult`
(exit status, stdout, stderr). A command that is not installed raises
:class:`~.errors.ToolNotAvailable`, one that runs too long
:class:`~.errors.ToolTimeout`; a non-zero exit status is a result, which
``check()`` turns into :class:`~.errors.ToolFailed`.

Drivers take a runner as an argument (anything with this ``run``
method). Tests build ``CommandRunner(search_path=[<fixture tools dir>])``:
only the fixture's fake tools can then be found, never a real one.

Output parsers belong to drivers; :func:`parse_csv` is here because the
``--format=csv`` output of ``nvidia-smi`` queries is read by several.
"""

from __future__ import annotations

from collections.abc import Sequence
import dataclasses
import os
import shutil
import signal
import subprocess
import time
from typing import Protocol

from cyborg.accelerator.drivers.utils import errors
from cyborg.common import metrics

DEFAULT_TIMEOUT = 30.0
EXTRA_PATH = ('/usr/local/sbin', '/usr/sbin', '/sbin')
NOT_AVAILABLE = ('[N/A]', '[Not Supported]', 'N/A')


@dataclasses.dataclass(frozen=True)
class CommandResult:
    """What a command did: its argv (the resolved executable first)."""

    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def check(self) -> CommandResult:
        """Return self, or raise ``ToolFailed`` for a non-zero status."""
        if self.returncode != 0:
            raise errors.ToolFailed(list(self.argv), self.returncode,
                                    self.stderr)
        return self


class Runner(Protocol):
    def run(self, argv: Sequence[str],
            timeout: float = DEFAULT_TIMEOUT) -> CommandResult:
        ...


def _default_search_path() -> list[str]:
    path = os.environ.get('PATH', os.defpath).split(os.pathsep)
    return [d for d in path if d] + [d for d in EXTRA_PATH if d not in path]


class CommandRunner:
    """Runs commands found in ``search_path``, never through a shell."""

    def __init__(self, search_path: Sequence[str] | None = None) -> None:
        self.search_path = (list(search_path) if search_path is not None
                            else _default_search_path())

    def which(self, name: str) -> str | None:
        """The executable ``name`` resolves to, ``None`` if not found.

        An absolute ``name`` is used as it is, if executable.
        """
        if os.path.isabs(name):
            executable = os.path.isfile(name) and os.access(name, os.X_OK)
            return name if executable else None
        if os.sep in name or not name:
            return None
        return shutil.which(name, path=os.pathsep.join(self.search_path))

    def available(self, name: str) -> bool:
        return self.which(name) is not None

    def _environment(self) -> dict[str, str]:
        return {'PATH': os.pathsep.join(self.search_path),
                'LC_ALL': 'C', 'LANG': 'C'}

    def run(self, argv: Sequence[str],
            timeout: float = DEFAULT_TIMEOUT) -> CommandResult:
        """Run ``argv``; see the module's docstring for what it raises."""
        if isinstance(argv, str) or not argv:
            raise ValueError('argv must be a non-empty list of strings')
        executable = self.which(argv[0])
        if executable is None:
            raise errors.ToolNotAvailable(list(argv))
        command = [executable, *argv[1:]]
        try:
            proc = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, env=self._environment(),
                start_new_session=True)
        except OSError as exc:
            raise errors.ToolNotAvailable(list(argv),
                                          exc.strerror or str(exc))
        started = time.monotonic()
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            stdout, stderr = _kill(proc)
            metrics.vendor_tool(argv[0], 'timeout', time.monotonic() - started)
            raise errors.ToolTimeout(list(argv), timeout, _text(stdout),
                                     _text(stderr))
        metrics.vendor_tool(argv[0], 'ok' if proc.returncode == 0
                            else 'failed', time.monotonic() - started)
        return CommandResult(tuple(command), proc.returncode,
                             _text(stdout), _text(stderr))


def _kill(proc: subprocess.Popen) -> tuple[bytes, bytes]:
    """Kill the command and whatever it started (its session), so that
    no child left holding the pipes can block the agent."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    return proc.communicate()


def _text(data: bytes | str | None) -> str:
    if data is None:
        return ''
    if isinstance(data, str):
        return data
    return data.decode('utf-8', errors='replace')


def parse_csv(text: str, fields: Sequence[str] | None = None,
              header: bool = False) -> list[dict[str, str | None]]:
    """Rows of ``nvidia-smi --query-*=... --format=csv[,noheader]``.

    Values are split on ``,`` and stripped; ``[N/A]`` and
    ``[Not Supported]`` become ``None``. With ``header`` the first line
    names the fields (units such as `` [MiB]`` dropped from the names);
    otherwise ``fields`` must name them, in query order. A row with the
    wrong number of values raises ``ValueError``.
    """
    lines = [line for line in text.splitlines() if line.strip()]
    if header:
        if not lines:
            return []
        fields = [f.strip().split(' [')[0] for f in lines.pop(0).split(',')]
    if fields is None:
        raise ValueError('fields are needed without a header')
    rows = []
    for line in lines:
        values = [v.strip() for v in line.split(',')]
        if len(values) != len(fields):
            raise ValueError('%d values for %d fields: %r'
                             % (len(values), len(fields), line))
        rows.append({f: (None if v in NOT_AVAILABLE else v)
                     for f, v in zip(fields, values, strict=True)})
    return rows
