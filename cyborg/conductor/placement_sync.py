"""Keeping Placement in line with the database, one host at a time.

For every deployable of a host, cyborg owns one resource provider under the
host's compute node provider, with the deployable's full inventory and
traits (plus ``OWNER_CYBORG``). A device that is disabled, unhealthy or
missing keeps its provider but reserves its whole inventory, so nothing
new is scheduled on it.

``placement_providers`` records what was last written to each provider
(its generation and hashes of its inventory and traits), so a sync sends
only what changed: nothing at all when nothing changed. Generation
conflicts are retried with a fresh generation. Custom resource classes and
traits are created when needed and never deleted: other providers, and
other services, may use them.
"""

import dataclasses
import hashlib
import threading
from typing import Any

from oslo_log import log as logging
from oslo_utils import timeutils
import sqlalchemy as sa

from cyborg.accelerator.drivers import base as driver_base
from cyborg.clients import placement as placement_client
from cyborg.common import constants
from cyborg.common import resource_names
from cyborg.conductor import inventory as inventory_diff
from cyborg.db import api as db_api
from cyborg.db import models

LOG = logging.getLogger(__name__)

SERVICES = models.Service.__table__
DEVICES = models.Device.__table__
DEPLOYABLES = models.Deployable.__table__
ATTRIBUTES = models.Attribute.__table__
PROVIDERS = models.PlacementProvider.__table__

GENERATION_RETRIES = 4


@dataclasses.dataclass
class ProviderSpec:
    """What one deployable's resource provider should look like."""

    uuid: str
    name: str
    parent_uuid: str
    inventories: dict[str, dict[str, Any]]
    traits: list[str]

    @property
    def inventory_hash(self) -> str:
        return _digest(self.inventories)

    @property
    def traits_hash(self) -> str:
        return _digest(self.traits)


def _digest(value) -> str:
    return hashlib.sha256(
        driver_base.canonical_json(value).encode()).hexdigest()


def inventory(resource_class: str, total: int,
              schedulable: bool) -> dict[str, dict[str, Any]]:
    """A full inventory record; unschedulable means reserved == total."""
    if total < 1:
        return {}
    return {resource_class: {
        'total': total, 'reserved': 0 if schedulable else total,
        'min_unit': 1, 'max_unit': total, 'step_size': 1,
        'allocation_ratio': 1.0}}


def is_schedulable(device) -> bool:
    return (device.status == 'enabled' and device.health == 'healthy'
            and not device.missing)


@dataclasses.dataclass
class HostState:
    service_id: int
    sync_requested: int
    sync_done: int
    rp_name: str | None
    compute_rp_uuid: str | None
    desired: dict[str, ProviderSpec]
    known: dict[str, Any]


@db_api.main_context_manager.reader.connection
def load_host_state(context, host: str) -> HostState | None:
    """The host's desired providers and what was last written."""
    connection = context.connection
    service = connection.execute(sa.select(SERVICES).where(
        SERVICES.c.host == host,
        SERVICES.c.binary == constants.BINARY_AGENT)).first()
    if service is None:
        return None
    rows = list(connection.execute(
        sa.select(DEPLOYABLES.c.id, DEPLOYABLES.c.name,
                  DEPLOYABLES.c.rp_uuid, DEPLOYABLES.c.num_accelerators,
                  DEVICES.c.status, DEVICES.c.health, DEVICES.c.missing)
        .join(DEVICES, DEVICES.c.id == DEPLOYABLES.c.device_id)
        .where(DEVICES.c.hostname == host)))
    attributes: dict[int, dict[str, str]] = {}
    if rows:
        for attr in connection.execute(sa.select(
                ATTRIBUTES.c.deployable_id, ATTRIBUTES.c.key,
                ATTRIBUTES.c.value).where(ATTRIBUTES.c.deployable_id.in_(
                    [row.id for row in rows]))):
            attributes.setdefault(attr.deployable_id, {})[attr.key] = (
                attr.value)
    desired = {}
    for row in rows:
        attrs = attributes.get(row.id, {})
        if 'rc' not in attrs or service.compute_rp_uuid is None:
            continue
        traits = sorted({value for key, value in attrs.items()
                         if key.startswith('trait')}
                        | {resource_names.OWNER_TRAIT})
        desired[row.rp_uuid] = ProviderSpec(
            uuid=row.rp_uuid, name=inventory_diff.provider_name(host,
                                                    row.name),
            parent_uuid=service.compute_rp_uuid,
            inventories=inventory(attrs['rc'], row.num_accelerators,
                                  is_schedulable(row)),
            traits=traits)
    known = {row.uuid: row for row in connection.execute(
        sa.select(PROVIDERS).where(PROVIDERS.c.host == host))}
    return HostState(service.id, service.sync_requested, service.sync_done,
                     service.rp_name,
                     service.compute_rp_uuid, desired, known)


