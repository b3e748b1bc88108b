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

"""Per-project limits: the resources an accelerator request counts in,
and what a limit means.

The resource names are Nova's unified limits' spelling, so that an
operator can copy limits between the two services:
``accelerator_requests`` (one per ARQ) and ``class:<resource class>``
(one per unit of that class, e.g. ``class:FPGA``). Each ARQ stands for
one unit of one resource class of its group (a group asking for
``resources:FPGA=2`` makes two ARQs, each ``{"FPGA": 1}``); that is
stored on the ARQ when it is created (its ``resources``), so a later
change of its device profile does not change what it counts.
"""

from collections.abc import Iterable
import dataclasses
import json
import math
from typing import Any

from cyborg.domain import device_profile as dp_rules

#: The number of accelerator requests a project holds.
ARQS = 'accelerator_requests'
#: The prefix of a resource class's name (Nova's).
CLASS_PREFIX = 'class:'
#: What a resource without a registered limit means (as Nova's
#: [quota] unified_limits_resource_strategy).
REQUIRE = 'require'
IGNORE = 'ignore'
#: Keystone's limit for "no limit".
UNLIMITED = -1


def class_name(resource_class: str) -> str:
    """The limit name of ``resource_class`` (``class:FPGA``)."""
    return CLASS_PREFIX + resource_class


def group_classes(group: dict[str, Any]) -> list[tuple[str, int]]:
    """The (resource class, amount) pairs a device profile group asks
    for (its ``resources:<RC>`` keys), in the group's order. A group of
    ordered alternatives counts as its first: they all ask for the same
    number of accelerators, and which one a bind matches is known only
    after the creation is counted."""
    group = dp_rules.options(group)[0]
    return [(key.split(':', 1)[1], int(value))
            for key, value in group.items()
            if key.startswith('resources:')]


def arq_resources(group: dict[str, Any]) -> list[dict[str, int]]:
    """What each ARQ of ``group`` counts, one entry per ARQ in the order
    they are created: one unit of one resource class."""
    return [{resource_class: 1}
            for resource_class, amount in group_classes(group)
            for _ in range(amount)]


def encode(resources: dict[str, int]) -> str:
    """An ARQ's ``resources`` column."""
    return json.dumps(resources, sort_keys=True)


def deltas(resources: Iterable[dict[str, int]]) -> dict[str, int]:
    """The limit deltas of creating ARQs counting ``resources`` (one
    dict per ARQ)."""
    total = {ARQS: 0}
    for arq in resources:
        total[ARQS] += 1
        for resource_class, amount in arq.items():
            name = class_name(resource_class)
            total[name] = total.get(name, 0) + amount
    return total


def usage(stored: Iterable[tuple[str, int]],
          legacy: Iterable[tuple[dict[str, Any], int]]) -> dict[str, int]:
    """A project's usage.

    ``stored``: (``resources`` column, number of ARQs) pairs of ARQs
    created with their resources; ``legacy``: (device profile group,
    number of ARQs) pairs of ARQs created before (their column NULL),
    each counting its share of its group's resources (rounded up, so a
    whole group counts exactly its amounts).
    """
    total: dict[str, float] = {ARQS: 0}
    for column, count in stored:
        total[ARQS] += count
        for resource_class, amount in json.loads(column).items():
            name = class_name(resource_class)
            total[name] = total.get(name, 0) + amount * count
    for group, count in legacy:
        total[ARQS] += count
        classes = group_classes(group)
        units = sum(amount for _, amount in classes) or 1
        for resource_class, amount in classes:
            name = class_name(resource_class)
            total[name] = total.get(name, 0) + amount * count / units
    return {name: math.ceil(value) for name, value in total.items()}


def limited_names(names: Iterable[str], registered: Iterable[str],
                  strategy: str, listed: Iterable[str]) -> list[str]:
    """Which of ``names`` are limited: those with a registered limit,
    and those without one that the strategy makes a limit of 0
    (``require``: the ``listed`` ones; ``ignore``: every other one)."""
    registered = set(registered)
    listed = set(listed)
    return [name for name in names
            if name in registered
            or (name in listed) == (strategy == REQUIRE)]


def effective_limits(names: Iterable[str], registered: dict[str, int],
                     project: dict[str, int], strategy: str,
                     listed: Iterable[str]) -> dict[str, int]:
    """The limit of each of ``names`` that is limited (see
    :func:`limited_names`): the project's own, else the registered one,
    else 0."""
    return {name: project.get(name, registered.get(name, 0))
            for name in limited_names(names, registered, strategy, listed)}


def unregistered(names: Iterable[str], registered: Iterable[str]
                 ) -> list[str]:
    """``names`` without a registered limit, sorted."""
    return sorted(set(names) - set(registered))


@dataclasses.dataclass(frozen=True)
class OverLimit:
    """A resource a request would take past its project's limit."""

    resource: str
    limit: int
    usage: int
    requested: int

    def __str__(self) -> str:
        return '%s: limit %d, usage %d, requested %d' % (
            self.resource, self.limit, self.usage, self.requested)


def is_unlimited(limit: int) -> bool:
    """Whether ``limit`` is no limit (-1; Keystone takes no other
    negative one, nor does this service)."""
    return limit < 0


def bounded(limits: dict[str, int]) -> dict[str, int]:
    """Those of ``limits`` that are a limit."""
    return {name: limit for name, limit in limits.items()
            if not is_unlimited(limit)}


def over_limits(limits: dict[str, int], usage: dict[str, int],
                deltas: dict[str, int]) -> list[OverLimit]:
    """The resources of ``limits`` that ``usage`` plus ``deltas`` passes
    (a limit of -1 is no limit), in ``limits``' order."""
    over = []
    for name, limit in limits.items():
        if is_unlimited(limit):
            continue
        used = usage.get(name, 0)
        requested = deltas.get(name, 0)
        if used + requested > limit:
            over.append(OverLimit(name, limit, used, requested))
    return over
