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

"""Device profiles: the rules for their groups and their API form."""

import re
from typing import Any

from oslo_utils import uuidutils

from cyborg.common import exception
from cyborg.domain import resource_names
from cyborg.domain import tolerations

RESOURCES = 'resources'
# Most accelerators one group may request (each becomes an ARQ).
MAX_AMOUNT = 1024
_DIGITS = re.compile(r'^[0-9]+$')
TRAIT = 'trait'
ACCEL = 'accel'
TRAIT_VALUES = ('required', 'forbidden')
ATTACH_TARGETS = ('VM', 'host', 'none')
# A group's ordered alternatives (microversion 2.9): a list of
# {resources:<RC>, trait:<TRAIT>} dicts, the first Placement can satisfy
# being what the group asks for (see cyborg.domain.alternatives).
ALTERNATIVES = 'alternatives'
MAX_ALTERNATIVES = 8
# The keys an alternative may hold; the group's other keys (accel:,
# toleration:) apply to whichever alternative is chosen.
ALTERNATIVE_PREFIXES = (RESOURCES, TRAIT)

# accel: keys and how their values are checked.
_UUID = 'uuid'
_NAME = 'name'
ACCEL_KEYS = {
    'bitstream_id': _UUID,
    'bitstream_name': _NAME,
    'function_id': _UUID,
    'function_name': _NAME,
    'attach_target': ATTACH_TARGETS,
}


# accel: keys that ask for the deployable to be programmed at bind.
PROGRAM_KEYS = ('bitstream_id', 'bitstream_name', 'function_id',
                'function_name')


def program_request(group: dict[str, Any]) -> dict[str, str]:
    """What a (normalized) group asks its deployable to be programmed
    with: its ``accel:bitstream_*`` or ``accel:function_*`` values, by
    key without the prefix; empty when it asks for nothing."""
    return {key: group[ACCEL + ':' + key] for key in PROGRAM_KEYS
            if ACCEL + ':' + key in group}


def _invalid(message: str, *args) -> exception.InvalidParameterValue:
    return exception.InvalidParameterValue(err=message % args)


def _resource_amount(key: str, value: Any) -> str:
    text = str(value).strip()
    if (isinstance(value, bool) or not isinstance(value, (int, str))
            or _DIGITS.match(text) is None
            or not 1 <= int(text) <= MAX_AMOUNT):
        raise _invalid('Resources number %r of %s must be an integer from 1 '
                       'to %d', value, key, MAX_AMOUNT)
    return str(int(text))


def _accel_value(key: str, value: Any) -> str:
    kind = ACCEL_KEYS.get(key)
    if kind is None:
        raise _invalid('Unsupported accel key accel:%s; valid keys are %s',
                       key, ', '.join(sorted(ACCEL_KEYS)))
    if not isinstance(value, str):
        raise _invalid('Value of accel:%s must be a string', key)
    if kind == _UUID and not uuidutils.is_uuid_like(value):
        raise _invalid('Value of accel:%s must be a UUID, not %r', key, value)
    if isinstance(kind, tuple) and value not in kind:
        raise _invalid('Value of accel:%s must be one of %s, not %r', key,
                       ', '.join(kind), value)
    if kind == _NAME and not value:
        raise _invalid('Value of accel:%s must not be empty', key)
    return value


def _rc_hint(name: str) -> str:
    if name == 'GPU':
        return ('; GPU is not a Placement resource class, use PGPU for a '
                'whole GPU or VGPU for a virtual GPU')
    return '; use a standard resource class or CUSTOM_<NAME>'


def normalize_group(index: int, group: dict[str, Any]) -> dict[str, Any]:
    """Validate one request group and return it in canonical form.

    Resource class and trait names are upper-cased with hyphens turned
    into underscores; resource amounts become strings.
    """
    if ALTERNATIVES in group:
        return _normalize_alternatives_group(index, group)
    result = _normalize_keys(index, group)
    _check_group_consistency(index, result)
    return result


