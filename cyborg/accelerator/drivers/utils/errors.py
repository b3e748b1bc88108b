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

"""Exceptions of the driver helpers.

Helpers raise these rather than log: the driver that calls them decides
whether a device is skipped, reported unhealthy or fails its discovery.
"""


class HostError(Exception):
    """Base class of every helper error."""


class OutsideRootError(HostError):
    """A path or symbolic link leads out of the host root."""

    def __init__(self, path: str, root: str) -> None:
        self.path = path
        self.root = root
        super().__init__('%s leads out of the host root %s' % (path, root))


class SysfsValueError(HostError):
    """A file holds text that is not what its kernel ABI promises."""

    def __init__(self, path: str, text: str, reason: str) -> None:
        self.path = path
        self.text = text
        super().__init__('%s: %r: %s' % (path, text, reason))


class SysfsReadError(HostError):
    """A file exists but cannot be read (e.g. ``EBUSY`` from ``afu_id``)."""

    def __init__(self, path: str, errno: int | None, reason: str) -> None:
        self.path = path
        self.errno = errno
        super().__init__('reading %s failed: %s' % (path, reason))


class LinkLoopError(HostError):
    """Too many symbolic links while resolving a path."""

    def __init__(self, path: str) -> None:
        self.path = path
        super().__init__('too many symbolic links in %s' % path)


class SysfsWriteError(HostError):
    """A write to a kernel attribute failed; ``errno`` says why."""

    def __init__(self, path: str, value: str, errno: int | None,
                 reason: str) -> None:
        self.path = path
        self.value = value
        self.errno = errno
        super().__init__('writing %r to %s failed: %s' % (value, path,
                                                          reason))


class InvalidPCIAddress(HostError, ValueError):
    """Text that is not a PCI address this project accepts."""

    def __init__(self, text: str, reason: str = 'not a PCI address') -> None:
        self.text = text
        super().__init__('%r: %s' % (text, reason))


class DeviceNotFound(HostError):
    """No such PCI device (or mdev) under the host root."""

    def __init__(self, what: str) -> None:
        self.what = what
        super().__init__('%s not found' % what)


class SriovError(HostError):
    """SR-IOV cannot be configured as asked on this PF."""

    def __init__(self, pf: str, reason: str) -> None:
        self.pf = pf
        self.reason = reason
        super().__init__('%s: %s' % (pf, reason))


class MdevTypeNotFound(HostError):
    """The parent device offers no such mdev type."""

    def __init__(self, parent: str, type_id: str) -> None:
        self.parent = parent
        self.type_id = type_id
        super().__init__('%s has no mdev type %s' % (parent, type_id))


class MdevUnavailable(HostError):
    """The mdev type has no available instance left on its parent."""

    def __init__(self, parent: str, type_id: str) -> None:
        self.parent = parent
        self.type_id = type_id
        super().__init__('%s: no available instance of %s' % (parent,
                                                              type_id))


class ToolError(HostError):
    """Base class of the errors of running a vendor command."""

    def __init__(self, argv: list[str], message: str) -> None:
        self.argv = list(argv)
        super().__init__('%s: %s' % (' '.join(self.argv), message))


class ToolNotAvailable(ToolError):
    """The command is not installed (or cannot be executed)."""

    def __init__(self, argv: list[str], reason: str = 'not found') -> None:
        super().__init__(argv, reason)


class ToolTimeout(ToolError):
    """The command ran longer than its timeout and was killed."""

    def __init__(self, argv: list[str], timeout: float, stdout: str,
                 stderr: str) -> None:
        self.timeout = timeout
        self.stdout = stdout
        self.stderr = stderr
        super().__init__(argv, 'timed out after %ss' % timeout)


class ToolFailed(ToolError):
    """The command exited with a non-zero status (raised by ``check``)."""

    def __init__(self, argv: list[str], returncode: int, stderr: str) -> None:
        self.returncode = returncode
        self.stderr = stderr
        super().__init__(argv, 'exit status %d: %s' % (returncode,
                                                       stderr.strip()))
