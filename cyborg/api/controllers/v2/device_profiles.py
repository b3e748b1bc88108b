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

"""/v2/device_profiles: list, show, create, update and delete device
profiles."""

import json

from oslo_log import log as logging
from oslo_utils import uuidutils
import pecan

from cyborg.api import microversion
from cyborg.api import validation
from cyborg.api.controllers import base
from cyborg.api.controllers import routing
from cyborg.api.schemas import device_profile as schema
from cyborg.common import exception
from cyborg.db import device_profiles as profiles_db
from cyborg.db import taints as taints_db
from cyborg.domain import alternatives
from cyborg.domain import device_profile as dp_rules
from cyborg.domain import implicit_profiles
from cyborg.domain import tolerations
from cyborg.policies import device_profile as policy

COLLECTION = 'device_profiles'
LOG = logging.getLogger(__name__)


def view(profile: dict, active_taints: dict | None = None,
         chosen: dict[int, int] | None = None) -> dict:
    """The API form of ``profile``; with ``active_taints`` (``{key:
    values}`` of the active scheduling taints), its groups as Nova must
    read them: each forbids the taint traits it does not tolerate.

    From 2.9 a group with ordered alternatives is shown as stored (each
    alternative forbidding those taint traits), and ``enabled`` is
    shown. Below (what Nova reads), in the plain form: the alternative
    ``chosen`` names for it (by group index), its first by default; and a
    disabled profile's groups are those of
    :func:`cyborg.domain.device_profile.disabled_groups`, so that a new
    boot fails in the scheduler at once.
    """
    at_updates = base.version_at_least(microversion.PROFILE_UPDATES)
    groups = profile['groups']
    if not at_updates and not profile.get('enabled', True):
        groups = dp_rules.disabled_groups(profile['name'])
    elif active_taints or not at_updates:
        if not at_updates:
            groups = alternatives.resolve(groups, chosen or {})
        groups = [_with_forbidden_taints(group, active_taints or {})
                  for group in groups]
    result = {
        'uuid': profile['uuid'],
        'name': profile['name'],
        'description': profile['description'],
        'groups': groups,
        'created_at': base.timestamp(profile['created_at']),
        'updated_at': base.timestamp(profile['updated_at']),
        'links': [base.link(COLLECTION, profile['uuid'])],
    }
    if at_updates:
        result['enabled'] = bool(profile.get('enabled', True))
    return result


def _with_forbidden_taints(group: dict, active: dict) -> dict:
    """:func:`tolerations.with_forbidden_taints` for a plain group, or
    for each alternative of a group that lists them."""
    if not dp_rules.has_alternatives(group):
        return tolerations.with_forbidden_taints(group, active)
    options = [tolerations.with_forbidden_taints(option, active)
               for option in dp_rules.options(group)]
    common = {key: value for key, value in group.items()
              if key != dp_rules.ALTERNATIVES}
    return dict(common, **{dp_rules.ALTERNATIVES: [
        {key: value for key, value in option.items() if key not in common}
        for option in options]})


def _chosen_alternatives(context, profile: dict,
                         active: dict | None) -> dict[int, int]:
    """For each group of ``profile`` with alternatives (by index), the
    first Placement can satisfy now, as the conductor's probe found it
    (through the API process's cache; see :mod:`cyborg.domain.
    alternatives`); the first where the probe cannot be made (a
    conductor older than RPC 1.7, or none answering)."""
    wanted = {}
    for index, group in enumerate(profile['groups']):
        if dp_rules.has_alternatives(group):
            options = [tolerations.with_forbidden_taints(option, active or {})
                       for option in dp_rules.options(group)]
            wanted[index] = (json.dumps(options, sort_keys=True), options)
    if not wanted:
        return {}

    # The probe may run in a background thread, without pecan.request.
    conductor_api = pecan.request.conductor_api

    def probe(candidates: list) -> list[int]:
        try:
            return conductor_api.alternatives_probe(context, candidates)
        except Exception as e:
            # The read must not fail for want of a probe: Nova then asks
            # for the first alternative, as for a plain group.
            LOG.warning('Cannot probe the alternatives of device profile '
                        '%s, answering their first: %s', profile['name'], e)
            raise _ProbeFailed() from e

    try:
        by_key = pecan.request.profile_cache.chosen_alternatives(
            dict(wanted.values()), probe)
    except _ProbeFailed:
        return {}
    return {index: by_key[key] for index, (key, _options) in wanted.items()}


