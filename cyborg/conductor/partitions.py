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
reported in use); the agent's driver checks the device itself again,
and its refusal is the answer. The profile shows in the device's
partitions from the report the agent sends after setting it.
"""

from typing import Any
from typing import Protocol

from oslo_log import log as logging
import oslo_messaging as messaging

from cyborg.common import exception
from cyborg.common import rpc
from cyborg.db import hardware
from cyborg.domain import partitions as partition_rules

LOG = logging.getLogger(__name__)


class Agents(Protocol):
    def set_partitions(self, context, host: str, driver: str | None,
                       address: str, profile: str | None,
                       pinned: bool) -> None: ...


class Partitions:
    """Sets devices' partition profiles through their agents."""

    def __init__(self, agents: Agents) -> None:
        self._agents = agents

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


def _reason(host: str, error: Any) -> str:
    if isinstance(error, messaging.MessagingTimeout):
        return 'the agent of %s did not answer in time' % host
    if isinstance(error, messaging.RemoteError):
        return '%s: %s' % (error.exc_type, error.value)
    return str(error) or type(error).__name__
