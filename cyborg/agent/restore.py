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

"""The agent's restore of its host's prepared handles at start.

A host reboot makes the kernel forget what the agent prepared. Before
its first report after a start, the agent asks the conductor for the
host's prepared handles (conductor RPC API 1.9, see
:mod:`cyborg.domain.restore`) and, through their drivers (see
:mod:`cyborg.accelerator.drivers.base`):

* prepares again each handle of a Bound ARQ its driver does not say is
  prepared; a region programmed at bind whose deployable no longer
  shows its recorded function is programmed again with its image first;
* releases each handle no ARQ holds that its driver says is prepared
  (an mdev a persistent definition brought back);
* tells the conductor what it did: each handle it could not restore,
  with the reason, becomes its ARQ's bind error, and the handle's device
  gets the health signal ``restore.failed`` in the next report (a taint
  through the remediation catalog).

RPC calls on handles wait until the restore is done (at most
:data:`WAIT_SECONDS`), so that a handle prepared by a new bind is never
taken for one no ARQ holds.
"""

from collections.abc import Callable
from collections.abc import Sequence
import threading
from typing import Any

from oslo_log import log as logging
import oslo_messaging as messaging

from cyborg.accelerator.drivers import base
from cyborg.accelerator.drivers import errors
from cyborg.agent import driver_calls
from cyborg.common import exception
from cyborg.domain import device_tree
from cyborg.domain import remediation
from cyborg.domain import restore

LOG = logging.getLogger(__name__)

#: Seconds an RPC call on a handle waits for the restore to finish
#: before it goes ahead anyway (a conductor that never answers).
WAIT_SECONDS = 60