class _ProbeFailed(Exception):
    """The conductor could not probe the alternatives (logged)."""


def _identities(value: str) -> list[tuple[str, str]]:
    """What a delete names: one uuid, or a comma-separated name list."""
    if uuidutils.is_uuid_like(value):
        return [('uuid', validation.canonical_uuid(value))]
    names = value.split(',')
    if not all(names):
        raise exception.Invalid(reason='empty device profile name in %r'
                                % value)
    for name in names:
        implicit_profiles.check_writable(name)
    return [('name', name) for name in dict.fromkeys(names)]


def _implicit(context, wanted: list[str] | None, stored: list[dict]
              ) -> list[dict]:
    """The implicit profiles (of the reported resource classes) among
    the names ``wanted`` (None: all) that are not ``stored``."""
    if wanted is not None and not any(
            implicit_profiles.is_implicit(name) for name in wanted):
        return []  # no query: the common case of Nova's reads
    have = {profile['name'] for profile in stored}
    found = [implicit_profiles.profile(rc) for rc in
             profiles_db.reported_resource_classes(context)]
    return [profile for profile in found if profile['name'] not in have
            and (wanted is None or profile['name'] in wanted)]


def _implicit_by_uuid(context, uuid: str) -> dict | None:
    for rc in profiles_db.reported_resource_classes(context):
        profile = implicit_profiles.profile(rc)
        if profile['uuid'] == uuid:
            return profile
    return None


def _active_taints(context) -> dict:
    """The active scheduling taints, through the API process's cache
    (one query at most)."""
    return pecan.request.profile_cache.active_taints(
        lambda: taints_db.active_scheduling_taints(context))


def _check_tolerations_allowed(groups: list) -> None:
    """Tolerations are new at the device taints microversion: below it,
    a toleration key is refused as any unknown key was."""
    if base.version_at_least(microversion.DEVICE_TAINTS):
        return
    for index, group in enumerate(groups):
        for key in group:
            if key.partition(':')[0].strip() == tolerations.PREFIX:
                raise exception.InvalidParameterValue(
                    err='Device profile group keys must be of the form '
                        'resources:<RC>, trait:<TRAIT> or accel:<key>, '
                        'not %r (group %d)' % (key, index))


def _check_alternatives_allowed(groups: list) -> None:
    """Ordered alternatives are new at 2.9: below it, the key is refused
    as any key that is not prefixed was."""
    if base.version_at_least(microversion.PROFILE_UPDATES):
        return
    for index, group in enumerate(groups):
        if dp_rules.ALTERNATIVES in group:
            raise exception.InvalidParameterValue(
                err='Device profile group keys must be of the form '
                    'resources:<RC>, trait:<TRAIT> or accel:<key>, not %r '
                    '(group %d); alternatives need microversion %s' % (
                        dp_rules.ALTERNATIVES, index,
                        microversion.as_string(
                            microversion.PROFILE_UPDATES)))


def _valid_groups(groups: list) -> list[dict]:
    """``groups`` in canonical form, checked as at creation."""
    _check_tolerations_allowed(groups)
    _check_alternatives_allowed(groups)
    groups = dp_rules.normalize_groups(
        groups, pecan.request.conf.api.max_accelerators_per_profile)
    # As the database stores them (db.device_profiles.device_profile_create).
    validation.check_text_size(json.dumps({'groups': groups}), 'groups')
    return groups


def _creation_values(body: list[dict]) -> dict:
    values = dict(body[0])
    if uuidutils.is_uuid_like(values['name']):
        raise exception.Invalid(reason='Device profile name %s must not be '
                                       'a UUID' % values['name'])
    if 'uuid' in values:
        if not uuidutils.is_uuid_like(values['uuid']):
            raise exception.InvalidUUID(uuid=values['uuid'])
        values['uuid'] = validation.canonical_uuid(values['uuid'])
    values['groups'] = _valid_groups(values['groups'])
    return values


def _update_values(body: dict) -> dict:
    """What a PATCH changes, checked as at creation."""
    values = dict(body)
    if 'groups' in values:
        values['groups'] = _valid_groups(values['groups'])
    return values


def _profile_uuid(context, ident: str) -> str:
    """The uuid of the profile ``ident`` (a uuid or a name) names."""
    implicit_profiles.check_writable(ident)
    if not uuidutils.is_uuid_like(ident):
        return profiles_db.device_profile_get(context, name=ident)['uuid']
    uuid = validation.canonical_uuid(ident)
    implicit = _implicit_by_uuid(context, uuid)
    if implicit is not None:  # not stored yet: the database cannot say
        implicit_profiles.check_writable(implicit['name'])
    return uuid


