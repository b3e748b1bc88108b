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

"""Device taints: what keeps new allocations off a device, or marks the
instances holding it, and why.

A taint is a key, a value and an effect, after Kubernetes' device taints
(KEP-5055). Drivers add taints from health signals (source ``driver``);
operators add them through taint rules (source ``admin``). Each effect
that keeps allocations off a device (``NoSchedule``, ``NoExecute``) puts
the trait :func:`trait_name` of its key on the device's resource
providers; a device profile group that does not tolerate the taint asks
Placement for that trait as forbidden.

Dependency-free: the agent, the conductor and the API all import it.
"""

import dataclasses
import datetime
import re
from typing import Any
from typing import Iterable

from cyborg.domain import str_enum


class Effect(str_enum.StrEnum):
    #: No new allocation lands on the device unless the request
    #: tolerates the taint.
    NO_SCHEDULE = 'NoSchedule'
    #: As NoSchedule, and every ARQ bound on the device is marked (its
    #: instance should be moved; nothing is stopped).
    NO_EXECUTE = 'NoExecute'
    #: Visible only (a degraded device, or a taint rule's dry run).
    NONE = 'None'


EFFECTS = tuple(effect.value for effect in Effect)

#: Effects that keep new allocations off the device.
SCHEDULING_EFFECTS = (Effect.NO_SCHEDULE, Effect.NO_EXECUTE)


class Source(str_enum.StrEnum):
    #: Added and removed by the device's driver (a health signal).
    DRIVER = 'driver'
    #: Added and removed by an operator's taint rule.
    ADMIN = 'admin'


SOURCES = tuple(source.value for source in Source)

#: A taint key: lower-case letters, digits, '-', '.' and '_', starting
#: with a letter, at most :data:`KEY_MAX_LENGTH` characters (it becomes
#: part of a Placement trait name, whose limit is 255).
KEY_PATTERN = re.compile(r'^[a-z][a-z0-9._-]*$')
KEY_MAX_LENGTH = 63
#: A taint value: anything printable, at most this long.
VALUE_MAX_LENGTH = 255
REASON_MAX_LENGTH = 255

#: Prefix of the trait that a scheduling taint puts on providers.
TRAIT_PREFIX = 'CUSTOM_TAINT_'

#: Taint key of the taint every driver's binary ``unhealthy`` becomes.
UNHEALTHY_KEY = 'cyborg.unhealthy'


def check_key(key: str) -> str:
    """``key`` if it is a valid taint key; ValueError saying why not."""
    if not isinstance(key, str) or not KEY_PATTERN.match(key):
        raise ValueError('taint key %r must start with a lower-case letter '
                         'and hold only lower-case letters, digits, ".", '
                         '"-" and "_"' % (key,))
    if len(key) > KEY_MAX_LENGTH:
        raise ValueError('taint key %r is longer than %d characters'
                         % (key, KEY_MAX_LENGTH))
    return key


def trait_name(key: str) -> str:
    """The Placement trait of the taint key ``key`` (validated):
    ``cyborg.unhealthy`` -> ``CUSTOM_TAINT_CYBORG_UNHEALTHY``."""
    check_key(key)
    return TRAIT_PREFIX + re.sub(r'[^A-Z0-9]', '_', key.upper())


@dataclasses.dataclass
class Taint:
    key: str
    #: A member of :class:`Effect` (its value is accepted).
    effect: Effect
    value: str = ''
    #: A member of :class:`Source` (its value is accepted).
    source: Source = Source.DRIVER
    reason: str = ''
    #: When it was added (the conductor's clock); None on the wire from
    #: an agent (the conductor stamps it when it first sees the taint).
    added_at: datetime.datetime | None = None

    def __post_init__(self) -> None:
        check_key(self.key)
        self.effect = Effect(self.effect)
        self.source = Source(self.source)
        if len(self.value) > VALUE_MAX_LENGTH:
            raise ValueError('taint value of %s is longer than %d characters'
                             % (self.key, VALUE_MAX_LENGTH))
        # A reason is informative: cut, never refused.
        self.reason = self.reason[:REASON_MAX_LENGTH]

    def keeps_allocations_off(self) -> bool:
        """Whether the taint keeps new untolerated allocations off."""
        return self.effect in SCHEDULING_EFFECTS

    def to_wire(self) -> dict[str, Any]:
        """The JSON-able form an agent sends (no ``added_at``)."""
        return {'key': self.key, 'value': self.value,
                'effect': self.effect.value, 'source': self.source.value,
                'reason': self.reason}

    @classmethod
    def from_wire(cls, wire: dict[str, Any]) -> 'Taint':
        return cls(key=wire['key'], value=wire.get('value', ''),
                   effect=wire['effect'],
                   source=wire.get('source', Source.DRIVER),
                   reason=wire.get('reason', ''))


def scheduling_traits(taints: Iterable[Taint]) -> set[str]:
    """The traits that ``taints`` put on a device's providers."""
    return {trait_name(taint.key) for taint in taints
            if taint.keeps_allocations_off()}
