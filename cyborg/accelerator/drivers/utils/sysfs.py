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

"""The host root and safe reads and writes of sysfs-style files.

A :class:`HostRoot` maps host paths (``/sys/bus/pci/devices/...``) to
paths under ``[agent] host_root``. It resolves symbolic links itself, one
component at a time, so that no link is ever followed out of the root:
a relative link that climbs above the root, or an absolute link under a
root other than ``/``, raises :class:`~.errors.OutsideRootError`. The
kernel only makes relative links in sysfs, so a real host tree mounted
anywhere resolves the same as at ``/``.

Reads strip the trailing newline every attribute has and answer ``None``
for a missing file; other read errors raise
:class:`~.errors.SysfsReadError`.
"""

from __future__ import annotations

import os

from oslo_config import cfg

from cyborg.accelerator.drivers.utils import errors

# Like the kernel's limit on links followed in one path lookup.
MAX_LINKS = 40


def _parts(path: str) -> list[str]:
    return [p for p in path.split('/') if p not in ('', '.')]


class HostRoot:
    """The directory under which a host's ``sys``, ``dev``, ``proc`` are."""

    def __init__(self, root: str = '/') -> None:
        self.root = os.path.realpath(root)

    @classmethod
    def from_conf(cls, conf: cfg.ConfigOpts) -> HostRoot:
        """The root ``[agent] host_root`` of ``conf`` names."""
        return cls(conf.agent.host_root)

    def __repr__(self) -> str:
        return 'HostRoot(%r)' % self.root

    def resolve(self, path: str) -> str:
        """The real path of host ``path``, with every link resolved.

        Components that do not exist are kept as they are (like
        ``os.path.realpath``); the answer is always inside the root.
        """
        pending = _parts(path)
        current = self.root
        links = 0
        while pending:
            part = pending.pop(0)
            if part == '..':
                current = self._parent(current, path)
                continue
            candidate = os.path.join(current, part)
            if not os.path.islink(candidate):
                current = candidate
                continue
            links += 1
            if links > MAX_LINKS:
                raise errors.LinkLoopError(path)
            try:
                target = os.readlink(candidate)
            except FileNotFoundError:
                # Gone since islink (a driver unbound meanwhile): as if
                # it had not been there.
                current = candidate
                continue
            self._followed(candidate)
            if os.path.isabs(target):
                if self.root != '/':
                    raise errors.OutsideRootError(path, self.root)
                current = '/'
            pending[:0] = _parts(target)
        return current

    def listdir(self, path: str) -> list[str]:
        """The entries of host directory ``path`` (``os.listdir``)."""
        return os.listdir(self.resolve(path))

    def _followed(self, link: str) -> None:
        """Called with the real path of each link :meth:`resolve`
        follows; host capture records them, nothing else does."""

    def _parent(self, current: str, path: str) -> str:
        if current == self.root:
            if self.root == '/':
                return current
            raise errors.OutsideRootError(path, self.root)
        return os.path.dirname(current)

    def host_path(self, real: str) -> str:
        """The host spelling (``/sys/...``) of a real path under the root."""
        rel = os.path.relpath(real, self.root)
        if rel == '.':
            return '/'
        if rel == '..' or rel.startswith('../'):
            raise errors.OutsideRootError(real, self.root)
        return '/' + rel


def _join(*parts: str) -> str:
    return '/'.join(p.strip('/') for p in parts if p)


def path(*parts: str) -> str:
    """A host path from parts: ``path('sys/bus/pci/devices', addr)``."""
    return '/' + _join(*parts)


def exists(host: HostRoot, host_path: str) -> bool:
    return os.path.exists(host.resolve(host_path))


def read_text(host: HostRoot, host_path: str) -> str | None:
    """The stripped text of a file; ``None`` when it does not exist."""
    real = host.resolve(host_path)
    try:
        with open(real, 'rb') as f:
            data = f.read()
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        raise errors.SysfsReadError(host_path, exc.errno,
                                    exc.strerror or str(exc))
    return data.decode('utf-8', errors='replace').strip()


def read_int(host: HostRoot, host_path: str, base: int = 10) -> int | None:
    """The integer in a file (``base`` 16 accepts a ``0x`` prefix, 0
    guesses it); ``None`` when the file does not exist."""
    text = read_text(host, host_path)
    if text is None:
        return None
    try:
        return int(text, base)
    except ValueError:
        raise errors.SysfsValueError(host_path, text,
                                     'not a base %d integer' % base)


def read_lines(host: HostRoot, host_path: str) -> list[str] | None:
    """The non-empty stripped lines of a file, ``None`` if missing."""
    text = read_text(host, host_path)
    if text is None:
        return None
    return [line.strip() for line in text.splitlines() if line.strip()]


def read_key_values(host: HostRoot,
                    host_path: str) -> dict[str, str] | None:
    """``KEY=VALUE`` lines (a ``uevent`` file) as a dict."""
    lines = read_lines(host, host_path)
    if lines is None:
        return None
    return dict(line.split('=', 1) for line in lines if '=' in line)


def read_link(host: HostRoot, host_path: str) -> str | None:
    """The real path a symbolic link leads to, ``None`` if no such link.

    The target is resolved inside the root; a link out of it raises
    :class:`~.errors.OutsideRootError`.
    """
    head, name = os.path.split(host_path.rstrip('/'))
    if not os.path.islink(os.path.join(host.resolve(head), name)):
        return None
    return host.resolve(host_path)


def link_name(host: HostRoot, host_path: str) -> str | None:
    """The last component of a link's target (a ``driver`` link's
    driver name), ``None`` if no such link."""
    target = read_link(host, host_path)
    return None if target is None else os.path.basename(target)


def list_dir(host: HostRoot, host_path: str) -> list[str]:
    """Sorted entries of a directory; ``[]`` when it does not exist."""
    try:
        return sorted(host.listdir(host_path))
    except (FileNotFoundError, NotADirectoryError):
        return []


def write_text(host: HostRoot, host_path: str, value: str) -> None:
    """Write ``value`` to an existing attribute, as ``echo value >`` does.

    The file is never created; the kernel's answer (``EBUSY``,
    ``ERANGE``...) is raised as :class:`~.errors.SysfsWriteError`.
    """
    real = host.resolve(host_path)
    try:
        fd = os.open(real, os.O_WRONLY | os.O_TRUNC)
    except OSError as exc:
        raise errors.SysfsWriteError(host_path, value, exc.errno,
                                     exc.strerror or str(exc))
    try:
        os.write(fd, value.encode())
    except OSError as exc:
        raise errors.SysfsWriteError(host_path, value, exc.errno,
                                     exc.strerror or str(exc))
    finally:
        os.close(fd)


