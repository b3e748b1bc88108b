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

"""Client side of the conductor RPC API."""

import copy
from typing import Any

from cyborg.common import constants
from cyborg.common import rpc
from cyborg.conf import CONF

# Seconds an agent waits for the conductor to apply its report. A report
# lost on the way is sent again a few seconds later, so this stays short.
REPORT_TIMEOUT = 30
#: Times a bounded call (:meth:`ConductorAPI.with_timeout`) reconnects to
#: the broker to send its message before it gives up: enough to fail
#: over to another node of a RabbitMQ cluster. oslo.messaging's default
#: (None) retries until the broker is back, so that with RabbitMQ down
#: an API request would wait for the whole outage, whatever its timeout.
SEND_RETRIES = 1


class ConductorAPI:
    """Calls the conductor.

    Writes that the caller must see the result of are calls; work that
    may finish later is cast.

    API version history (the conductor's endpoint serves every version up
    to :attr:`RPC_API_VERSION`; a method newer than :attr:`BASE_VERSION`
    is sent with its version, and only where ``[upgrade_levels]
    conductor`` allows it):

    * 1.0 - Initial version: device_profile_create, device_profile_delete,
      service_heartbeat, report_inventory, device_set_status,
      attribute_create, attribute_delete, arq_create, arq_bind,
      arq_unbind, arq_delete.
    * 1.1 - Add deployable_program.
    * 1.2 - report_inventory takes ``utilization`` (``{device address:
      {metric: value}}``, outside the digest). Capped below 1.2, the
      agent sends its reports without it.
    * 1.3 - report_inventory takes ``devices=None`` for a tree whose
      ``digest`` the conductor acknowledged before (an unchanged report
      is then a digest, not a tree); it answers ``resend: True`` when it
      does not hold that digest. Capped below 1.3, every report carries
      its tree.
    * 1.4 - Add bound_devices (the agent resets no device that holds an
      accelerator request). Capped below 1.4, the agent resets nothing.
    * 1.5 - Add taint_rule_create, taint_rule_delete. Capped below 1.5,
      the API answers 503 to a taint rule's creation or deletion.
    * 1.6 - Add device_profile_update. Capped below 1.6, the API answers
      503 to a device profile's update.
    * 1.7 - Add alternatives_probe. Capped below 1.7, the API answers
      each group with ordered alternatives as its first alternative.
    * 1.8 - Add device_set_partitions. Capped below 1.8, the API answers
      503 to a device's partition profile.
    * 1.9 - Add prepared_handles and handles_restored (an agent restores
      its host's prepared handles before its first report after a
      start). Capped below 1.9, the agent restores nothing.
    * 1.10 - Add partition_switch (an agent asks before an empty device
      changes the partition profile it serves). Capped below 1.10, the
      agent's drivers switch without asking, as before.

    To change the API, add a line above, raise :attr:`RPC_API_VERSION`
    (``cyborg.common.constants.CONDUCTOR_RPC_API_VERSION``),
    and give the new or changed method that version in its
    :meth:`_prepare`; never change what an older version means.
    """

    #: The newest version of the API, which the conductor serves.
    RPC_API_VERSION = constants.CONDUCTOR_RPC_API_VERSION
    #: The version the client's messages carry unless a method needs a
    #: newer one; every conductor of this major version serves it.
    BASE_VERSION = '1.0'

    def __init__(self, transport, timeout: float | None = None,
                 version_cap: str | None = None):
        """``version_cap``: the highest version sent (by default
        ``[upgrade_levels] conductor``)."""
        self._version_cap = version_cap or CONF.upgrade_levels.conductor
        self._client = rpc.get_client(transport, constants.CONDUCTOR_TOPIC,
                                      self.BASE_VERSION, self._version_cap)
        #: Seconds a call waits for a conductor's answer before it raises
        #: MessagingTimeout; None: ``[DEFAULT] rpc_response_timeout``.
        self.timeout = None
        if timeout is not None:
            self._client = self._client.prepare(timeout=timeout)
            self.timeout = timeout

    def _prepare(self, method: str, version: str):
        """The client for ``method``, which needs API ``version``; raises
        :class:`cyborg.common.rpc.RPCVersionCapped` above the cap."""
        return rpc.client_for(self._client, constants.CONDUCTOR_TOPIC,
                              method, version, self.BASE_VERSION,
                              self._version_cap, 'conductor')

    def with_timeout(self, timeout: float) -> 'ConductorAPI':
        """This client, with calls that wait at most ``timeout`` seconds
        for an answer (the API's ``[api] conductor_timeout``), and that
        reconnect at most :data:`SEND_RETRIES` times to send (a broker
        that cannot be reached raises MessageDeliveryFailure within a
        few seconds; the API answers 503)."""
        api = copy.copy(self)
        api._client = self._client.prepare(timeout=timeout,
                                           retry=SEND_RETRIES)
        api.timeout = timeout
        return api

    def device_profile_create(self, context, values: dict[str, Any]
                              ) -> dict[str, Any]:
        return self._prepare('device_profile_create', '1.0').call(
            context, 'device_profile_create', values=values)

    def device_profile_delete(self, context, idents: list[list[str]]) -> None:
        return self._prepare('device_profile_delete', '1.0').call(
            context, 'device_profile_delete', idents=idents)

    def device_profile_update(self, context, uuid: str,
                              values: dict[str, Any]) -> dict[str, Any]:
        """Change a device profile's description, groups or ``enabled``
        (API 1.6); returns the profile."""
        return self._prepare('device_profile_update', '1.6').call(
            context, 'device_profile_update', uuid=uuid, values=values)

    def service_heartbeat(self, context, host: str, binary: str) -> None:
        self._prepare('service_heartbeat', '1.0').cast(
            context, 'service_heartbeat', host=host, binary=binary)

    def report_inventory(self, context, host: str, rp_name: str,
                         devices: list[dict[str, Any]], digest: str,
                         failed_drivers: list[str],
                         utilization: dict[str, dict[str, Any]] | None = None,
                         acknowledged: bool = False) -> dict[str, bool]:
        """Apply an agent's device tree; see cyborg.conductor.inventory.

        ``utilization`` goes with version 1.2; below a cap of 1.2 (a
        conductor not upgraded yet) the report goes without it.
        ``acknowledged``: the conductor answered a report of this
        ``digest`` before, so (version 1.3) the digest goes alone, and
        the tree follows only if the conductor asks for it.
        """
        if acknowledged and self._client.can_send_version('1.3'):
            answer = self._report('1.3', context, host=host,
                                  rp_name=rp_name, devices=None,
                                  digest=digest, failed_drivers=failed_drivers,
                                  utilization=utilization or {})
            if not answer.get('resend'):
                return answer
        kwargs: dict[str, Any] = {}
        version = '1.0'
        if self._client.can_send_version('1.2'):
            version = '1.2'
            kwargs['utilization'] = utilization or {}
        return self._report(version, context, host=host, rp_name=rp_name,
                            devices=devices, digest=digest,
                            failed_drivers=failed_drivers, **kwargs)

    def bound_devices(self, context, host: str) -> list[str] | None:
        """The addresses of ``host``'s devices that hold an accelerator
        request or an attach handle in use (API 1.4); None where the cap
        is below 1.4 (the agent then resets no device)."""
        if not self._client.can_send_version('1.4'):
            return None
        return self._prepare('bound_devices', '1.4').call(
            context, 'bound_devices', host=host)

    def prepared_handles(self, context, host: str
                         ) -> list[dict[str, Any]] | None:
        """The prepared handles of ``host`` and what its agent does with
        each (:class:`cyborg.domain.restore.PreparedHandle` in wire
        form; API 1.9); None where the cap is below 1.9 (the agent then
        restores nothing)."""
        if not self._client.can_send_version('1.9'):
            return None
        # As short as a report's: the agent asks again before reporting.
        client = self._prepare('prepared_handles', '1.9')
        return client.prepare(timeout=REPORT_TIMEOUT).call(
            context, 'prepared_handles', host=host)

    def handles_restored(self, context, host: str,
                         outcome: dict[str, Any]) -> None:
        """What ``host``'s agent did with its prepared handles
        (:class:`cyborg.domain.restore.Outcome` in wire form; API
        1.9)."""
        client = self._prepare('handles_restored', '1.9')
        client.prepare(timeout=REPORT_TIMEOUT).call(
            context, 'handles_restored', host=host, outcome=outcome)

    def partition_switch(self, context, host: str, address: str,
                         deployable: str) -> dict[str, Any] | None:
        """Whether ``host``'s empty device at ``address`` may serve
        ``deployable`` in place of what it serves (a
        :class:`cyborg.domain.partitions.SwitchAnswer` in wire form; API
        1.10); None where the cap is below 1.10."""
        if not self._client.can_send_version('1.10'):
            return None
        # Asked inside a discovery: no longer than a report may wait.
        client = self._prepare('partition_switch', '1.10')
        return client.prepare(timeout=REPORT_TIMEOUT).call(
            context, 'partition_switch', host=host, address=address,
            deployable=deployable)

    def _report(self, version: str, context, **kwargs) -> dict[str, bool]:
        client = self._prepare('report_inventory', version)
        return client.prepare(timeout=REPORT_TIMEOUT).call(
            context, 'report_inventory', **kwargs)

    def device_set_status(self, context, uuid: str, status: str) -> None:
        return self._prepare('device_set_status', '1.0').call(
            context, 'device_set_status', uuid=uuid, status=status)

    def device_set_partitions(self, context, uuid: str, profile: str | None,
                              pinned: bool) -> None:
        """Set or pin a device's partition profile through its agent
        (API 1.8)."""
        return self._prepare('device_set_partitions', '1.8').call(
            context, 'device_set_partitions', uuid=uuid, profile=profile,
            pinned=pinned)

    def attribute_create(self, context, values: dict[str, Any]
                         ) -> dict[str, Any]:
        return self._prepare('attribute_create', '1.0').call(
            context, 'attribute_create', values=values)

    def attribute_delete(self, context, uuid: str) -> None:
        return self._prepare('attribute_delete', '1.0').call(
            context, 'attribute_delete', uuid=uuid)

    # Accelerator requests. The caller's project scopes every call unless
    # the context is an admin's; the API checks service tokens first.

    def arq_create(self, context, device_profile_name: str
                   ) -> list[dict[str, Any]]:
        """Create the ARQs of a profile atomically; returns them."""
        return self._prepare('arq_create', '1.0').call(
            context, 'arq_create', device_profile_name=device_profile_name)

    def arq_bind(self, context, bindings: dict[str, dict[str, str]]) -> None:
        """Start binding ARQs; ``bindings`` maps ARQ uuid to
        {hostname, device_rp_uuid, instance_uuid[, project_id]}. All or
        nothing; the bind itself finishes asynchronously."""
        return self._prepare('arq_bind', '1.0').call(
            context, 'arq_bind', bindings=bindings)

    def arq_unbind(self, context, uuids: list[str]) -> None:
        return self._prepare('arq_unbind', '1.0').call(
            context, 'arq_unbind', uuids=uuids)

    def arq_delete(self, context, uuids: list[str] | None = None,
                   instance_uuid: str | None = None) -> None:
        """Delete ARQs by uuid (all must exist) or every ARQ of an
        instance (idempotent); bound ones are unbound first."""
        return self._prepare('arq_delete', '1.0').call(
            context, 'arq_delete', uuids=uuids, instance_uuid=instance_uuid)

    def deployable_program(self, context, deployable_uuid: str,
                           image_uuid: str) -> None:
        """Program the deployable with the Glance image and record it;
        returns once done (API 1.1). See
        :meth:`cyborg.conductor.manager.ConductorManager.deployable_program`
        for the exceptions it raises."""
        return self._prepare('deployable_program', '1.1').call(
            context, 'deployable_program', deployable_uuid=deployable_uuid,
            image_uuid=image_uuid)

    def taint_rule_create(self, context, values: dict[str, Any]
                          ) -> dict[str, Any]:
        """Create a device taint rule and apply it (API 1.5); returns the
        rule. See :meth:`cyborg.conductor.manager.ConductorManager.
        taint_rule_create`."""
        return self._prepare('taint_rule_create', '1.5').call(
            context, 'taint_rule_create', values=values)

    def alternatives_probe(self, context,
                           candidates: list[list[dict[str, Any]]]
                           ) -> list[int]:
        """For each list of plain request groups (a group's ordered
        alternatives), the index of the first Placement can satisfy now
        (API 1.7); see :meth:`cyborg.conductor.manager.ConductorManager.
        alternatives_probe`."""
        return self._prepare('alternatives_probe', '1.7').call(
            context, 'alternatives_probe', candidates=candidates)

    def taint_rule_delete(self, context, uuid: str) -> None:
        """Delete a device taint rule and its taints (API 1.5)."""
        return self._prepare('taint_rule_delete', '1.5').call(
            context, 'taint_rule_delete', uuid=uuid)
