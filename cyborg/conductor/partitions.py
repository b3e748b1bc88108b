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

"""An administrator's partition profile for a device: checked here, set
by the device's agent (agent API 1.4).

A device takes a profile only when its driver reports partitions and it
holds none (no accelerator request on it, no partition its agent
reported in use, no Placement allocation on its providers); the agent's
driver checks the device itself again, and its refusal is the answer.
The profile shows in the device's partitions from the report the agent
sends after setting it.

:class:`SwitchGuard` answers an agent whose driver is about to change
what an empty device serves (conductor API 1.10). Nova claims in
Placement before it binds, and Nova fails a build whose bind fails: a
GPU that switched profile between the claim and the bind would fail it.
So a switch is allowed only when Placement holds no allocation on the
device's providers, and the guard then reserves their whole inventory
with the generation it read them at: an allocation made in between
fails the reservation (409) and refuses the switch, and none can be
made after it. The next report's sync replaces the providers (the
switch) or writes their inventory again (no switch).
"""

from typing import Any
from typing import Callable
from typing import Protocol

from oslo_log import log as logging
import oslo_messaging as messaging

from cyborg.clients import placement as placement_client
from cyborg.common import exception
from cyborg.common import rpc
from cyborg.db import hardware
from cyborg.db import partition_switch
from cyborg.domain import partitions as partition_rules

LOG = logging.getLogger(__name__)


class Agents(Protocol):
    def set_partitions(self, context, host: str, driver: str | None,
                       address: str, profile: str | None,
                       pinned: bool) -> None: ...


class Partitions:
    """Sets devices' partition profiles through their agents."""

    def __init__(self, agents: Agents,
                 placement: Callable[[], placement_client.PlacementClient]
                 | None = None) -> None:
        """``placement``: the Placement client, asked whether a device's
        providers hold allocations (None: not asked)."""
        self._agents = agents
        self._placement = placement

    def set(self, context, uuid: str, profile: str | None,
            pinned: bool) -> None:
        """Have device ``uuid`` serve ``profile`` (None: the one its
        driver's policy chooses), pinned or not. Raises
        DeviceNotPartitioned, DevicePartitionsInUse, Invalid (a profile
        the device cannot serve), PartitionsFailed or ServiceUnavailable
        (the agent failed or did not answer)."""
        device = hardware.device_get(context, uuid)
        reported = partition_rules.from_stored(device['partitions'])
        if reported is None:
            raise exception.DeviceNotPartitioned(uuid=uuid)
        if reported['in_use'] or device['address'] in (
                hardware.bound_device_addresses(context,
                                                device['hostname'])):
            raise exception.DevicePartitionsInUse(uuid=uuid)
        self._check_unallocated(context, device)
        try:
            self._agents.set_partitions(
                context, device['hostname'], device['driver'],
                device['address'], profile, pinned)
        except (exception.Invalid, exception.Conflict):
            # The driver's own refusal (it checks the device itself).
            raise
        except (rpc.RPCVersionCapped, messaging.MessagingTimeout) as e:
            raise exception.ServiceUnavailable(reason=_reason(
                device['hostname'], e)) from e
        except Exception as e:
            raise exception.PartitionsFailed(
                uuid=uuid, reason=_reason(device['hostname'], e)) from e
        LOG.info('Device %s on %s serves partition profile %s, pinned: %s',
                 uuid, device['hostname'],
                 profile or "of its driver's policy", pinned)


    def _check_unallocated(self, context, device: dict[str, Any]) -> None:
        """DevicePartitionsInUse while Placement holds an allocation on
        a provider of ``device`` (a claim whose bind has not come yet);
        ServiceUnavailable when Placement cannot tell."""
        if self._placement is None:
            return
        serving = partition_switch.device_serving(
            context, device['hostname'], device['address'])
        try:
            client = self._placement()
            for rp_uuid in serving.providers.values():
                if _allocations(client, rp_uuid)[1]:
                    raise exception.DevicePartitionsInUse(uuid=device['uuid'])
        except placement_client.PlacementError as e:
            raise exception.ServiceUnavailable(
                reason='Placement cannot be asked whether device %s is '
                'allocated: %s' % (device['uuid'], e)) from e


class SwitchGuard:
    """Answers whether an empty device may change what it serves (see
    the module docstring)."""

    def __init__(self, placement: Callable[
            [], placement_client.PlacementClient] | None) -> None:
        """``placement``: the Placement client (None: every switch is
        refused, as nothing can be asked)."""
        self._placement = placement

    def may_serve(self, context, host: str, address: str,
                  deployable: str) -> partition_rules.SwitchAnswer:
        serving = partition_switch.device_serving(context, host, address)
        if deployable in serving.names or not serving.names:
            # No switch (what the database knows is what it serves), or a
            # device never reported: Placement has nothing of it.
            return partition_rules.ALLOWED
        refused = partition_rules.SwitchAnswer(False, serving.names)
        if serving.held or self._placement is None:
            return refused
        reserved = []
        try:
            client = self._placement()
            for rp_uuid in serving.providers.values():
                if not _freeze(client, rp_uuid):
                    LOG.info('Device %s on %s keeps serving %s: Placement '
                             'holds allocations on it', address, host,
                             ', '.join(serving.names))
                    return refused
                reserved.append(rp_uuid)
        except placement_client.PlacementError as e:
            LOG.warning('Device %s on %s keeps serving %s: Placement cannot '
                        'be asked (%s)', address, host,
                        ', '.join(serving.names), e)
            return refused
        finally:
            if reserved:
                # Written behind the sync's back: the next report's sync
                # removes these providers or writes their inventory again.
                partition_switch.forget_written_inventory(context, host,
                                                          reserved)
        return partition_rules.ALLOWED


def _allocations(client: placement_client.PlacementClient,
                 rp_uuid: str) -> tuple[int | None, dict]:
    """(generation, allocations) of a provider; (None, {}) for one
    Placement does not have."""
    try:
        return client.provider_allocations_at(rp_uuid)
    except placement_client.ProviderNotFound:
        return None, {}


def _freeze(client: placement_client.PlacementClient, rp_uuid: str) -> bool:
    """Reserve the whole inventory of a provider that holds no
    allocation, at the generation the allocations were read at; False
    when it holds one or one may have come meanwhile."""
    generation, allocations = _allocations(client, rp_uuid)
    if generation is None:
        return True  # gone: nothing can be allocated on it
    if allocations:
        return False
    try:
        placement_client.reserve_all(client, rp_uuid, generation)
    except placement_client.ProviderNotFound:
        return True
    except placement_client.GenerationConflict:
        return False  # an allocation since the allocations were read
    return True


def _reason(host: str, error: Any) -> str:
    if isinstance(error, messaging.MessagingTimeout):
        return 'the agent of %s did not answer in time' % host
    if isinstance(error, messaging.RemoteError):
        return '%s: %s' % (error.exc_type, error.value)
    return str(error) or type(error).__name__
