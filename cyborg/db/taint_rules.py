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

"""Taint rules in the database, and the admin taints they put on devices.

A rule is one ``device_taint_rules`` row (its selector as JSON). A rule
that is not a dry run holds one ``device_taints`` row per device it
selects (``source`` admin, ``origin`` the rule's uuid, ``rule_id`` its
row), written with the rule in one transaction that also counts a
Placement sync request of every host concerned; a device reported later
gets the rows of the rules that select it in the report's transaction
(:func:`taint_new_devices`). Deleting a rule removes its rows, and the
marks its NoExecute taint left on ARQs that no other NoExecute taint of
the same key holds, again with a sync request of its hosts.

Which devices a selector selects is :mod:`cyborg.domain.taint_rules`'s
to say; the statements here narrow the candidates with its exact
criteria, whatever the number of devices: one statement for the devices,
one for their attributes (only for a selector of attributes), one for
the ARQs bound on them.
"""

import dataclasses
import json
from typing import Any

from oslo_utils import timeutils
from oslo_utils import uuidutils
import sqlalchemy as sa

from cyborg.common import constants
from cyborg.common import exception
from cyborg.conf import CONF
from cyborg.db import api as db_api
from cyborg.db import taints as taints_db
from cyborg.db.models import ARQS
from cyborg.db.models import ATTRIBUTES
from cyborg.db.models import DEPLOYABLES
from cyborg.db.models import DEVICES
from cyborg.db.models import SERVICES
from cyborg.db.models import TAINT_RULES
from cyborg.db.models import TAINTS
from cyborg.domain import arq_states
from cyborg.domain import taint_rules as rules
from cyborg.domain import taints

_DEVICE_COLUMNS = (DEVICES.c.id, DEVICES.c.uuid, DEVICES.c.hostname,
                   DEVICES.c.address, DEVICES.c.driver, DEVICES.c.vendor,
                   DEVICES.c.model)
_ARQ_COLUMNS = (ARQS.c.uuid, ARQS.c.instance_uuid, ARQS.c.project_id,
                ARQS.c.hostname, DEVICES.c.uuid.label('device_uuid'),
                DEPLOYABLES.c.device_id)


@dataclasses.dataclass
class Applied:
    """What creating a rule did: the rule, the hosts whose providers
    must be synced, the devices it tainted and the ARQs it marked
    (each with its instance, project, host and device uuid)."""

    rule: dict[str, Any]
    hosts: list[str]
    devices: list[dict[str, Any]]
    marked: list[dict[str, Any]]


def _rule(row) -> dict[str, Any]:
    values = dict(row._mapping)
    values['selector'] = json.loads(values['selector'])
    return values


def _get(connection, uuid: str, lock: bool = False):
    query = sa.select(TAINT_RULES).where(TAINT_RULES.c.uuid == uuid)
    if lock:
        query = query.with_for_update()
    row = connection.execute(query).first()
    if row is None:
        raise exception.TaintRuleNotFound(uuid=uuid)
    return row


@db_api.connection_reader
def rule_list(context) -> list[dict[str, Any]]:
    """Every taint rule, oldest first."""
    return [_rule(row) for row in context.connection.execute(
        sa.select(TAINT_RULES).order_by(TAINT_RULES.c.id))]


@db_api.connection_reader
def rule_get(context, uuid: str) -> dict[str, Any]:
    """One taint rule; TaintRuleNotFound if there is none."""
    return _rule(_get(context.connection, uuid))


@db_api.connection_reader
def rule_status(context, rule: dict[str, Any]) -> dict[str, Any]:
    """The status of ``rule`` (see
    :func:`cyborg.domain.taint_rules.status`): for a dry run, what it
    would affect now; otherwise what it holds a taint on."""
    connection = context.connection
    if rules.is_dry_run(rule['effect']):
        devices = _selected(connection, rule['selector'])
        arqs = _bound_arqs(connection, rule['selector'], devices)
    else:
        devices = _devices(connection.execute(
            sa.select(*_DEVICE_COLUMNS).join(
                TAINTS, TAINTS.c.device_id == DEVICES.c.id).where(
                TAINTS.c.origin == rule['uuid'])))
        arqs = _dicts(connection.execute(
            _bound_query().join(
                TAINTS, TAINTS.c.device_id == DEPLOYABLES.c.device_id).where(
                TAINTS.c.origin == rule['uuid'])))
    return rules.status(devices, arqs)


def _narrowed(query, selector: dict[str, Any]):
    """``query`` (of DEVICES) with the selector's exact criteria."""
    for column, value in rules.exact_criteria(selector).items():
        query = query.where(DEVICES.c[column] == value)
    host = selector.get('host')
    # A host without a glob character is compared exactly: the index.
    if host is not None and not any(c in host for c in '*?['):
        query = query.where(DEVICES.c.hostname == host)
    return query


