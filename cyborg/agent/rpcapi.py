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
from cyborg.conf import CONF


class AgentAPI:
    """Calls the agent of one host.

    API version history (an agent's endpoint serves every version up to
    :attr:`RPC_API_VERSION`; a method newer than :attr:`BASE_VERSION` is
    sent with its version, and only where ``[upgrade_levels] agent``
    allows it, so that conductors can be upgraded before the agents):

    * 1.0 - Initial version: prepare_attach_handle, release_attach_handle.
    * 1.1 - Add program.
    * 1.2 - Add program_image: the agent fetches the image from Glance
      itself (through its bitstream cache), programs it and reports its
      devices again.
    * 1.3 - prepare_attach_handle and release_attach_handle take the
      ``preparation`` the handle's deployable declared (the driver no
      longer works it out from the handle). Remove program (1.1, a path
      on the agent host; no conductor sends it) and ping: an agent
      answers them with oslo.messaging's NoSuchMethod.
    * 1.4 - Add set_partitions: a device's partition profile, set or
      pinned by an administrator.

    To change the API, add a line above, raise :attr:`RPC_API_VERSION`
    (``cyborg.common.constants.AGENT_RPC_API_VERSION``),
    and give the new or changed method that version in its
    :meth:`_prepare`; never change what an older version means.
    """

    #: The newest version of the API, which an agent serves.
    RPC_API_VERSION = constants.AGENT_RPC_API_VERSION
    #: The version the client's messages carry unless a method needs a
    #: newer one; every agent of this major version serves it.
    BASE_VERSION = '1.0'

    def __init__(self, transport, timeout: float | None = None,
                 version_cap: str | None = None):
        """``timeout``: seconds to wait for an answer (by default
        ``[DEFAULT] rpc_response_timeout``); ``version_cap``: the highest
        version sent (by default ``[upgrade_levels] agent``)."""
        self._version_cap = version_cap or CONF.upgrade_levels.agent
        self._client = rpc.get_client(transport, constants.AGENT_TOPIC,
                                      self.BASE_VERSION, self._version_cap)
        self._timeout = timeout

    def _prepare(self, method: str, version: str, host: str):
        """The client for ``method`` on ``host``'s agent, which needs API
        ``version``; raises :class:`cyborg.common.rpc.RPCVersionCapped`
        above the cap."""
        return rpc.client_for(
            self._client, constants.AGENT_TOPIC, method, version,
            self.BASE_VERSION, self._version_cap, 'agent').prepare(
                server=host, timeout=self._timeout)

    def _handle_call(self, method: str, context, host: str,
                     driver: str | None, attach_type: str,
                     attach_info: dict[str, Any], handle_uuid: str,
                     preparation: str | None) -> None:
        """``preparation`` goes with API 1.3; an agent that
        ``[upgrade_levels] agent`` caps below gets the 1.0 call and
        works the preparation out itself."""
        kwargs = dict(driver=driver, attach_type=attach_type,
                      attach_info=attach_info, handle_uuid=handle_uuid)
        version = '1.0'
        if preparation is not None and self._client.can_send_version('1.3'):
            version = '1.3'
            kwargs['preparation'] = preparation
        self._prepare(method, version, host).call(context, method, **kwargs)

    def prepare_attach_handle(self, context, host: str, driver: str | None,
                              attach_type: str, attach_info: dict[str, Any],
                              handle_uuid: str,
                              preparation: str | None = None) -> None:
        """Have ``driver`` on ``host`` make the handle attachable as its
        deployable's ``preparation`` says (API 1.3; 1.0 without it)."""
        self._handle_call('prepare_attach_handle', context, host, driver,
                          attach_type, attach_info, handle_uuid, preparation)

    def release_attach_handle(self, context, host: str, driver: str | None,
                              attach_type: str, attach_info: dict[str, Any],
                              handle_uuid: str,
                              preparation: str | None = None) -> None:
        """Undo :meth:`prepare_attach_handle` (API 1.3; 1.0 without
        ``preparation``)."""
        self._handle_call('release_attach_handle', context, host, driver,
                          attach_type, attach_info, handle_uuid, preparation)

    def program_image(self, context, host: str, driver: str | None,
                      controlpath: dict[str, Any] | None,
                      image: dict[str, Any]) -> str | None:
        """Have ``driver`` on ``host`` program the Glance image ``image``
        (``id``, ``os_hash_algo``, ``os_hash_value``, ``size``), which
        the agent fetches and verifies itself, through ``controlpath``;
        the function id the device runs after, if the driver says.
        API 1.2."""
        return self._prepare('program_image', '1.2', host).call(
            context, 'program_image', driver=driver,
            controlpath=controlpath, image=image)

    def set_partitions(self, context, host: str, driver: str | None,
                       address: str, profile: str | None,
                       pinned: bool) -> None:
        """Have ``driver`` on ``host`` serve partition ``profile`` on the
        device at ``address`` (None: the profile its policy chooses),
        pinned or not (API 1.4)."""
        self._prepare('set_partitions', '1.4', host).call(
            context, 'set_partitions', driver=driver, address=address,
            profile=profile, pinned=pinned)
