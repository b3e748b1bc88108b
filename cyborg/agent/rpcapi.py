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

"""Client side of the agent RPC API."""

from typing import Any

from cyborg.common import constants
from cyborg.common import rpc


class AgentAPI:
    """Calls the agent of one host. Version 1.0."""

    def __init__(self, transport, timeout: float | None = None):
        """``timeout``: seconds to wait for an answer (by default
        ``[DEFAULT] rpc_response_timeout``)."""
        self._client = rpc.get_client(transport, constants.AGENT_TOPIC)
        self._timeout = timeout

    def _handle_call(self, method: str, context, host: str,
                     driver: str | None, attach_type: str,
                     attach_info: dict[str, Any], handle_uuid: str) -> None:
        self._client.prepare(server=host, timeout=self._timeout).call(
            context, method, driver=driver, attach_type=attach_type,
            attach_info=attach_info, handle_uuid=handle_uuid)

    def prepare_attach_handle(self, context, host: str, driver: str | None,
                              attach_type: str, attach_info: dict[str, Any],
                              handle_uuid: str) -> None:
        self._handle_call('prepare_attach_handle', context, host, driver,
                          attach_type, attach_info, handle_uuid)

    def release_attach_handle(self, context, host: str, driver: str | None,
                              attach_type: str, attach_info: dict[str, Any],
                              handle_uuid: str) -> None:
        self._handle_call('release_attach_handle', context, host, driver,
                          attach_type, attach_info, handle_uuid)
