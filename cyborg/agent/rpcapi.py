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
