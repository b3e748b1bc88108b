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

"""What the agent keeps about its drivers between calls.

:class:`DriverLocks` enforces the concurrency rules of
:mod:`cyborg.accelerator.drivers.base` for drivers that declare
:attr:`~cyborg.accelerator.drivers.base.AcceleratorDriver.serialized`;
:class:`Preparations` remembers what each driver declared in the last
report, for conductors that do not send it with a handle (agent RPC API
below 1.3).
"""

from collections.abc import Iterator
import contextlib
import threading

from cyborg.accelerator.drivers import base
from cyborg.domain import device_tree


class DriverLocks:
    """One lock per driver that declares its calls serialized; the
    agent's RPC endpoint and its discovery share one instance."""

    def __init__(self) -> None:
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    @contextlib.contextmanager
    def held(self, driver: base.AcceleratorDriver) -> Iterator[None]:
        """Hold ``driver``'s lock (if it declares one) around a call."""
        if not driver.serialized:
            yield
            return
        with self._guard:
            lock = self._locks.setdefault(driver.name, threading.Lock())
        with lock:
            yield


def _key(driver: str | None, handle: device_tree.AttachHandle
         ) -> tuple[str, str, str]:
    return (driver or '', device_tree.AttachType(handle.attach_type).value,
            device_tree.canonical_json(handle.attach_info))


class Preparations:
    """The preparation each driver declared for the deployable of each
    attach handle, as of the last discovery."""

    def __init__(self) -> None:
        self._declared: dict[tuple[str, str, str],
                             device_tree.Preparation] = {}
        self._lock = threading.Lock()

    def remember(self, driver: str | None,
                 devices: list[device_tree.Device]) -> None:
        """Replace what ``driver`` declared with ``devices``' handles."""
        declared = {}
        for device in devices:
            for deployable in walk(device.deployables):
                preparation = deployable.declared_preparation()
                for handle in deployable.attach_handles:
                    declared[_key(driver, handle)] = preparation
        with self._lock:
            self._declared = {key: value for key, value
                              in self._declared.items()
                              if key[0] != (driver or '')}
            self._declared.update(declared)

    def of(self, driver: str | None, handle: device_tree.AttachHandle
           ) -> device_tree.Preparation:
        """What ``driver`` declared for ``handle``'s deployable; for a
        handle not reported (yet), the default of its attach type."""
        with self._lock:
            declared = self._declared.get(_key(driver, handle))
        if declared is not None:
            return declared
        return device_tree.default_preparation([handle.attach_type])


def walk(deployables: list[device_tree.Deployable]
         ) -> Iterator[device_tree.Deployable]:
    """Each deployable of ``deployables`` and of their children."""
    for deployable in deployables:
        yield deployable
        yield from walk(deployable.children)
