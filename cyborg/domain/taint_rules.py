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

"""Taint rules: an operator's selector of devices and the taint it puts
on each device it selects (after Kubernetes' DeviceTaintRule, KEP-5055).

A selector holds at least one of:

* ``host``: a glob (``fnmatch``, case-sensitive) of the device's host;
* ``driver``, ``vendor``, ``model``: the device's, exactly;
* ``address``: a glob of the device's PCI address (``0000:5e:*``);
* ``attribute``: ``{key: value}``, each pair an attribute of one of the
  device's deployables.

A device is selected when it matches every criterion given. The rule's
taint is a :class:`cyborg.domain.taints.Taint` of source ``admin``; its
effect decides what applying the rule does:

* ``NoSchedule``: a taint row on every selected device (its providers
  get the taint's trait);
* ``NoExecute``: as NoSchedule, and every ARQ bound on a selected device
  is marked (:data:`MARKED_BY` names the taint) and announced;
* ``None``: a dry run. Nothing is written; the rule's status lists what
  it would affect.

Dependency-free: the API validates with it, the database layer selects
with it.
"""

import fnmatch
import re
from typing import Any
from typing import Callable
from typing import Iterable
from typing import Mapping

from cyborg.domain import taints

#: The criteria a selector may hold.
SELECTOR_FIELDS = ('host', 'driver', 'vendor', 'model', 'address',
                   'attribute')
#: Criteria compared as globs; the others exactly.
GLOB_FIELDS = ('host', 'address')
#: Longest text of one criterion (a column's width).
CRITERION_MAX_LENGTH = 255
#: Most attribute pairs in one selector.
ATTRIBUTES_MAX = 16

#: Which device column each plain criterion compares.
_COLUMNS = {'host': 'hostname', 'driver': 'driver', 'vendor': 'vendor',
            'model': 'model', 'address': 'address'}


def check_selector(selector: Any) -> dict[str, Any]:
    """``selector`` if it is valid (see the module); ValueError saying
    why not. An empty selector is refused: a rule for every device of
    the fleet is too easy to create by mistake."""
    if not isinstance(selector, dict):
        raise ValueError('a selector is an object')
    unknown = sorted(set(selector) - set(SELECTOR_FIELDS))
    if unknown:
        raise ValueError('unknown selector field(s) %s; known: %s'
                         % (', '.join(unknown), ', '.join(SELECTOR_FIELDS)))
    if not selector:
        raise ValueError('a selector needs at least one of %s'
                         % ', '.join(SELECTOR_FIELDS))
    for field, value in selector.items():
        if field == 'attribute':
            _check_attributes(value)
        elif (not isinstance(value, str) or not value
              or len(value) > CRITERION_MAX_LENGTH):
            raise ValueError('selector field %s must be a non-empty string '
                             'of at most %d characters'
                             % (field, CRITERION_MAX_LENGTH))
    return selector


def _check_attributes(value: Any) -> None:
    if (not isinstance(value, dict) or not value
            or len(value) > ATTRIBUTES_MAX):
        raise ValueError('selector field attribute must be an object of '
                         '1 to %d key: value pairs' % ATTRIBUTES_MAX)
    for key, text in value.items():
        if (not key or not isinstance(text, str)
                or len(key) > CRITERION_MAX_LENGTH
                or len(text) > CRITERION_MAX_LENGTH):
            raise ValueError('selector attribute %r must be a non-empty '
                             'key with a string value, each of at most %d '
                             'characters' % (key, CRITERION_MAX_LENGTH))


def rule_taint(key: str, effect: str, value: str | None = '',
               reason: str | None = '') -> taints.Taint:
    """The admin taint of a rule (ValueError if it is invalid)."""
    return taints.Taint(key=key, effect=taints.Effect(effect),
                        value=value or '',
                        source=taints.Source.ADMIN, reason=reason or '')


def is_dry_run(effect: str) -> bool:
    """Whether a rule of ``effect`` only tells what it would affect."""
    return taints.Effect(effect) is taints.Effect.NONE


def marks_arqs(effect: str) -> bool:
    """Whether a rule of ``effect`` marks the ARQs bound on its
    devices."""
    return taints.Effect(effect) is taints.Effect.NO_EXECUTE


def marked_by(key: str) -> str:
    """What an ARQ's ``taint_marked_by`` says of the taint that marked
    it."""
    return key


def needs_attributes(selector: Mapping[str, Any]) -> bool:
    """Whether matching ``selector`` needs the devices' attributes."""
    return 'attribute' in selector


def exact_criteria(selector: Mapping[str, Any]) -> dict[str, str]:
    """``{device column: value}`` of the criteria compared exactly: a
    database may narrow its candidates with them before
    :func:`matches` decides."""
    return {_COLUMNS[field]: value for field, value in selector.items()
            if field in _COLUMNS and field not in GLOB_FIELDS}


def matcher(selector: Mapping[str, Any]
            ) -> Callable[[Mapping[str, Any], Mapping[str, Iterable[str]]
                           | None], bool]:
    """:func:`matches` of ``selector``, its globs compiled once: for
    selecting among many devices."""
    plain = [(_COLUMNS[field], value) for field, value in selector.items()
             if field in _COLUMNS and field not in GLOB_FIELDS]
    globs = [(_COLUMNS[field], re.compile(fnmatch.translate(value)).match)
             for field, value in selector.items() if field in GLOB_FIELDS]
    wanted = list(selector.get('attribute', {}).items())

    def match(device: Mapping[str, Any],
              attributes: Mapping[str, Iterable[str]] | None = None) -> bool:
        for column, value in plain:
            if device.get(column) != value:
                return False
        for column, glob in globs:
            actual = device.get(column)
            if actual is None or glob(actual) is None:
                return False
        if wanted:
            found = attributes or {}
            return all(text in found.get(key, ()) for key, text in wanted)
        return True
    return match


def matches(selector: Mapping[str, Any], device: Mapping[str, Any],
            attributes: Mapping[str, Iterable[str]] | None = None) -> bool:
    """Whether ``device`` (a mapping with ``hostname``, ``driver``,
    ``vendor``, ``model`` and ``address``) matches every criterion of
    ``selector``: the globs case-sensitively (``fnmatch``), the others
    exactly; ``attributes``: ``{key: values}`` of the attributes of its
    deployables (needed only if :func:`needs_attributes`)."""
    return matcher(selector)(device, attributes)


def status(devices: Iterable[Mapping[str, Any]],
           arqs: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """A rule's status: the devices it affects (or, for a dry run,
    would affect), the ARQs bound on them, their instances and
    projects, each list sorted (a stable answer)."""
    arqs = list(arqs)
    return {
        'devices': sorted(({'uuid': d['uuid'], 'hostname': d['hostname'],
                            'address': d['address']} for d in devices),
                          key=lambda d: (d['hostname'], d['address'])),
        'arqs': sorted(arq['uuid'] for arq in arqs),
        'instances': sorted({arq['instance_uuid'] for arq in arqs
                             if arq['instance_uuid']}),
        'projects': sorted({arq['project_id'] for arq in arqs
                            if arq['project_id']}),
    }