def _normalize_keys(index: int, group: dict[str, Any]) -> dict[str, str]:
    """The keys of ``group`` (or of an alternative of group ``index``)
    in canonical form, each checked alone."""
    result: dict[str, str] = {}
    for key, value in group.items():
        prefix, sep, name = key.partition(':')
        prefix = prefix.strip()
        if not sep or prefix not in (RESOURCES, TRAIT, ACCEL,
                                     tolerations.PREFIX):
            raise _invalid('Device profile group keys must be of the form '
                           'resources:<RC>, trait:<TRAIT>, accel:<key> or '
                           'toleration:<taint key>, not %r (group %d)',
                           key, index)
        if prefix == RESOURCES:
            name = resource_names.normalize(name)
            if not resource_names.is_valid_resource_class(name):
                raise _invalid('Unsupported resource class %s (group %d)%s',
                               name, index, _rc_hint(name))
            value = _resource_amount(key, value)
        elif prefix == TRAIT:
            name = resource_names.normalize(name)
            if not resource_names.is_valid_trait(name):
                raise _invalid('Unsupported trait name %s (group %d); use a '
                               'standard trait or CUSTOM_<NAME>', name, index)
            if value not in TRAIT_VALUES:
                raise _invalid('Unsupported trait value %r of %s, the value '
                               'must be one among %s', value, key,
                               list(TRAIT_VALUES))
        elif prefix == tolerations.PREFIX:
            name = name.strip()
            try:
                tolerations.parse_value(name, value)
            except ValueError as e:
                raise _invalid('%s (group %d)', e, index)
        else:
            name = name.strip()
            value = _accel_value(name, value)
        canonical = '%s:%s' % (prefix, name)
        if canonical in result:
            raise _invalid('Key %s appears twice in group %d', canonical,
                           index)
        result[canonical] = value
    return result


def _normalize_alternatives_group(index: int, group: dict[str, Any]
                                  ) -> dict[str, Any]:
    """A group with ordered alternatives, in canonical form: each
    alternative holds only resources: and trait: keys (at least one
    resource) and requests as many accelerators as the others (the
    ARQs are created before the alternative is known); the group's own
    keys (accel:, toleration:) are checked as in any group."""
    common = {key: value for key, value in group.items()
              if key != ALTERNATIVES}
    alternatives = group[ALTERNATIVES]
    if (not isinstance(alternatives, list)
            or not 1 <= len(alternatives) <= MAX_ALTERNATIVES):
        raise _invalid('%s of group %d must be a list of 1 to %d '
                       'alternatives', ALTERNATIVES, index,
                       MAX_ALTERNATIVES)
    result: dict[str, Any] = _normalize_keys(index, common)
    for key in result:
        if key.partition(':')[0] in ALTERNATIVE_PREFIXES:
            raise _invalid('Group %d lists alternatives: its key %s must be '
                           'in each alternative instead', index, key)
    normalized = []
    for position, alternative in enumerate(alternatives):
        if not isinstance(alternative, dict) or not alternative:
            raise _invalid('Alternative %d of group %d must be an object '
                           'of resources:<RC> and trait:<TRAIT> keys',
                           position, index)
        keys = _normalize_keys(index, alternative)
        for key in keys:
            if key.partition(':')[0] not in ALTERNATIVE_PREFIXES:
                raise _invalid('Alternative %d of group %d may hold only '
                               'resources:<RC> and trait:<TRAIT> keys, not '
                               '%s (give it to the group)', position, index,
                               key)
        _check_group_consistency(index, dict(result, **keys))
        normalized.append(keys)
    counts = {accelerator_count(alternative) for alternative in normalized}
    if len(counts) > 1:
        raise _invalid('The alternatives of group %d request different '
                       'numbers of accelerators (%s); each must request '
                       'as many', index,
                       ', '.join(str(c) for c in sorted(counts)))
    result[ALTERNATIVES] = normalized
    return result


def has_alternatives(group: dict[str, Any]) -> bool:
    return ALTERNATIVES in group


def options(group: dict[str, Any]) -> list[dict[str, Any]]:
    """The plain groups (Nova's form: no alternatives) ``group`` may
    stand for, in its order: itself when it lists no alternatives; else
    each alternative with the group's other keys."""
    alternatives = group.get(ALTERNATIVES)
    if alternatives is None:
        return [group]
    common = {key: value for key, value in group.items()
              if key != ALTERNATIVES}
    return [dict(common, **alternative) for alternative in alternatives]


def _check_group_consistency(index: int, group: dict[str, str]) -> None:
    if not any(key.startswith(RESOURCES + ':') for key in group):
        raise _invalid('Group %d requests no resources; each group needs '
                       'at least one resources:<RC> key', index)
    has_bitstream = any(key.startswith(ACCEL + ':bitstream_') for key in group)
    has_function = any(key.startswith(ACCEL + ':function_') for key in group)
    if has_bitstream and has_function:
        raise _invalid('Group %d names both a bitstream and a function; '
                       'give only one of them', index)


def normalize_groups(groups: list[dict[str, Any]],
                     max_accelerators: int | None = None
                     ) -> list[dict[str, Any]]:
    """Every group in canonical form (:func:`normalize_group`); 400 when
    they request more than ``max_accelerators`` in total."""
    result = [normalize_group(i, group) for i, group in enumerate(groups)]
    if max_accelerators is not None:
        check_limit('Accelerators requested by the device profile',
                    total_accelerators(result), max_accelerators,
                    '[api] max_accelerators_per_profile')
    return result


