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

from typing import Any

from oslo_log import log as logging
import oslo_messaging as messaging

from cyborg.accelerator.drivers import base
from cyborg.common import constants
from cyborg.common import exception
from cyborg.conductor import rpcapi as conductor_rpcapi
from cyborg import context as cyborg_context
from cyborg.domain import device_tree

LOG = logging.getLogger(__name__)


class AgentManager:
    """Handles agent RPC requests; heartbeats through the conductor."""

    target = messaging.Target(version=constants.AGENT_RPC_API_VERSION)

    def __init__(self, host: str,
                 conductor_api: conductor_rpcapi.ConductorAPI,
                 drivers: list[base.AcceleratorDriver] = ()):
        self.host = host
        self._conductor = conductor_api
        self._drivers = {driver.name: driver for driver in drivers}

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
