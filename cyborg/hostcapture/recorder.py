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
# under the License.

"""The host root and command runner that record what drivers read.

A :class:`RecordingHostRoot` is a :class:`~sysfs.HostRoot` that keeps
the real path of every host path resolved through it (every read,
listing and existence check of the sysfs helpers resolves its path
first), of every directory listed and of every symbolic link followed
on the way. A
:class:`RecordingRunner` runs commands through another runner and keeps
each distinct command line with its first answer: exit status and
output, a command that is not installed, or one that timed out.
"""

from __future__ import annotations

from collections.abc import Sequence
import dataclasses

from cyborg.accelerator.drivers.utils import errors
from cyborg.accelerator.drivers.utils import runner as runner_mod
from cyborg.accelerator.drivers.utils import sysfs


class RecordingHostRoot(sysfs.HostRoot):
    """A host root that remembers the real paths it resolved."""

    def __init__(self, root: str = '/') -> None:
        super().__init__(root)
        self.paths: set[str] = set()
        self.links: set[str] = set()
        self.listed: set[str] = set()

    def resolve(self, path: str) -> str:
        real = super().resolve(path)
        self.paths.add(real)
        return real

    def listdir(self, path: str) -> list[str]:
        self.listed.add(self.resolve(path))
        return super().listdir(path)

    def _followed(self, link: str) -> None:
        self.links.add(link)


@dataclasses.dataclass(frozen=True)
class Call:
    """A command line and what it answered.

    ``missing``: the command is not installed; ``timeout``: it ran
    longer than that many seconds and was killed (``stdout`` and
    ``stderr`` are what it wrote until then); otherwise it exited with
    ``rc``.
    """

    argv: tuple[str, ...]
    rc: int = 0
    stdout: str = ''
    stderr: str = ''
    missing: bool = False
    timeout: float | None = None

    def to_json(self) -> dict:
        data: dict = {'argv': list(self.argv)}
        if self.missing:
            data['missing'] = True
            return data
        if self.timeout is not None:
            data['timeout'] = self.timeout
        else:
            data['rc'] = self.rc
        data.update(stdout=self.stdout, stderr=self.stderr)
        return data

    @classmethod
    def from_json(cls, data: dict) -> Call:
        return cls(tuple(data['argv']), rc=data.get('rc', 0),
                   stdout=data.get('stdout', ''),
                   stderr=data.get('stderr', ''),
                   missing=bool(data.get('missing', False)),
                   timeout=data.get('timeout'))


class RecordingRunner:
    """Runs commands through ``runner`` and records each command line's
    first answer in :attr:`calls`."""

    def __init__(self, runner: runner_mod.Runner) -> None:
        self._runner = runner
        self.calls: dict[tuple[str, ...], Call] = {}

    def run(self, argv: Sequence[str],
            timeout: float = runner_mod.DEFAULT_TIMEOUT
            ) -> runner_mod.CommandResult:
        key = tuple(argv)
        try:
            result = self._runner.run(argv, timeout=timeout)
        except errors.ToolNotAvailable:
            self.calls.setdefault(key, Call(key, missing=True))
            raise
        except errors.ToolTimeout as exc:
            self.calls.setdefault(key, Call(key, stdout=exc.stdout,
                                            stderr=exc.stderr,
                                            timeout=timeout))
            raise
        self.calls.setdefault(key, Call(key, result.returncode,
                                        result.stdout, result.stderr))
        return result
