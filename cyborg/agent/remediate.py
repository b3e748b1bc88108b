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

"""The agent's side of remediation: health signals to taints, resets.

At every discovery the drivers' signals go through the
:class:`~cyborg.domain.remediation.Tracker`; each device gets its driver
taints and the binary ``health`` derived from them (unhealthy iff a
taint keeps allocations off). A device whose catalog entry says
``reset_device`` is reset through its driver once the conductor says no
accelerator request is bound on it.
"""

from __future__ import annotations

from collections.abc import Callable
import dataclasses
from typing import Any

from oslo_log import log as logging

from cyborg.accelerator.drivers import base
from cyborg.accelerator.drivers import errors
from cyborg.agent import driver_calls
from cyborg.domain import device_tree
from cyborg.domain import remediation
from cyborg.domain import taints as taints_mod

LOG = logging.getLogger(__name__)


@dataclasses.dataclass
class Reported:
    """One driver's part of a discovery."""

    driver: base.AcceleratorDriver
    devices: list[device_tree.Device]
    signals: dict[str, list[remediation.Signal]]


def _key(driver: str, address: str) -> tuple[str, str]:
    return (driver, address)


class Remediator:
    """Applies the remediation catalog to each discovery of one host."""

    def __init__(self, tracker: remediation.Tracker[tuple[str, str]],
                 locks: driver_calls.DriverLocks,
                 bound_devices: (Callable[[Any], list[str] | None]
                                 | None) = None,
                 reset_devices: bool = True) -> None:
        """``bound_devices(context)``: the addresses of the host's
        devices with an accelerator request bound (the conductor's
        answer); None: devices are never reset."""
        self.tracker = tracker
        self._locks = locks
        self._bound_devices = bound_devices
        self._reset_devices = reset_devices
        # The taints last applied, by device: to log changes only.
        self._applied: dict[tuple[str, str], dict[str, str]] = {}
        self._waiting: set[tuple[str, str]] = set()

    def apply(self, context, reported: list[Reported],
              failed: list[str]) -> None:
        """Advance the tracker by one report, reset what is due, and set
        every reported device's ``taints`` and ``health``. ``context``
        None (a discovery that is not sent): no reset."""
        signals = {_key(part.driver.name, device.address):
                   part.signals.get(device.address, [])
                   for part in reported for device in part.devices}
        self.tracker.observe(signals, keep=[
            key for key in self.tracker.devices() if key[0] in failed])
        if context is not None:
            self._reset_due(context, reported)
        for part in reported:
            for device in part.devices:
                key = _key(part.driver.name, device.address)
                device.taints = _merged(device.taints,
                                        self.tracker.taints(key))
                device.health = (
                    device_tree.Health.UNHEALTHY
                    if remediation.unhealthy(device.taints)
                    else device_tree.Health.HEALTHY)
                self._log_change(key, device.taints)
        for key in [k for k in self._applied if k not in signals
                    and k[0] not in failed]:
            del self._applied[key]

    def _reset_due(self, context, reported: list[Reported]) -> None:
        due = set(self.tracker.resets_due())
        if not due or not self._reset_devices:
            return
        bound = self._bound(context)
        if bound is None:
            return
        for part in reported:
            for device in part.devices:
                key = _key(part.driver.name, device.address)
                if key not in due:
                    continue
                if device.address in bound:
                    if key not in self._waiting:
                        LOG.info('Device %s (%s) waits for its accelerator '
                                 'requests to go before it is reset',
                                 device.address, part.driver.name)
                        self._waiting.add(key)
                    continue
                self._waiting.discard(key)
                self.tracker.reset_result(key, self._reset(part.driver,
                                                           device, key))

    def _bound(self, context) -> set[str] | None:
        if self._bound_devices is None:
            return None
        try:
            bound = self._bound_devices(context)
        except Exception as exc:
            LOG.warning('Cannot tell which devices of this host are bound '
                        '(%s); no device is reset now', exc)
            return None
        # None: a conductor older than the call; nothing can be reset.
        return None if bound is None else set(bound)

    def _reset(self, driver: base.AcceleratorDriver,
               device: device_tree.Device, key: tuple[str, str]
               ) -> remediation.ResetOutcome:
        LOG.info('Resetting device %s (%s): %s', device.address,
                 driver.name, ', '.join(self.tracker.active(key)))
        try:
            with self._locks.held(driver):
                driver.reset_device(device)
        except NotImplementedError as exc:
            LOG.warning('Device %s (%s) needs a reset its driver cannot '
                        'do (%s); its taint stays until the agent restarts',
                        device.address, driver.name, exc)
            return remediation.ResetOutcome.UNSUPPORTED
        except errors.ResetFailed as exc:
            LOG.error('Resetting device %s (%s) failed: %s',
                      device.address, driver.name, exc)
            return remediation.ResetOutcome.FAILED
        except Exception:
            LOG.exception('Resetting device %s (%s) failed',
                          device.address, driver.name)
            return remediation.ResetOutcome.FAILED
        LOG.info('Reset device %s (%s)', device.address, driver.name)
        return remediation.ResetOutcome.DONE

    def _log_change(self, key: tuple[str, str],
                    taints: list) -> None:
        now = {taint.key: '%s=%s:%s' % (taint.key, taint.value,
                                        taint.effect) for taint in taints}
        before = self._applied.get(key, {})
        for name, text in sorted(now.items()):
            if before.get(name) != text:
                reason = next(t.reason for t in taints if t.key == name)
                LOG.warning('Device %s (%s) tainted %s: %s', key[1], key[0],
                            text, reason)
        for name in sorted(set(before) - set(now)):
            LOG.info('Device %s (%s) no longer tainted %s', key[1], key[0],
                     name)
        if now:
            self._applied[key] = now
        else:
            self._applied.pop(key, None)


def _merged(declared: list[taints_mod.Taint],
            tracked: list[taints_mod.Taint]) -> list[taints_mod.Taint]:
    """The taints a driver declared on the device itself (a driver that
    judges its devices' taints on its own, e.g. the fake driver's
    devices file) and those of the catalog; the catalog's wins a key
    both have."""
    keys = {taint.key for taint in tracked}
    return [taint for taint in declared if taint.key not in keys] + tracked