@db_api.writer
def _save_compute_rp(context, service_id: int, rp_uuid: str) -> None:
    context.session.execute(sa.update(SERVICES).where(
        SERVICES.c.id == service_id).values(compute_rp_uuid=rp_uuid))


@db_api.writer
def _save_provider(context, host: str, spec: ProviderSpec,
                   generation: int) -> None:
    session = context.session
    values = dict(host=host, name=spec.name, parent_uuid=spec.parent_uuid,
                  generation=generation, inventory_hash=spec.inventory_hash,
                  traits_hash=spec.traits_hash, updated_at=timeutils.utcnow())
    updated = session.execute(sa.update(PROVIDERS).where(
        PROVIDERS.c.uuid == spec.uuid).values(**values)).rowcount
    if not updated:
        session.execute(sa.insert(PROVIDERS).values(
            uuid=spec.uuid, created_at=timeutils.utcnow(), **values))


@db_api.writer
def _forget_provider(context, uuid: str) -> None:
    context.session.execute(sa.delete(PROVIDERS).where(
        PROVIDERS.c.uuid == uuid))


@db_api.writer
def _mark_synced(context, service_id: int, seen: int) -> None:
    """Record that every change up to ``seen`` is in Placement.

    Never moves backwards, so concurrent syncs finishing in any order
    leave later changes pending.
    """
    context.session.execute(sa.update(SERVICES).where(
        SERVICES.c.id == service_id,
        SERVICES.c.sync_done < seen).values(sync_done=seen))


@db_api.writer
def request_sync(context, host: str) -> None:
    """Record that the host's providers must be written again."""
    context.session.execute(sa.update(SERVICES).where(
        SERVICES.c.host == host,
        SERVICES.c.binary == constants.BINARY_AGENT).values(
            sync_requested=SERVICES.c.sync_requested + 1))


@db_api.main_context_manager.reader.connection
def hosts_pending_sync(context) -> list[str]:
    return [row.host for row in context.connection.execute(
        sa.select(SERVICES.c.host).where(
            SERVICES.c.binary == constants.BINARY_AGENT,
            SERVICES.c.sync_requested > SERVICES.c.sync_done))]