class Restorer:
    """Restores a host's prepared handles once, before its first report.

    ``images`` builds the source of bitstreams (see
    :class:`cyborg.agent.manager.ImageSource`) for a region to program
    again; None: such a region cannot be restored.
    """

    def __init__(self, host: str, conductor_api,
                 drivers: Sequence[base.AcceleratorDriver],
                 locks: driver_calls.DriverLocks,
                 images: Callable[[], Any] | None = None):
        self.host = host
        self._conductor = conductor_api
        self._drivers = {driver.name: driver for driver in drivers}
        self._locks = locks
        self._images_factory = images
        self._images = None
        self._done = threading.Event()
        # (driver, device address) -> signals for the next discovery.
        self._signals: dict[tuple[str, str], list[remediation.Signal]] = {}
        self._signals_lock = threading.Lock()

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float = WAIT_SECONDS) -> bool:
        """Wait until the restore is done; whether it is."""
        return self._done.wait(timeout)

    def signals(self, driver: str) -> dict[str, list[remediation.Signal]]:
        """The health signals of ``driver``'s devices whose handles the
        restore could not restore, by device address; given once."""
        with self._signals_lock:
            found = {address: signals for (name, address), signals
                     in self._signals.items() if name == driver}
            for address in found:
                del self._signals[(driver, address)]
        return found

    def run(self, context) -> bool:
        """Restore the host's prepared handles unless done already;
        False when the conductor did not answer (the caller tries again
        before reporting)."""
        if self.done:
            return True
        try:
            wires = self._conductor.prepared_handles(context, self.host)
        except messaging.MessagingTimeout:
            LOG.warning('The conductor did not answer which attach handles '
                        'of %s to restore; asking again before the first '
                        'report', self.host)
            return False
        except Exception as exc:
            # A conductor that cannot serve the call (older than RPC 1.9
            # without the cap set, a database error): the reports must not
            # wait for it forever.
            LOG.error('The conductor could not say which attach handles of '
                      '%s to restore (%s); they are not restored', self.host,
                      exc)
            self._done.set()
            return True
        if wires is None:
            LOG.info('The conductor is capped below RPC 1.9; the prepared '
                     'attach handles of %s are not restored', self.host)
            self._done.set()
            return True
        outcome = self._apply(self._parse(wires))
        if outcome.restored or outcome.failed or outcome.released:
            try:
                self._conductor.handles_restored(context, self.host,
                                                 outcome.to_wire())
            except messaging.MessagingTimeout:
                LOG.warning('The conductor did not answer what the agent '
                            'of %s restored; restoring again before the '
                            'first report', self.host)
                return False
            except Exception as exc:
                LOG.error('The conductor could not record what the agent of '
                          '%s restored (%s)', self.host, exc)
        self._done.set()
        return True

    @staticmethod
    def _parse(wires: list[dict[str, Any]]) -> list[restore.PreparedHandle]:
        handles = []
        for wire in wires:
            try:
                handles.append(restore.PreparedHandle.from_wire(wire))
            except ValueError as exc:
                LOG.error('Ignoring a prepared attach handle the conductor '
                          'sent: %s', exc)
        return handles

    def _apply(self, handles: list[restore.PreparedHandle]
               ) -> restore.Outcome:
        outcome = restore.Outcome()
        discovered: dict[str, list[device_tree.Device]] = {}
        for handle in handles:
            if handle.action == restore.Action.RESTORE:
                self._restore(handle, outcome, discovered)
            elif handle.action == restore.Action.REMOVE:
                self._remove(handle, outcome)
        for handle in handles:
            reason = outcome.failed.get(handle.uuid)
            if reason is not None and handle.driver:
                with self._signals_lock:
                    self._signals.setdefault(
                        (handle.driver, handle.device_address), []).append(
                            remediation.Signal(restore.RESTORE_FAILED,
                                               reason))
        return outcome

    def _restore(self, prepared: restore.PreparedHandle,
                 outcome: restore.Outcome,
                 discovered: dict[str, list[device_tree.Device]]) -> None:
        try:
            driver = self._driver(prepared)
            handle, preparation = _typed(prepared)
            with self._locks.held(driver):
                if prepared.function_trait is not None:
                    self._reprogram(driver, prepared, handle, discovered)
                if driver.is_prepared(handle, prepared.uuid,
                                      preparation) is not True:
                    driver.restore_attach_handle(handle, prepared.uuid,
                                                 preparation)
        except (errors.DriverError, exception.CyborgException,
                NotImplementedError) as exc:
            outcome.failed[prepared.uuid] = str(exc)
            LOG.error('Could not restore attach handle %s of ARQ %s '
                      '(preparation %s, driver %s): %s', prepared.uuid,
                      prepared.arq_uuid, prepared.preparation,
                      prepared.driver, exc)
            return
        except Exception as exc:
            # A bug in the driver: reported like a failure all the same, so
            # the ARQ is never left looking restored.
            LOG.exception('Driver %s failed unexpectedly restoring attach '
                          'handle %s', prepared.driver, prepared.uuid)
            outcome.failed[prepared.uuid] = 'unexpected error: %s' % exc
            return
        outcome.restored.append(prepared.uuid)
        LOG.info('Restored attach handle %s of ARQ %s (preparation %s, '
                 'driver %s)', prepared.uuid, prepared.arq_uuid,
                 prepared.preparation, prepared.driver)

    def _remove(self, prepared: restore.PreparedHandle,
                outcome: restore.Outcome) -> None:
        driver = self._drivers.get(prepared.driver or '')
        if driver is None:
            return
        try:
            handle, preparation = _typed(prepared)
            with self._locks.held(driver):
                if driver.is_prepared(handle, prepared.uuid,
                                      preparation) is not True:
                    return
                driver.release_attach_handle(handle, prepared.uuid,
                                             preparation)
        except (errors.DriverError, exception.CyborgException) as exc:
            LOG.warning('Could not release attach handle %s, which no ARQ '
                        'holds: %s', prepared.uuid, exc)
            return
        outcome.released.append(prepared.uuid)
        LOG.info('Released attach handle %s, prepared but held by no ARQ '
                 '(preparation %s, driver %s)', prepared.uuid,
                 prepared.preparation, prepared.driver)

    def _driver(self, prepared: restore.PreparedHandle
                ) -> base.AcceleratorDriver:
        driver = self._drivers.get(prepared.driver or '')
        if driver is None:
            raise exception.Invalid(reason='driver %r is not enabled on %s'
                                    % (prepared.driver, self.host))
        return driver

    def _reprogram(self, driver: base.AcceleratorDriver,
                   prepared: restore.PreparedHandle,
                   handle: device_tree.AttachHandle,
                   discovered: dict[str, list[device_tree.Device]]) -> None:
        """Program the handle's region again with its image unless its
        deployable still shows the recorded function trait."""
        if driver.name not in discovered:
            discovered[driver.name] = driver.discover()
        if prepared.function_trait in _traits_of(discovered[driver.name],
                                                 handle):
            return
        if prepared.image is None or prepared.controlpath is None:
            raise errors.PrepareFailed(
                reason='the region lost its bitstream and cannot be '
                'programmed again: %s' % (prepared.image_error
                                          or 'no image is recorded'))
        source = self._image_source()
        image = prepared.image
        cpid = device_tree.ControlPathID(prepared.controlpath['cpid_type'],
                                         prepared.controlpath['cpid_info'])
        with source.cache.use(image['id'], image['os_hash_algo'],
                              image['os_hash_value'],
                              lambda dest: source.glance.download(
                                  image['id'], dest)) as path:
            driver.program(cpid, path)
        # What the region shows now: another handle of it is not
        # programmed twice.
        discovered[driver.name] = driver.discover()
        LOG.info('Programmed bitstream image %s again through %s (driver '
                 '%s): its region lost it', image['id'],
                 prepared.controlpath['cpid_info'], driver.name)

    def _image_source(self):
        if self._images is None:
            if self._images_factory is None:
                raise exception.NoBitstreamSource()
            self._images = self._images_factory()
        return self._images


def _typed(prepared: restore.PreparedHandle
           ) -> tuple[device_tree.AttachHandle, device_tree.Preparation]:
    try:
        return (device_tree.AttachHandle(
            device_tree.AttachType(prepared.attach_type),
            prepared.attach_info),
            device_tree.Preparation(prepared.preparation))
    except ValueError as exc:
        raise exception.Invalid(reason=str(exc))


def _traits_of(devices: list[device_tree.Device],
               handle: device_tree.AttachHandle) -> set[str]:
    """The traits of the deployable whose attach handles include
    ``handle`` (none when no deployable has it)."""
    for device in devices:
        for deployable in driver_calls.walk(device.deployables):
            if any(h.attach_type == handle.attach_type
                   and h.attach_info == handle.attach_info
                   for h in deployable.attach_handles):
                return set(deployable.traits)
    return set()