def total_accelerators(groups: list[dict[str, Any]]) -> int:
    """How many accelerators (ARQs) a profile's groups request."""
    return sum(accelerator_count(group) for group in groups)


def check_limit(what: str, count: int, limit: int, option: str) -> None:
    """LimitExceeded (400) when ``count`` is above ``limit``."""
    if count > limit:
        raise exception.LimitExceeded(what=what, count=count, limit=limit,
                                      option=option)


def unmet(group: dict[str, Any], resource_class: str | None,
          traits: set[str]) -> list[str]:
    """What keeps a provider of ``resource_class`` with ``traits`` from
    satisfying request ``group`` (as Placement would match it: the group's
    resources and traits all on that one provider), one phrase per
    mismatch; empty when it satisfies the group.

    A group may name more than one resource class; the provider of one
    ARQ must offer one of them. Names are compared normalized, so groups
    stored before normalization match as they did in Placement.
    """
    wanted_classes = []
    required, forbidden = set(), set()
    for key, value in group.items():
        prefix, _sep, name = key.partition(':')
        prefix, name = prefix.strip(), resource_names.normalize(name)
        if prefix == RESOURCES:
            wanted_classes.append(name)
        elif prefix == TRAIT and value == 'required':
            required.add(name)
        elif prefix == TRAIT and value == 'forbidden':
            forbidden.add(name)
    problems = []
    if resource_class not in wanted_classes:
        problems.append('offers resource class %s, not %s' % (
            resource_class or '(none)', ' or '.join(sorted(wanted_classes))))
    problems += ['lacks required trait %s' % trait
                 for trait in sorted(required - traits)]
    problems += ['has forbidden trait %s' % trait
                 for trait in sorted(forbidden & traits)]
    return problems


def accelerator_count(group: dict[str, Any]) -> int:
    """How many accelerators (ARQs) one group requests (with
    alternatives: its first's, as many as any other's)."""
    group = options(group)[0]
    return sum(int(value) for key, value in group.items()
               if key.startswith(RESOURCES + ':'))


# Updates (PATCH at the profile updates microversion).

#: What an update may change; the name stays (flavors name the profile).
UPDATABLE = ('description', 'groups', 'enabled')

#: The resource class a disabled profile asks Nova for (see
#: :func:`disabled_groups`): never a class any provider has.
DISABLED_CLASS_PREFIX = 'CUSTOM_DEVICE_PROFILE_DISABLED_'
# Placement's longest resource class name.
_MAX_CLASS_LENGTH = 255


def disabled_class(name: str) -> str:
    """The resource class that stands for disabled profile ``name``:
    ``CUSTOM_DEVICE_PROFILE_DISABLED_<NAME>`` (upper-cased, hyphens as
    underscores, cut at Placement's longest name)."""
    return (DISABLED_CLASS_PREFIX
            + resource_names.normalize(name))[:_MAX_CLASS_LENGTH]


def disabled_groups(name: str) -> list[dict[str, str]]:
    """The groups Nova reads of disabled profile ``name``: one group
    asking for one unit of :func:`disabled_class`.

    No provider has that class, so Placement refuses the allocation
    candidates query (400, "No such resource class
    CUSTOM_DEVICE_PROFILE_DISABLED_<NAME>", which nova-scheduler logs)
    and the scheduler answers NoValidHost before it claims anything or
    asks this service for an ARQ: a new boot fails at once, the reason
    in the scheduler's log, and nothing is left to clean up. Answering
    an error or no profile instead would fail the boot in nova-api with
    a message that hides the reason ("Invalid response from Cyborg",
    "Expected 1 device profile but got nothing").
    """
    return [{RESOURCES + ':' + disabled_class(name): '1'}]


def changes(profile: dict[str, Any], values: dict[str, Any]
            ) -> dict[str, Any]:
    """The values of an update that differ from ``profile``'s."""
    return {key: value for key, value in values.items()
            if key in UPDATABLE and profile.get(key) != value}


def update_events(changed: dict[str, Any]) -> list[str]:
    """The notification events (suffixes of ``device_profile.``) of an
    update that changed ``changed``: ``update`` for the description or
    groups, ``enable`` or ``disable`` for ``enabled``."""
    events = []
    if 'description' in changed or 'groups' in changed:
        events.append('update')
    if 'enabled' in changed:
        events.append('enable' if changed['enabled'] else 'disable')
    return events
