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

"""Tolerations: which taints a device profile group lets its requests
land on.

A group tolerates a taint key with a group key ``toleration:<taint key>``
whose value is an operator, after Kubernetes' device taints (KEP-5055):

* ``Exists``: any taint of that key, whatever its value;
* ``Equal:<value>``: taints of that key with exactly that value.

A toleration covers every effect of its key (it matters only to
scheduling: a NoExecute taint marks the requests bound on the device
whether they tolerate it or not).

Placement sees two traits per scheduling taint on the providers of its
device: its key's (:func:`cyborg.domain.taints.trait_name`) and its key
and value's (:func:`value_trait_name`). What the profile answer asks of
each group, for each active scheduling key (a key that some device has
with NoSchedule or NoExecute), is:

* no toleration of the key: its key trait forbidden;
* ``Exists``: nothing;
* ``Equal:<value>``: the value trait of each of the key's other active
  values forbidden.

So a request lands on a device only if the group tolerates every
scheduling taint of the device, exactly as each toleration says.

Dependency-free: the API imports it to validate a profile and to answer
Nova.
"""

from collections.abc import Iterable
from collections.abc import Mapping
import dataclasses
import hashlib

from cyborg.domain import taints as taint_rules

#: Prefix of a toleration's group key.
PREFIX = 'toleration'
EXISTS = 'Exists'
EQUAL = 'Equal'
OPERATORS = (EXISTS, EQUAL)

#: Prefix of the trait of a taint's key and value (never that of a key
#: trait: its 13th character is "V", a key trait's is "_").
VALUE_TRAIT_PREFIX = 'CUSTOM_TAINTV_'


def value_trait_name(key: str, value: str) -> str:
    """The Placement trait of taint ``key``=``value`` (a digest: a value
    may hold any character and be as long as a trait name)."""
    digest = hashlib.sha256(('%s=%s' % (key, value)).encode()).hexdigest()
    return VALUE_TRAIT_PREFIX + digest[:32].upper()


def placement_traits(taints: Iterable[taint_rules.Taint]) -> set[str]:
    """The traits ``taints`` put on their device's providers: the key
    trait and the value trait of each taint with a scheduling effect."""
    taints = [taint for taint in taints if taint.keeps_allocations_off()]
    return (taint_rules.scheduling_traits(taints)
            | {value_trait_name(taint.key, taint.value) for taint in taints})


@dataclasses.dataclass(frozen=True)
class Toleration:
    key: str
    operator: str
    #: The value an ``Equal`` toleration matches (None for ``Exists``).
    value: str | None = None

    def tolerates(self, key: str, value: str) -> bool:
        """Whether a taint ``key``=``value`` is tolerated."""
        if key != self.key:
            return False
        return self.operator == EXISTS or value == self.value


def parse_value(key: str, text: object) -> Toleration:
    """The toleration of group key ``toleration:<key>`` with value
    ``text``; ValueError saying what is wrong."""
    taint_rules.check_key(key)
    if not isinstance(text, str):
        raise ValueError('value of toleration:%s must be a string' % key)
    operator, sep, value = text.partition(':')
    if operator == EXISTS and not sep:
        return Toleration(key, EXISTS)
    if operator == EQUAL and sep:
        if len(value) > taint_rules.VALUE_MAX_LENGTH:
            raise ValueError('value of toleration:%s is longer than %d '
                             'characters' % (key,
                                             taint_rules.VALUE_MAX_LENGTH))
        return Toleration(key, EQUAL, value)
    raise ValueError('value of toleration:%s must be "Exists" or '
                     '"Equal:<value>", not %r' % (key, text))


def of_group(group: Mapping[str, str]) -> dict[str, Toleration]:
    """``{taint key: toleration}`` of a (normalized) group; group keys
    that are not valid tolerations are ignored (a stored group was
    validated when its profile was created)."""
    found = {}
    for group_key, text in group.items():
        prefix, sep, key = group_key.partition(':')
        if sep and prefix == PREFIX:
            try:
                found[key] = parse_value(key, text)
            except ValueError:
                continue
    return found


def forbidden_traits(group: Mapping[str, str],
                     active: Mapping[str, Iterable[str]]) -> list[str]:
    """The taint traits ``group`` must forbid, sorted, given ``active``
    (``{key: its values on devices}`` of the scheduling taints): the key
    trait of each key it does not tolerate, the value trait of each value
    that its ``Equal`` toleration of the key does not match."""
    tolerations = of_group(group)
    forbidden = []
    for key, values in active.items():
        toleration = tolerations.get(key)
        if toleration is None:
            forbidden.append(taint_rules.trait_name(key))
            continue
        forbidden += [value_trait_name(key, value) for value in values
                      if not toleration.tolerates(key, value)]
    return sorted(forbidden)


def with_forbidden_taints(group: Mapping[str, str],
                          active: Mapping[str, Iterable[str]]
                          ) -> dict[str, str]:
    """``group`` as Nova should read it: ``trait:<taint trait>:
    forbidden`` added for each key it must forbid (a trait the group
    already names keeps its value)."""
    result = dict(group)
    for trait in forbidden_traits(group, active):
        result.setdefault('trait:' + trait, 'forbidden')
    return result