def _attributes(connection, selector: dict[str, Any]
                ) -> dict[int, dict[str, set[str]]]:
    """``{device id: {key: values}}`` of the attributes the selector
    names, on the devices its exact criteria narrow to."""
    found: dict[int, dict[str, set[str]]] = {}
    query = _narrowed(sa.select(DEPLOYABLES.c.device_id, ATTRIBUTES.c.key,
                                ATTRIBUTES.c.value).select_from(
        ATTRIBUTES.join(DEPLOYABLES,
                        DEPLOYABLES.c.id == ATTRIBUTES.c.deployable_id).join(
            DEVICES, DEVICES.c.id == DEPLOYABLES.c.device_id)), selector)
    query = query.where(ATTRIBUTES.c.key.in_(sorted(selector['attribute'])))
    for row in connection.execute(query):
        found.setdefault(row.device_id, {}).setdefault(
            row.key, set()).add(row.value)
    return found


def _dicts(result) -> list[dict[str, Any]]:
    """The rows of ``result`` as dicts (cheaper than ``row._mapping``
    for the thousands of rows a fleet-wide selector reads)."""
    keys = list(result.keys())
    return [dict(zip(keys, row, strict=True)) for row in result]


def _devices(result) -> list[dict[str, Any]]:
    """Rows of :data:`_DEVICE_COLUMNS` as dicts, built directly (the
    fleet-wide dry run's hot loop)."""
    return [{'id': id_, 'uuid': uuid, 'hostname': hostname,
             'address': address, 'driver': driver, 'vendor': vendor,
             'model': model}
            for id_, uuid, hostname, address, driver, vendor, model
            in result]


def _select(devices: list[dict[str, Any]], selector: dict[str, Any],
            attributes: dict[int, dict[str, set[str]]] | None
            ) -> list[dict[str, Any]]:
    match = rules.matcher(selector)
    if attributes is None:
        return [device for device in devices if match(device)]
    return [device for device in devices
            if match(device, attributes.get(device['id']))]


def _selected(connection, selector: dict[str, Any]) -> list[dict[str, Any]]:
    """The devices ``selector`` selects (id, uuid, hostname, address,
    driver, vendor, model)."""
    attributes = (_attributes(connection, selector)
                  if rules.needs_attributes(selector) else None)
    return _select(_devices(connection.execute(_narrowed(
        sa.select(*_DEVICE_COLUMNS), selector))), selector, attributes)


def _bound_query():
    return sa.select(*_ARQ_COLUMNS).select_from(
        ARQS.join(DEPLOYABLES, DEPLOYABLES.c.id == ARQS.c.deployable_id).join(
            DEVICES, DEVICES.c.id == DEPLOYABLES.c.device_id)).where(
        ARQS.c.state == arq_states.BOUND)