class PlacementSync:
    """Writes a host's providers to Placement; see the module docstring.

    Remembers which custom resource classes and traits it already made
    sure exist, so each is created at most once per conductor.
    """

    def __init__(self, client: placement_client.PlacementClient):
        self.client = client
        self._known_classes: set[str] = set()
        self._known_traits: set[str] = set()
        self._host_locks: dict[str, threading.Lock] = {}
        self._locks_lock = threading.Lock()

    def _host_lock(self, host: str) -> threading.Lock:
        with self._locks_lock:
            return self._host_locks.setdefault(host, threading.Lock())

    def sync_host(self, context, host: str) -> bool:
        """True when Placement matches the database for ``host``.

        One sync per host at a time in this conductor; syncs of one host
        by several conductors are safe too (see ``_mark_synced``). Raises
        PlacementUnavailable when Placement cannot be reached; the host
        stays pending and is synced again later.
        """
        with self._host_lock(host):
            return self._sync_host(context, host)

    def _sync_host(self, context, host: str) -> bool:
        state = load_host_state(context, host)
        if state is None:
            return True
        if state.compute_rp_uuid is None:
            if not self._resolve_compute_node(context, host, state):
                return False
            state = load_host_state(context, host)
        complete = True
        for uuid, spec in state.desired.items():
            complete &= self._write(context, host, spec, state.known.get(uuid))
        for uuid in set(state.known) - set(state.desired):
            complete &= self._remove(context, uuid)
        if complete and state.sync_requested > state.sync_done:
            _mark_synced(context, state.service_id, state.sync_requested)
        return complete

    def _resolve_compute_node(self, context, host: str,
                              state: HostState) -> bool:
        provider = self.client.find_provider_by_name(state.rp_name)
        if provider is None:
            LOG.error('No compute node resource provider named %r in '
                      'Placement for host %s; set [agent] '
                      'resource_provider_name on that host to the name '
                      'nova-compute registered. Its devices are not '
                      'schedulable until then.', state.rp_name, host)
            return False
        _save_compute_rp(context, state.service_id, provider['uuid'])
        return True

    def _write(self, context, host: str, spec: ProviderSpec, row) -> bool:
        inventory_changed = (row is None or row.parent_uuid != spec.parent_uuid
                             or row.inventory_hash != spec.inventory_hash)
        traits_changed = row is None or row.traits_hash != spec.traits_hash
        if not (inventory_changed or traits_changed):
            return True
        try:
            self._ensure_names(spec)
            generation = (row.generation if row is not None
                          else self._ensure_provider(spec))
            generation = self._put(spec, generation, inventory_changed,
                                   traits_changed)
        except placement_client.PlacementUnavailable:
            raise
        except placement_client.PlacementError as e:
            LOG.error('Cannot write resource provider %s (%s) to '
                      'Placement: %s', spec.uuid, spec.name, e)
            return False
        _save_provider(context, host, spec, generation)
        return True

    def _ensure_names(self, spec: ProviderSpec) -> None:
        for resource_class in spec.inventories:
            if resource_class not in self._known_classes:
                self.client.ensure_resource_class(resource_class)
                self._known_classes.add(resource_class)
        for trait in spec.traits:
            if trait not in self._known_traits:
                self.client.ensure_trait(trait)
                self._known_traits.add(trait)

    def _ensure_provider(self, spec: ProviderSpec) -> int:
        """Create the provider; if it exists already, read its generation.

        Creating first costs one request for a new provider, the common
        case of a provider cyborg has no record of.
        """
        try:
            provider = self.client.create_provider(spec.uuid, spec.name,
                                                   spec.parent_uuid)
        except placement_client.ProviderConflict:
            provider = self.client.get_provider(spec.uuid)
            if provider is None:
                raise
        return provider['generation']

    def _put(self, spec: ProviderSpec, generation: int,
             inventory_changed: bool, traits_changed: bool) -> int:
        for attempt in range(GENERATION_RETRIES):
            try:
                if inventory_changed:
                    generation = self.client.set_inventories(
                        spec.uuid, generation, spec.inventories)
                    inventory_changed = False
                if traits_changed:
                    generation = self.client.set_traits(
                        spec.uuid, generation, spec.traits)
                return generation
            except placement_client.GenerationConflict:
                if attempt == GENERATION_RETRIES - 1:
                    raise
                provider = self.client.get_provider(spec.uuid)
                if provider is None:
                    provider = self.client.create_provider(
                        spec.uuid, spec.name, spec.parent_uuid)
                generation = provider['generation']
        return generation

    def _remove(self, context, uuid: str) -> bool:
        try:
            self.client.delete_provider(uuid)
        except placement_client.ProviderInUse:
            LOG.warning('Resource provider %s of a removed deployable still '
                        'has allocations; removing it later', uuid)
            return False
        _forget_provider(context, uuid)
        return True
