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
# under the License.

"""Which host processes hold a device file open.

``/proc/<pid>/fd/<n>`` is a symbolic link whose text is the path of the
file the process opened (``/dev/nvidia0``); it is read, never followed,
so it works the same under ``[agent] host_root``.
"""

from __future__ import annotations

from collections.abc import Iterable
import dataclasses
import os

from cyborg.accelerator.drivers.utils import errors
from cyborg.accelerator.drivers.utils import sysfs


@dataclasses.dataclass(frozen=True)
class Holder:
    """A process that has one of the files open."""

    pid: int
    command: str
    path: str

    def __str__(self) -> str:
        return '%s is open in process %d (%s)' % (self.path, self.pid,
                                                  self.command or '?')


class ProcUnreadable(errors.HostError):
    """A process's open files cannot be read (not root?)."""

    def __init__(self, pid: str, reason: str) -> None:
        super().__init__('cannot read the open files of process %s: %s'
                         % (pid, reason))


def holders(host: sysfs.HostRoot, paths: Iterable[str]) -> list[Holder]:
    """The processes that have one of ``paths`` (host spellings such as
    ``/dev/nvidia0``) open, by pid; raises :class:`ProcUnreadable` when a
    process's files cannot be read, since it could be one of them."""
    wanted = set(paths)
    proc = host.resolve('/proc')
    found = []
    for pid in sorted(_pids(proc), key=int):
        path = _open_one_of(os.path.join(proc, pid, 'fd'), wanted, pid)
        if path is not None:
            command = sysfs.read_text(host, sysfs.path('/proc', pid,
                                                       'comm'))
            found.append(Holder(int(pid), command or '', path))
    return found


def _pids(proc: str) -> list[str]:
    try:
        return [name for name in os.listdir(proc) if name.isdigit()]
    except FileNotFoundError:
        return []


def _open_one_of(fd_dir: str, wanted: set[str], pid: str) -> str | None:
    try:
        fds = os.listdir(fd_dir)
    except (FileNotFoundError, NotADirectoryError, ProcessLookupError):
        return None  # the process ended meanwhile
    except PermissionError as exc:
        raise ProcUnreadable(pid, exc.strerror or str(exc))
    for fd in fds:
        try:
            target = os.readlink(os.path.join(fd_dir, fd))
        except OSError:
            continue  # closed meanwhile
        if target in wanted:
            return target
    return None