def _bound_arqs(connection, selector: dict[str, Any],
                devices: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ARQs bound on ``devices`` (selected by ``selector``)."""
    if not devices:
        return []
    ids = {device['id'] for device in devices}
    return [{'uuid': uuid, 'instance_uuid': instance, 'project_id': project,
             'hostname': hostname, 'device_uuid': device_uuid,
             'device_id': device_id}
            for uuid, instance, project, hostname, device_uuid, device_id
            in connection.execute(_narrowed(_bound_query(), selector))
            if device_id in ids]


def _count_sync_requests(connection, hosts: list[str]) -> None:
    """A Placement sync request of each of ``hosts``, in the caller's
    transaction (as :func:`cyborg.db.services.count_sync_request`, in
    one statement)."""
    if hosts:
        connection.execute(sa.update(SERVICES).where(
            SERVICES.c.host.in_(hosts),
            SERVICES.c.binary == constants.BINARY_AGENT).values(
            sync_requested=SERVICES.c.sync_requested + 1))


def _taint_rows(rule, devices: list[dict[str, Any]], now) -> list[dict]:
    return [{'device_id': device['id'], 'key': rule.key,
             'value': rule.value, 'effect': rule.effect,
             'source': taints.Source.ADMIN.value, 'origin': rule.uuid,
             'rule_id': rule.id, 'reason': rule.reason, 'created_at': now}
            for device in devices]


@db_api.connection_writer
def rule_create(context, values: dict[str, Any]) -> Applied:
    """Insert a rule (``selector``, ``key``, ``value``, ``effect``,
    ``reason``, ``name``, ``description``, all valid) and apply it: a
    dry run writes the rule alone."""
    connection = context.connection
    if not rules.is_dry_run(values['effect']):
        # Every key becomes a trait each untolerating group forbids: the
        # number of keys is bounded ([taints] max_keys).
        limit = CONF.taints.max_keys
        if taints_db.keys_over_limit(connection, [values['key']], limit):
            raise exception.TaintKeyLimitReached(key=values['key'],
                                                 limit=limit)
    now = timeutils.utcnow()
    uuid = uuidutils.generate_uuid()
    connection.execute(sa.insert(TAINT_RULES).values(
        uuid=uuid, name=values.get('name'),
        description=values.get('description'),
        selector=json.dumps(values['selector'], sort_keys=True),
        key=values['key'], value=values.get('value') or '',
        effect=values['effect'], reason=values.get('reason') or None,
        created_at=now))
    row = _get(connection, uuid)
    if rules.is_dry_run(row.effect):
        return Applied(_rule(row), [], [], [])
    selector = json.loads(row.selector)
    devices = _selected(connection, selector)
    if devices:
        connection.execute(sa.insert(TAINTS), _taint_rows(row, devices, now))
    hosts = sorted({device['hostname'] for device in devices})
    _count_sync_requests(connection, hosts)
    marked: list[dict[str, Any]] = []
    if rules.marks_arqs(row.effect):
        marked = _bound_arqs(connection, selector, devices)
        if marked:
            connection.execute(sa.update(ARQS).where(
                ARQS.c.uuid.in_([arq['uuid'] for arq in marked]),
                ARQS.c.taint_marked_at.is_(None)).values(
                taint_marked_at=now, taint_marked_by=rules.marked_by(row.key)))
    return Applied(_rule(row), hosts, devices, marked)


@db_api.connection_writer
def rule_delete(context, uuid: str) -> tuple[dict[str, Any], list[str]]:
    """Delete a rule and its taints; the rule and the hosts whose
    providers must be synced. The marks its NoExecute taint left go,
    unless another NoExecute taint of the key holds the ARQ's device."""
    connection = context.connection
    row = _get(connection, uuid, lock=True)
    hosts = sorted(connection.execute(
        sa.select(DEVICES.c.hostname).distinct().join(
            TAINTS, TAINTS.c.device_id == DEVICES.c.id).where(
            TAINTS.c.origin == uuid)).scalars())
    if rules.marks_arqs(row.effect):
        _clear_marks(connection, row)
    connection.execute(sa.delete(TAINTS).where(TAINTS.c.origin == uuid))
    connection.execute(sa.delete(TAINT_RULES).where(
        TAINT_RULES.c.id == row.id))
    _count_sync_requests(connection, hosts)
    return _rule(row), hosts


def _clear_marks(connection, rule) -> None:
    mine = TAINTS.alias('mine')
    other = TAINTS.alias('other')
    devices = sa.select(mine.c.device_id).where(
        mine.c.origin == rule.uuid,
        ~sa.exists().where(other.c.device_id == mine.c.device_id,
                           other.c.key == rule.key,
                           other.c.origin != rule.uuid,
                           other.c.effect == taints.Effect.NO_EXECUTE.value))
    connection.execute(sa.update(ARQS).where(
        ARQS.c.taint_marked_by == rules.marked_by(rule.key),
        ARQS.c.deployable_id.in_(sa.select(DEPLOYABLES.c.id).where(
            DEPLOYABLES.c.device_id.in_(devices)))).values(
        taint_marked_at=None, taint_marked_by=None))


def taint_new_devices(connection, device_uuids: list[str]) -> int:
    """Give the devices just added (``device_uuids``, in the caller's
    transaction) the taints of every rule that selects them, with one
    read of the rules (and nothing more when no rule is applied); how
    many taints were added. A new device has no ARQ bound, so nothing is
    marked; the report's transaction syncs its host anyway."""
    if not device_uuids:
        return 0
    applied = connection.execute(sa.select(TAINT_RULES).where(
        TAINT_RULES.c.effect != taints.Effect.NONE.value).order_by(
        TAINT_RULES.c.id)).all()
    if not applied:
        return 0
    devices = _devices(connection.execute(sa.select(
        *_DEVICE_COLUMNS).where(DEVICES.c.uuid.in_(device_uuids))))
    attributes = None
    if any(rules.needs_attributes(json.loads(r.selector)) for r in applied):
        attributes = {}
        for row in connection.execute(
                sa.select(DEPLOYABLES.c.device_id, ATTRIBUTES.c.key,
                          ATTRIBUTES.c.value).join(
                    DEPLOYABLES,
                    DEPLOYABLES.c.id == ATTRIBUTES.c.deployable_id).where(
                    DEPLOYABLES.c.device_id.in_([d['id'] for d in devices]))):
            attributes.setdefault(row.device_id, {}).setdefault(
                row.key, set()).add(row.value)
    now = timeutils.utcnow()
    rows = [taint for rule in applied
            for taint in _taint_rows(rule, _select(
                devices, json.loads(rule.selector), attributes), now)]
    if rows:
        connection.execute(sa.insert(TAINTS), rows)
    return len(rows)
