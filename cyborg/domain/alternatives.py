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

"""Ordered alternatives of a device profile group: how they are probed,
resolved to the plain form Nova reads, and matched at bind.

A group may list up to 8 ``alternatives`` (see
:func:`cyborg.domain.device_profile.normalize_group`); Nova turns only a
group's ``resources:`` and ``trait:`` keys into a request group, so the
service answers each group as the first alternative Placement can
satisfy when it is read (``GET /allocation_candidates?limit=1``, in
order), or its first alternative when none can: Nova then fails as it
would for a plain group. At bind, the alternative the provider satisfies
is the one the ARQ records.
"""

from collections.abc import Iterable
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any

from cyborg.domain import device_profile
from cyborg.domain import resource_names

# The suffix of the one numbered request group a probe asks for.
PROBE_SUFFIX = '1'


def placement_query(group: Mapping[str, str]) -> dict[str, str]:
    """The ``GET /allocation_candidates`` query that asks whether a
    plain group can be satisfied now: its resources and traits (forbidden
    ones as ``!TRAIT``, Placement 1.22), one candidate at most.

    The group is asked as one numbered group (Placement 1.25), as Nova
    asks for a device profile group: all of it from one provider. That is
    also the cheaper query: Placement matches single providers instead
    of combining the providers of each tree."""
    resources, required, forbidden = [], [], []
    for key, value in group.items():
        prefix, _sep, name = key.partition(':')
        prefix, name = prefix.strip(), resource_names.normalize(name)
        if prefix == device_profile.RESOURCES:
            resources.append('%s:%s' % (name, value))
        elif prefix == device_profile.TRAIT and value == 'required':
            required.append(name)
        elif prefix == device_profile.TRAIT and value == 'forbidden':
            forbidden.append('!' + name)
    query = {'resources' + PROBE_SUFFIX: ','.join(sorted(resources)),
             'limit': '1'}
    if required or forbidden:
        query['required' + PROBE_SUFFIX] = ','.join(
            sorted(required) + sorted(forbidden))
    return query


def first_satisfiable(options: Sequence[Any],
                      satisfiable) -> int:
    """The index of the first of ``options`` for which
    ``satisfiable(option)`` is true, trying them in order and stopping at
    the first; 0 (the first alternative, which Nova then fails to place
    as it would today) when none is."""
    for index, option in enumerate(options):
        if satisfiable(option):
            return index
    return 0


def resolve(groups: Sequence[dict[str, Any]],
            chosen: Mapping[int, int]) -> list[dict[str, Any]]:
    """``groups`` in Nova's plain form: each group with alternatives
    replaced by its alternative ``chosen[index]`` (its first when
    ``chosen`` does not name it)."""
    return [device_profile.options(group)[chosen.get(index, 0)]
            for index, group in enumerate(groups)]


def match(group: dict[str, Any], resource_class: str | None,
          traits: Iterable[str]) -> tuple[int | None, list[str]]:
    """Which alternative of ``group`` a provider of ``resource_class``
    with ``traits`` satisfies: ``(index, [])`` for the first it
    satisfies (``index`` None for a group without alternatives), or
    ``(None, reasons)`` when it satisfies none (:func:`device_profile.
    unmet`, per alternative)."""
    traits = set(traits)
    if not device_profile.has_alternatives(group):
        return None, device_profile.unmet(group, resource_class, traits)
    reasons = []
    for index, option in enumerate(device_profile.options(group)):
        unmet = device_profile.unmet(option, resource_class, traits)
        if not unmet:
            return index, []
        reasons.append('(alternative %d) %s' % (index, ', '.join(unmet)))
    return None, reasons
