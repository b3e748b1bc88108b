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

"""The allocation audit: what Placement and the accelerator requests
disagree on.

* An allocation without an ARQ: a Placement consumer holds a provider
  of this service and no ARQ of that consumer is bound (or binding) to
  that provider. A flavor asking ``resources:PGPU=1`` without a device
  profile boots that way: the instance holds the device in Placement and
  nothing attaches it.
* An ARQ without a consumer: an ARQ holds an instance whose consumer
  Placement no longer knows (it has no allocation at all), e.g. an
  instance deleted while this service was unreachable.
"""

from collections.abc import Iterable
from collections.abc import Mapping
import dataclasses

from cyborg.domain import arq_states

# States of an ARQ that names its instance and provider.
HOLDING = (arq_states.BIND_STARTED, arq_states.BIND_FAILING,
           arq_states.BOUND, arq_states.BIND_FAILED)


@dataclasses.dataclass(frozen=True)
class Provider:
    rp_uuid: str
    host: str
    address: str


@dataclasses.dataclass(frozen=True)
class HeldARQ:
    uuid: str
    state: str
    instance_uuid: str
    device_rp_uuid: str | None
    hostname: str | None


@dataclasses.dataclass(frozen=True)
class OrphanAllocation:
    consumer: str
    provider: Provider
    resources: Mapping[str, int]

    def describe(self) -> str:
        return ('Allocation without an ARQ: consumer %s holds %s of '
                'provider %s (host %s, device %s)' % (
                    self.consumer, ', '.join(
                        '%s=%d' % item for item in sorted(
                            self.resources.items())),
                    self.provider.rp_uuid, self.provider.host,
                    self.provider.address))


@dataclasses.dataclass(frozen=True)
class OrphanARQ:
    arq: HeldARQ

    def describe(self) -> str:
        return ('ARQ without a consumer: ARQ %s (%s) holds instance %s on '
                'host %s, which has no allocation in Placement' % (
                    self.arq.uuid, self.arq.state, self.arq.instance_uuid,
                    self.arq.hostname))


def orphan_allocations(providers: Iterable[Provider],
                       allocations: Mapping[str, Mapping[str, Mapping]],
                       arqs: Iterable[HeldARQ]) -> list[OrphanAllocation]:
    """The allocations (``{rp_uuid: {consumer: resources}}``) of
    ``providers`` that no ARQ holds, by provider then consumer."""
    held = {(arq.instance_uuid, arq.device_rp_uuid) for arq in arqs}
    found = []
    for provider in sorted(providers, key=lambda p: p.rp_uuid):
        for consumer, resources in sorted(
                allocations.get(provider.rp_uuid, {}).items()):
            if (consumer, provider.rp_uuid) not in held:
                found.append(OrphanAllocation(consumer, provider,
                                              dict(resources)))
    return found


def instances_to_check(allocations: Mapping[str, Mapping[str, Mapping]],
                       arqs: Iterable[HeldARQ]) -> list[str]:
    """The instances of ``arqs`` not seen among the consumers of
    ``allocations``: those to ask Placement about."""
    seen = {consumer for by_consumer in allocations.values()
            for consumer in by_consumer}
    return sorted({arq.instance_uuid for arq in arqs} - seen)


def orphan_arqs(arqs: Iterable[HeldARQ], unknown: set[str]
                ) -> list[OrphanARQ]:
    """The ARQs whose instance is among the ``unknown`` consumers."""
    return [OrphanARQ(arq) for arq in sorted(arqs, key=lambda a: a.uuid)
            if arq.instance_uuid in unknown]