def _list_one_name(context, name: str) -> list[dict]:
    """Nova's lookup of one profile by name, through the cache."""
    cache = pecan.request.profile_cache
    profile = cache.get(name)
    if profile is not None:
        return [profile]
    profiles = profiles_db.device_profile_list(context, [name])
    if len(profiles) == 1:
        cache.put(profiles[0])
    return profiles


class DeviceProfilesController(routing.Resource):

    member_only = frozenset({'patch'})

    @pecan.expose('json')
    @base.endpoint(policy.GET_ALL, query=schema.LIST_QUERY)
    def get_all(self, *, context, query):
        names = query['name'].split(',') if 'name' in query else None
        if names == ['']:
            names = []
        if names is not None and len(names) == 1:
            profiles = _list_one_name(context, names[0])
        else:
            profiles = profiles_db.device_profile_list(context, names)
        if names is not None:
            profiles += _implicit(context, names, profiles)
        elif base.version_at_least(microversion.PROFILE_UPDATES):
            profiles += _implicit(context, None, profiles)
        else:
            # The full list of an older client stays as it was.
            profiles = [p for p in profiles
                        if not implicit_profiles.is_implicit(p['name'])]
        # Nova reads a profile by name (at any microversion) at every
        # schedule: what it reads forbids the taints it does not tolerate.
        active = (_active_taints(context) if names is not None and profiles
                  else None)
        # Below 2.9, the groups of a profile read by name are each the
        # alternative Placement can satisfy now (Nova's read).
        probe = (names is not None
                 and not base.version_at_least(microversion.PROFILE_UPDATES))
        return base.render({COLLECTION: [
            view(p, active,
                 _chosen_alternatives(context, p, active) if probe else None)
            for p in profiles]})

    @pecan.expose('json')
    @base.endpoint(policy.GET_ONE)
    def get_one(self, ident, *, context, query):
        if uuidutils.is_uuid_like(ident):
            uuid = validation.canonical_uuid(ident)
            try:
                profile = profiles_db.device_profile_get(context, uuid=uuid)
            except exception.DeviceProfileNotFound:
                profile = _implicit_by_uuid(context, uuid)
                if profile is None:
                    raise
        elif base.version_at_least(microversion.DEVICE_PROFILE_BY_NAME):
            try:
                profile = profiles_db.device_profile_get(context, name=ident)
            except exception.DeviceProfileNotFound:
                implicit = _implicit(context, [ident], [])
                if not implicit:
                    raise
                profile = implicit[0]
        else:
            raise exception.MicroversionTooLow(
                version=microversion.as_string(
                    microversion.DEVICE_PROFILE_BY_NAME))
        active = _active_taints(context)
        chosen = (None if base.version_at_least(microversion.PROFILE_UPDATES)
                  else _chosen_alternatives(context, profile, active))
        return base.render({'device_profile': view(profile, active,
                                                   chosen)})

    @pecan.expose('json')
    @base.endpoint(policy.CREATE, body=schema.CREATE,
                   normalize=schema.as_list)
    def post(self, *, context, query, body):
        values = _creation_values(body)
        profile = pecan.request.conductor_api.device_profile_create(
            context, values)
        pecan.request.profile_cache.clear()
        return base.render(view(profile), status=201)

    @pecan.expose('json')
    @base.endpoint(policy.UPDATE, body=schema.UPDATE)
    def patch(self, ident, *, context, query, body):
        if not base.version_at_least(microversion.PROFILE_UPDATES):
            raise exception.MicroversionTooLow(
                version=microversion.as_string(microversion.PROFILE_UPDATES))
        values = _update_values(body)
        uuid = _profile_uuid(context, ident)
        try:
            profile = pecan.request.conductor_api.device_profile_update(
                context, uuid, values)
        finally:
            pecan.request.profile_cache.clear()
        return base.render({'device_profile': view(profile)})

    @pecan.expose('json')
    @base.endpoint(policy.DELETE, query=schema.DELETE_QUERY)
    def delete(self, ident=None, *, context, query):
        value = ident if ident is not None else query.get('value')
        if not value:
            raise exception.Invalid(reason='Missing argument: "value"')
        try:
            pecan.request.conductor_api.device_profile_delete(
                context, [list(i) for i in _identities(value)])
        finally:
            pecan.request.profile_cache.clear()
        return base.no_content()
