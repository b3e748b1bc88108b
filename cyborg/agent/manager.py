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

"""The agent's RPC endpoint on one compute host."""

from collections.abc import Callable
from collections.abc import Sequence
from typing import Any

from oslo_log import log as logging
import oslo_messaging as messaging

from cyborg import context as cyborg_context
from cyborg.accelerator.drivers import base
from cyborg.accelerator.drivers import errors
from cyborg.agent import bitstream_cache
from cyborg.agent import driver_calls
from cyborg.common import constants
from cyborg.common import exception
from cyborg.conductor import rpcapi as conductor_rpcapi
from cyborg.domain import device_tree

LOG = logging.getLogger(__name__)

#: What an agent RPC ends in as its expected failure, answered to the
#: conductor without a traceback in the agent's log: a failure a driver
#: reports (:class:`~cyborg.accelerator.drivers.errors.DriverError`) or
#: a request the agent refuses itself. Any other exception is a bug,
#: which oslo.messaging logs with its traceback as unexpected.
EXPECTED = (errors.DriverError, exception.CyborgException)


def _attach_info_text(attach_info: dict[str, Any]) -> str:
    """``key=value`` pairs of an attach handle's info, for a log line."""
    return ' '.join('%s=%s' % item for item in sorted(attach_info.items()))


