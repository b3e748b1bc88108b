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
from typing import Any

from oslo_log import log as logging
import oslo_messaging as messaging

from cyborg.accelerator.drivers import base
from cyborg.agent import bitstream_cache
from cyborg.common import constants
from cyborg.common import exception
from cyborg.conductor import rpcapi as conductor_rpcapi
from cyborg import context as cyborg_context
from cyborg.domain import device_tree

LOG = logging.getLogger(__name__)


def _attach_info_text(attach_info: dict[str, Any]) -> str:
    """``key=value`` pairs of an attach handle's info, for a log line."""
    return ' '.join('%s=%s' % item for item in sorted(attach_info.items()))


class AgentManager:
    """Handles agent RPC requests; heartbeats through the conductor."""

    target = messaging.Target(version=constants.AGENT_RPC_API_VERSION)

    def __init__(self, host: str,
                 conductor_api: conductor_rpcapi.ConductorAPI,
                 drivers: list[base.AcceleratorDriver] = (),
                 images: Callable[[], 'ImageSource'] | None = None,
                 report: Callable[[Any], Any] | None = None):
        """``images`` builds (once, on the first :meth:`program_image`)
        the source of the bitstreams to program; ``report`` discovers
        and reports this host's devices (after programming)."""
        self.host = host
        self._conductor = conductor_api
        self._drivers = {driver.name: driver for driver in drivers}
        self._images_factory = images
        self._images: ImageSource | None = None
        self._report = report

    def heartbeat(self) -> None:
        """Tell the conductor this agent is alive."""
        self._conductor.service_heartbeat(
            cyborg_context.get_admin_context(), self.host,
            constants.BINARY_AGENT)

    def ping(self, context) -> str:
        """Answer a liveness probe from the conductor."""
        return self.host

    def _driver(self, name: str | None) -> base.AcceleratorDriver:
        driver = self._drivers.get(name or '')
        if driver is None:
            raise exception.Invalid(reason='driver %r is not enabled on %s'
                                    % (name, self.host))
        return driver

    @messaging.expected_exceptions(exception.CyborgException)
    def prepare_attach_handle(self, context, driver: str | None,
                              attach_type: str, attach_info: dict[str, Any],
                              handle_uuid: str) -> None:
        self._driver(driver).prepare_attach_handle(
            device_tree.AttachHandle(attach_type, attach_info), handle_uuid)
        LOG.info('Prepared attach handle %s (%s %s, driver %s)', handle_uuid,
                 attach_type, _attach_info_text(attach_info), driver)

    @messaging.expected_exceptions(exception.CyborgException)
    def program(self, context, driver: str | None,
                controlpath: dict[str, Any] | None, image_path: str) -> None:
        """Program an image through a device's control path (API 1.1)."""
        if not controlpath:
            raise exception.ProgramFailed(reason='no control path to program '
                                          'through')
        try:
            self._driver(driver).program(
                device_tree.ControlPathID(controlpath['cpid_type'],
                                          controlpath['cpid_info']),
                image_path)
        except NotImplementedError as e:
            raise exception.ProgramFailed(reason=str(e))

    @messaging.expected_exceptions(exception.CyborgException)
    def release_attach_handle(self, context, driver: str | None,
                              attach_type: str, attach_info: dict[str, Any],
                              handle_uuid: str) -> None:
        self._driver(driver).release_attach_handle(
            device_tree.AttachHandle(attach_type, attach_info), handle_uuid)
        LOG.info('Released attach handle %s (%s %s, driver %s)', handle_uuid,
                 attach_type, _attach_info_text(attach_info), driver)

    @messaging.expected_exceptions(exception.CyborgException)
    def program_image(self, context, driver: str | None,
                      controlpath: dict[str, Any] | None,
                      image: dict[str, Any]) -> str | None:
        """Fetch the Glance image ``image`` (``id``, ``os_hash_algo``,
        ``os_hash_value``) through the bitstream cache, verified against
        that hash, program it through a device's control path, then
        discover and report this host's devices so that the new function
        shows (API 1.2). The function id the driver says the device runs,
        if it says; a driver that reports failure (False) raises
        ProgramFailed."""
        if not controlpath:
            raise exception.DeployableNotProgrammable(
                uuid=image.get('deployable', '?'),
                reason='it has no control path to program through')
        target = self._driver(driver)
        cpid = device_tree.ControlPathID(controlpath['cpid_type'],
                                         controlpath['cpid_info'])
        source = self._image_source()
        image_id = image['id']
        with source.cache.use(image_id, image['os_hash_algo'],
                              image['os_hash_value'],
                              lambda dest: source.glance.download(
                                  image_id, dest)) as path:
            try:
                result = target.program(cpid, path)
            except NotImplementedError as e:
                raise exception.DeployableNotProgrammable(
                    uuid=image.get('deployable', '?'), reason=str(e))
        if result is False:
            raise exception.ProgramFailed(
                reason='driver %s reported that programming image %s '
                       'failed' % (driver, image_id))
        LOG.info('Programmed bitstream image %s through %s (driver %s)',
                 image_id, controlpath['cpid_info'], driver)
        self._report_after_programming(context)
        return result if isinstance(result, str) else None

    def _image_source(self) -> 'ImageSource':
        if self._images is None:
            if self._images_factory is None:
                raise exception.NoBitstreamSource()
            self._images = self._images_factory()
        return self._images

    def _report_after_programming(self, context) -> None:
        if self._report is None:
            return
        try:
            self._report(cyborg_context.get_admin_context())
        except Exception as e:
            LOG.warning('Reporting the devices of %s after programming '
                        'failed (%s); the next discovery reports them',
                        self.host, e)


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