class AgentManager:
    """Handles agent RPC requests; heartbeats through the conductor."""

    target = messaging.Target(version=constants.AGENT_RPC_API_VERSION)

    def __init__(self, host: str,
                 conductor_api: conductor_rpcapi.ConductorAPI,
                 drivers: Sequence[base.AcceleratorDriver] = (),
                 images: Callable[[], 'ImageSource'] | None = None,
                 report: Callable[[Any], Any] | None = None,
                 locks: driver_calls.DriverLocks | None = None,
                 preparations: driver_calls.Preparations | None = None,
                 restored: Callable[[], bool] | None = None):
        """``images`` builds (once, on the first :meth:`program_image`)
        the source of the bitstreams to program; ``report`` discovers
        and reports this host's devices (after programming); ``locks``
        serialize the calls of drivers that declare it (shared with the
        discovery); ``preparations``: what the drivers declared in the
        last report, for a conductor that does not send it (API 1.0);
        ``restored`` waits (boundedly) until the restore at start is done
        (see :mod:`cyborg.agent.restore`): calls on handles and
        programmings wait for it."""
        self.host = host
        self._conductor = conductor_api
        self._drivers = {driver.name: driver for driver in drivers}
        self._images_factory = images
        self._images: ImageSource | None = None
        self._report = report
        self._locks = locks or driver_calls.DriverLocks()
        self._preparations = preparations or driver_calls.Preparations()
        self._restored = restored

    def heartbeat(self) -> None:
        """Tell the conductor this agent is alive."""
        self._conductor.service_heartbeat(
            cyborg_context.get_admin_context(), self.host,
            constants.BINARY_AGENT)

    def _driver(self, name: str | None) -> base.AcceleratorDriver:
        driver = self._drivers.get(name or '')
        if driver is None:
            raise exception.Invalid(reason='driver %r is not enabled on %s'
                                    % (name, self.host))
        return driver

    def _handle(self, driver: str | None, attach_type: str,
                attach_info: dict[str, Any], preparation: str | None
                ) -> tuple[device_tree.AttachHandle, device_tree.Preparation]:
        """The handle a conductor names and its deployable's preparation:
        the one the conductor sent (API 1.3), else the one the driver
        declared in this host's last report (see
        :class:`~cyborg.agent.driver_calls.Preparations`).
        """
        try:
            handle = device_tree.AttachHandle(
                device_tree.AttachType(attach_type), attach_info)
            declared = (device_tree.Preparation(preparation)
                        if preparation is not None else
                        self._preparations.of(driver, handle))
        except ValueError as e:
            raise exception.Invalid(reason=str(e))
        return handle, declared

    def _on_handle(self, call: str, driver: str | None, attach_type: str,
                   attach_info: dict[str, Any], handle_uuid: str,
                   preparation: str | None) -> device_tree.Preparation:
        """Have ``driver`` run ``call`` (``prepare_attach_handle`` or
        ``release_attach_handle``) on the handle, under the driver's lock
        where it declares one; the preparation it was told."""
        handle, declared = self._handle(driver, attach_type, attach_info,
                                        preparation)
        target = self._driver(driver)
        self._wait_restored()
        with self._locks.held(target):
            getattr(target, call)(handle, handle_uuid, declared)
        return declared

    @messaging.expected_exceptions(*EXPECTED)
    def prepare_attach_handle(self, context, driver: str | None,
                              attach_type: str, attach_info: dict[str, Any],
                              handle_uuid: str,
                              preparation: str | None = None) -> None:
        """Have the driver make a handle attachable (API 1.0; 1.3 with
        ``preparation``). A :class:`~errors.DriverError` is the call's
        expected failure; any other exception of the driver a bug."""
        declared = self._on_handle('prepare_attach_handle', driver,
                                   attach_type, attach_info, handle_uuid,
                                   preparation)
        LOG.info('Prepared attach handle %s (%s %s, preparation %s, driver '
                 '%s)', handle_uuid, attach_type,
                 _attach_info_text(attach_info), declared.value, driver)

    @messaging.expected_exceptions(*EXPECTED)
    def release_attach_handle(self, context, driver: str | None,
                              attach_type: str, attach_info: dict[str, Any],
                              handle_uuid: str,
                              preparation: str | None = None) -> None:
        """Undo :meth:`prepare_attach_handle` (API 1.0; 1.3 with
        ``preparation``)."""
        declared = self._on_handle('release_attach_handle', driver,
                                   attach_type, attach_info, handle_uuid,
                                   preparation)
        LOG.info('Released attach handle %s (%s %s, preparation %s, driver '
                 '%s)', handle_uuid, attach_type,
                 _attach_info_text(attach_info), declared.value, driver)

    @messaging.expected_exceptions(*EXPECTED)
    def program_image(self, context, driver: str | None,
                      controlpath: dict[str, Any] | None,
                      image: dict[str, Any]) -> str | None:
        """Fetch the Glance image ``image`` (``id``, ``os_hash_algo``,
        ``os_hash_value``) through the bitstream cache, verified against
        that hash, program it through a device's control path, then
        discover and report this host's devices so that the new function
        shows (API 1.2). The function id the driver says the device runs,
        if it says; the driver's :class:`~errors.ProgramFailed` (or any
        :class:`~errors.DriverError`) is the call's expected failure."""
        if not controlpath:
            raise exception.DeployableNotProgrammable(
                uuid=image.get('deployable', '?'),
                reason='it has no control path to program through')
        target = self._driver(driver)
        self._wait_restored()
        cpid = device_tree.ControlPathID(controlpath['cpid_type'],
                                         controlpath['cpid_info'])
        source = self._image_source()
        image_id = image['id']
        with source.cache.use(image_id, image['os_hash_algo'],
                              image['os_hash_value'],
                              lambda dest: source.glance.download(
                                  image_id, dest)) as path:
            try:
                with self._locks.held(target):
                    function = target.program(cpid, path)
            except NotImplementedError as e:
                raise exception.DeployableNotProgrammable(
                    uuid=image.get('deployable', '?'), reason=str(e))
        LOG.info('Programmed bitstream image %s through %s (driver %s)',
                 image_id, controlpath['cpid_info'], driver)
        self._report_after('programming')
        return function

    @messaging.expected_exceptions(*EXPECTED)
    def set_partitions(self, context, driver: str | None, address: str,
                       profile: str | None, pinned: bool) -> None:
        """Have the driver serve partition ``profile`` on the device at
        ``address``, pinned or not (API 1.4), then report this host's
        devices so that the new profile shows. The driver's refusal
        answers as the conflict (409) or the invalid request (400) it
        is."""
        target = self._driver(driver)
        try:
            with self._locks.held(target):
                target.set_partitions(address, profile, pinned)
        except errors.PartitionProfileUnknown as e:
            raise exception.Invalid(reason=str(e))
        except errors.PartitionRefused as e:
            raise exception.Conflict(reason=str(e))
        LOG.info('Device %s (driver %s) serves partition profile %s, '
                 'pinned: %s', address, driver,
                 profile or "of the driver's policy", pinned)
        self._report_after('setting a partition profile')

    def _wait_restored(self) -> None:
        if self._restored is not None and not self._restored():
            LOG.warning('The restore of the prepared attach handles of %s '
                        'is not done; going ahead without it', self.host)

    def _image_source(self) -> 'ImageSource':
        if self._images is None:
            if self._images_factory is None:
                raise exception.NoBitstreamSource()
            self._images = self._images_factory()
        return self._images

    def _report_after(self, what: str) -> None:
        if self._report is None:
            return
        try:
            self._report(cyborg_context.get_admin_context())
        except Exception as e:
            LOG.warning('Reporting the devices of %s after %s failed '
                        '(%s); the next discovery reports them',
                        self.host, what, e)


class ImageSource:
    """Where the agent gets bitstreams: Glance through its cache."""

    def __init__(self, cache, glance):
        self.cache = cache
        self.glance = glance

    @classmethod
    def from_conf(cls, conf, glance_factory: Callable[[], Any] | None
                  ) -> 'ImageSource':
        """The ``[agent] bitstream_cache_*`` cache in front of the Glance
        client ``glance_factory`` builds (the ``[glance]`` one: see
        :mod:`cyborg.cmd.agent`); NoBitstreamSource without one."""
        if glance_factory is None:
            raise exception.NoBitstreamSource()
        return cls(bitstream_cache.BitstreamCache.from_conf(conf),
                   glance_factory())
