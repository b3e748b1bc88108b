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

"""Keeping Placement in line with the database, one host at a time.

For every deployable of a host, cyborg owns one resource provider under the
host's compute node provider, with the deployable's full inventory and
traits (plus ``OWNER_CYBORG``, and the traits of the device's taints
with a scheduling effect, see :mod:`cyborg.domain.tolerations`). A
device that is disabled, unhealthy (without taints: an older agent's) or
missing keeps its provider but reserves its whole inventory, so nothing
new is scheduled on it.

``placement_providers`` records what was last written to each provider
(its generation and hashes of its inventory and traits), so a sync sends
only what changed: nothing at all when nothing changed. Generation
conflicts are retried with a fresh generation. Custom resource classes and
traits are created when needed and never deleted: other providers, and
other services, may use them.

A sync creates the new providers and sets traits one provider at a time
(Placement has no call for several), then sets the inventories of all
providers that need it with one ``POST /reshaper`` when Placement's
policy allows it (the ``service`` role by default): 18 requests instead
of 25 for a new host with 8 devices. The reshaper answers no generations,
so they are recorded as unknown; the next sync that writes several
providers of the host reads them with one request for the host's tree (a
provider written alone reads its own). When the reshaper is refused
(403, or a Placement older than microversion 1.30), the inventories are
set one provider at a time, from then on (until the conductor restarts);
when it fails otherwise (a generation conflict, inventory in use...), for
that sync. The reshaper replaces the inventories of all its providers or
of none, so a failed one leaves nothing half written.

What a sync wrote is recorded in one transaction at its end, also when it
ends early (Placement unreachable): the host then stays pending, and the
next sync sends only what is left. Two conductors may sync one host at
the same time (each holds a lock per host of its own); when their syncs
overlap, the one that records second cannot know whose writes Placement
kept, so it records its providers as unknown and the host as pending
(see :func:`cyborg.db.providers.save_sync`): the next sync writes them
again from the latest state.

Providers taken over from an upstream Cyborg (``adopted`` rows, see
:mod:`cyborg.domain.adoption`) are never created again: the first sync
reads what Placement has (with the host's tree when several providers
are written), then sets our inventory and traits on them as on any
other. Their name and parent stay upstream's while they hold
allocations (re-parenting needs Placement 1.37), and so does an upstream
resource class that allocations use: such a provider is ``waiting``. A
sync that leaves only waiting providers is complete (agent reports then
cost no Placement request); every ``[conductor] adoption_interval`` the
conductor syncs the hosts that have one, which asks for the provider's
allocations (one request per waiting provider) until there are none,
then renames and moves it once.
A retained deployable's provider reserves its whole inventory, and the
other providers of its device reserve the units whose handles it holds
(see :func:`load_host_state`).
"""

from collections.abc import Callable
import dataclasses
import threading
from typing import Any

from oslo_log import log as logging

from cyborg.clients import placement as placement_client
from cyborg.db import providers as providers_db
from cyborg.domain import device_tree
from cyborg.domain import devices
from cyborg.domain import providers
from cyborg.domain import tolerations

LOG = logging.getLogger(__name__)

GENERATION_RETRIES = 4


@dataclasses.dataclass
class ProviderSpec:
    """What one deployable's resource provider should look like."""

    uuid: str
    name: str
    parent_uuid: str
    inventories: dict[str, dict[str, Any]]
    traits: list[str]
    #: The provider of the parent deployable; None: under the compute
    #: node.
    parent_deployable: str | None = None

    @property
    def inventory_hash(self) -> str:
        return device_tree.tree_digest(self.inventories)

    @property
    def traits_hash(self) -> str:
        return device_tree.tree_digest(self.traits)


def inventory(resource_class: str, total: int, schedulable: bool,
              reserved: int = 0) -> dict[str, dict[str, Any]]:
    """A full inventory record; unschedulable means reserved == total."""
    # Placement's inventory schema wants total >= 1: a deployable with no units
    # gets a provider with no inventory rather than a rejected PUT.
    if total < 1:
        return {}
    return {resource_class: {
        'total': total,
        # Placement rejects reserved > total; reserved == total (unschedulable)
        # needs microversion 1.26, which every call uses.
        'reserved': min(reserved, total) if schedulable else total,
        'min_unit': 1, 'max_unit': total, 'step_size': 1,
        'allocation_ratio': 1.0}}


def is_schedulable(device, taint_traits: set[str] | None = None) -> bool:
    return devices.is_schedulable(device.status, device.health,
                                  device.missing, bool(taint_traits))


@dataclasses.dataclass
class HostState:
    service_id: int
    sync_requested: int
    sync_done: int
    rp_name: str | None
    compute_rp_uuid: str | None
    desired: dict[str, ProviderSpec]
    known: dict[str, Any]
    #: The host's ``sync_epoch`` when loaded (see
    #: :func:`cyborg.db.providers.save_sync`); None: not known.
    sync_epoch: int | None = None

    def set_compute_rp(self, uuid: str) -> None:
        """Hang every desired top provider under compute node ``uuid``."""
        self.compute_rp_uuid = uuid
        for spec in self.desired.values():
            if spec.parent_deployable is None:
                spec.parent_uuid = uuid


def _parents_first(rows: list) -> list:
    """Deployable rows, each after its parent (Placement creates a child
    provider only under an existing one)."""
    by_id = {row.id: row for row in rows}

    def depth(row) -> int:
        seen = 0
        # Bounded by the row count: a parent loop in bad data must not hang the
        # sync.
        while row.parent_id in by_id and seen <= len(by_id):
            row, seen = by_id[row.parent_id], seen + 1
        return seen
    return sorted(rows, key=lambda row: (depth(row), row.id))


def _children_first(uuids: set[str], known: dict[str, Any]) -> list[str]:
    """Providers to remove, each before its parent (Placement refuses to
    delete a provider that has children)."""
    def depth(uuid: str) -> int:
        seen = 0
        parent = known[uuid].parent_uuid if uuid in known else None
        # Bounded for the same reason as in _parents_first.
        while parent in known and seen <= len(known):
            parent, seen = known[parent].parent_uuid, seen + 1
        return seen
    return sorted(uuids, key=lambda uuid: (-depth(uuid), uuid))


def load_host_state(context, host: str) -> HostState | None:
    """The host's desired providers and what was last written.

    Until the host's compute node provider is known, the desired
    providers have no parent (see :meth:`HostState.set_compute_rp`).

    A ``retained`` deployable (kept only while an attach handle of it is
    in use) is unschedulable; each other deployable of its device
    reserves the units it has no attach handle for (those the retained
    ones hold: the report diff does not add them twice), so that no unit
    is offered twice. A unit without a handle could not be bound anyway.
    """
    rows = providers_db.host_rows(context, host)
    if rows is None:
        return None
    service = rows.service
    desired = {}
    # The deployable whose provider each deployable's children hang under:
    # its own, or, for one without a provider, its parent's (None: the
    # compute node).
    anchors: dict[int, str | None] = {}
    for row in _parents_first(rows.deployables):
        parent_anchor = anchors.get(row.parent_id)
        attrs = rows.attributes.get(row.id, {})
        # Without a resource class there is no inventory to offer Placement,
        # so no provider: its children hang under its parent's.
        if providers.RESOURCE_CLASS_KEY not in attrs:
            anchors[row.id] = parent_anchor
            continue
        anchors[row.id] = row.rp_uuid
        # Each taint with a scheduling effect puts its key's and its
        # value's traits on every provider of the device.
        taint_traits = tolerations.placement_traits(
            rows.taints.get(row.device_id, ()))
        traits = sorted(providers.provider_traits(
            providers.traits_of(attrs)) | taint_traits)
        desired[row.rp_uuid] = ProviderSpec(
            uuid=row.rp_uuid, name=providers.provider_name(host, row.name),
            parent_uuid=parent_anchor or service.compute_rp_uuid,
            inventories=inventory(
                attrs[providers.RESOURCE_CLASS_KEY], row.num_accelerators,
                is_schedulable(row, taint_traits) and not row.retained,
                # ``handles`` lists only the devices holding a retained
                # deployable; any other deployable defaults to "every unit has
                # a handle" and reserves nothing.
                max(0, row.num_accelerators - rows.handles.get(
                    row.id, row.num_accelerators))),
            traits=traits, parent_deployable=parent_anchor)
    return HostState(service.id, service.sync_requested, service.sync_done,
                     service.rp_name,
                     service.compute_rp_uuid, desired, rows.known,
                     service.sync_epoch)


@dataclasses.dataclass
class _Write:
    """One provider's write in a sync, and how far it got.

    Starts from the provider's last written row (nothing for a provider
    cyborg has no record of). ``generation`` is the provider's generation
    as far as known (None: unknown, e.g. after a reshape; read before the
    next write); ``parent_uuid`` and the hashes describe what Placement
    has: the spec's once that part is written.

    An ``adopted`` provider (upstream's) has ``name`` and
    ``parent_uuid`` as Placement has them (``inspected``: read) until it
    is renamed and moved to ours.
    """

    spec: ProviderSpec
    known: bool
    exists: bool
    generation: int | None
    parent_uuid: str | None
    inventory_hash: str | None
    traits_hash: str | None
    changed: bool = False
    failed: bool = False
    name: str | None = None
    adopted: bool = False
    inspected: bool = False
    #: Whether the provider was upstream's when the sync started.
    upstream: bool = False
    #: An adopted provider whose allocations keep upstream's name,
    #: parent or resource class for now: retried every
    #: ``[conductor] adoption_interval``, not at every report.
    waiting: bool = False

    @classmethod
    def plan(cls, spec: ProviderSpec, row) -> '_Write | None':
        """The write ``spec`` needs given its last written ``row``;
        None when Placement has it already."""
        if row is None:
            # No row: assume it does not exist yet; creating it costs one
            # request and _ensure_provider reads it instead when the create
            # conflicts.
            return cls(spec, False, False, None, spec.parent_uuid, None,
                       None, name=spec.name)
        adopted = bool(row.adopted)
        write = cls(spec, True, True, row.generation, row.parent_uuid,
                    row.inventory_hash, row.traits_hash, name=row.name,
                    adopted=adopted, upstream=adopted,
                    # The import records no parent: never read yet.
                    inspected=adopted and bool(row.parent_uuid))
        return write if write.pending else None

    @property
    def inventory_pending(self) -> bool:
        if self.inventory_hash != self.spec.inventory_hash:
            return True
        return not self.adopted and self.parent_uuid != self.spec.parent_uuid

    @property
    def traits_pending(self) -> bool:
        return self.traits_hash != self.spec.traits_hash

    @property
    def layout_pending(self) -> bool:
        """An adopted provider still has upstream's name or parent."""
        return self.adopted and (self.name != self.spec.name
                                 or self.parent_uuid != self.spec.parent_uuid)

    @property
    def pending(self) -> bool:
        return (self.inventory_pending or self.traits_pending
                or self.layout_pending)

    def created(self, generation: int) -> None:
        """The provider was (re)created (with our name and parent): it
        has nothing yet."""
        self.exists = self.changed = True
        self.generation = generation
        self.inventory_hash = self.traits_hash = None
        self.name, self.parent_uuid = self.spec.name, self.spec.parent_uuid
        self.adopted = False

    def inspected_as(self, provider: dict[str, Any]) -> None:
        """What Placement has of an adopted provider: ``provider``."""
        self.changed = self.inspected = True
        self.generation = provider['generation']
        self.name = provider['name']
        self.parent_uuid = provider.get('parent_provider_uuid')

    def laid_out(self, generation: int) -> None:
        """The adopted provider took our name and parent."""
        self.changed = True
        self.generation = generation
        self.name, self.parent_uuid = self.spec.name, self.spec.parent_uuid
        self.adopted = False

    def inventory_written(self, generation: int | None) -> None:
        self.changed = True
        self.generation = generation
        if not self.adopted:
            self.parent_uuid = self.spec.parent_uuid
        self.inventory_hash = self.spec.inventory_hash

    def traits_written(self, generation: int) -> None:
        self.changed = True
        self.generation = generation
        self.traits_hash = self.spec.traits_hash

    def row(self, host: str) -> dict[str, Any]:
        return dict(uuid=self.spec.uuid, host=host,
                    name=self.name if self.adopted else self.spec.name,
                    parent_uuid=self.parent_uuid, generation=self.generation,
                    inventory_hash=self.inventory_hash,
                    traits_hash=self.traits_hash,
                    adopted=self.adopted or self.waiting)


def _record(context, host: str, state: HostState,
            new_compute_rp: str | None, writes: list[_Write],
            forgotten: list[str], complete: bool) -> None:
    """Save a sync's outcome, if there is anything to save."""
    # Only a complete sync marks the host synced. The count was read when the
    # sync started, so a change counted meanwhile stays pending (mark_synced
    # never moves sync_done backwards).
    seen = (state.sync_requested if complete
            and state.sync_requested > state.sync_done else None)
    changed = [write for write in writes if write.changed]
    # Nothing to record: no write transaction, and no lock on the host's
    # service row, which reports and other syncs of the host need.
    if new_compute_rp or changed or forgotten or seen is not None:
        providers_db.save_sync(context, state.service_id, sync_record(
            host, changed, new_compute_rp, forgotten, seen,
            state.sync_epoch))


def sync_record(host: str, writes: list[_Write],
                compute_rp_uuid: str | None = None,
                forgotten: list[str] | None = None,
                seen: int | None = None,
                epoch: int | None = None) -> providers_db.SyncRecord:
    """What to record of ``writes`` by a sync that started at
    ``epoch`` (see :func:`cyborg.db.providers.save_sync`)."""
    return providers_db.SyncRecord(
        providers=[write.row(host) for write in writes],
        # Rows known at the start are updated in place; for the others
        # _save_providers first looks for a row another conductor inserted.
        recorded={write.spec.uuid for write in writes if write.known},
        compute_rp_uuid=compute_rp_uuid, forgotten=forgotten or [],
        seen=seen, epoch=epoch)


class PlacementSync:
    """Writes a host's providers to Placement; see the module docstring.

    Remembers which custom resource classes and traits it already made
    sure exist, so each is created at most once per conductor, and
    whether Placement lets it use the reshaper (``use_reshaper``: try it
    at all).

    Given a ``client_factory`` instead of a ``client``, it builds the
    client on first use, so that a conductor starts (and serves what
    needs no Placement) even while ``[placement]`` is not configured;
    until the client can be built, every sync raises
    PlacementUnavailable.
    """

    def __init__(self, client: placement_client.PlacementClient | None
                 = None, use_reshaper: bool = True,
                 client_factory: Callable[
                     [], placement_client.PlacementClient] | None = None):
        self._client = client
        self._client_factory = client_factory
        self.reshaper_allowed = use_reshaper
        self._known_classes: set[str] = set()
        self._known_traits: set[str] = set()
        self._host_locks: dict[str, threading.Lock] = {}
        self._locks_lock = threading.Lock()

    @property
    def client(self) -> placement_client.PlacementClient:
        if self._client is not None:
            return self._client
        with self._locks_lock:
            # Checked again under the lock: two threads may both have seen
            # None.
            if self._client is None:
                try:
                    self._client = self._client_factory()
                except Exception as e:
                    # As PlacementUnavailable, so the host stays pending and is
                    # synced again once [placement] is configured.
                    raise placement_client.PlacementUnavailable(
                        'cannot build the Placement client: %s' % e) from e
            return self._client

    def _host_lock(self, host: str) -> threading.Lock:
        with self._locks_lock:
            return self._host_locks.setdefault(host, threading.Lock())

    def sync_host(self, context, host: str) -> bool:
        """True when Placement matches the database for ``host``.

        One sync per host at a time in this conductor; syncs of one host
        by several conductors record their outcome one at a time and never
        mark a later change synced (see
        :func:`cyborg.db.providers.save_sync`). Raises
        PlacementUnavailable when Placement cannot be reached; the host
        stays pending and is synced again later.
        """
        with self._host_lock(host):
            return self._sync_host(context, host)

    def _sync_host(self, context, host: str) -> bool:
        state = load_host_state(context, host)
        # No agent row: the sync counters live on it, so nothing can be pending
        # for this host.
        if state is None:
            return True
        new_compute_rp = None
        # Top providers hang under the compute node provider that nova-compute
        # creates; cyborg cannot create them before it exists.
        if state.compute_rp_uuid is None and state.desired:
            new_compute_rp = self._find_compute_node(host, state)
            if new_compute_rp is None:
                return False
            state.set_compute_rp(new_compute_rp)
        writes = [write for write in (
            _Write.plan(spec, state.known.get(uuid))
            for uuid, spec in state.desired.items()) if write is not None]
        # Removals come after the writes, each child before its parent
        # (Placement refuses to delete a provider with children).
        forgotten: list[str] = []
        try:
            complete = self._write(state.compute_rp_uuid, writes)
            for uuid in _children_first(set(state.known) - set(state.desired),
                                        state.known):
                if self._remove(uuid):
                    forgotten.append(uuid)
                else:
                    complete = False
        except BaseException:
            # BaseException, not Exception: however the sync ends, what it
            # already wrote is recorded.
            # What Placement has now is not to be sent again.
            _record(context, host, state, new_compute_rp, writes, forgotten,
                    False)
            raise
        _record(context, host, state, new_compute_rp, writes, forgotten,
                complete)
        return complete

    def _find_compute_node(self, host: str, state: HostState) -> str | None:
        provider = self.client.find_provider_by_name(state.rp_name)
        if provider is None:
            LOG.error('No compute node resource provider named %r in '
                      'Placement for host %s; set [agent] '
                      'resource_provider_name on that host to the name '
                      'nova-compute registered. Its devices are not '
                      'schedulable until then.', state.rp_name, host)
            return None
        return provider['uuid']

    def _write(self, root_uuid: str | None, writes: list[_Write]) -> bool:
        """Bring the providers of ``writes`` in line; False if any is
        not (the reason is logged).

        Per provider: create it if new, then set its traits. Then the
        inventories: those of several providers with known generations
        in one reshape when Placement allows it, the others (all of them
        when the reshape fails) one provider at a time.
        """
        self._read_generations(root_uuid, writes)
        for write in writes:
            self._attempt(write, self._prepare)
        # The reshaper needs each provider's current generation; a provider
        # with an unknown one is left to _put, which reads it first.
        batch = [write for write in writes if not write.failed
                 and write.inventory_pending and write.generation is not None]
        # One provider: its own PUT costs the same one request and, unlike the
        # reshaper, answers the new generation.
        if len(batch) > 1 and self.reshaper_allowed:
            self._reshape(batch)
        for write in writes:
            if not write.failed and write.pending:
                self._attempt(write, self._finish)
        # A waiting (adopted) provider does not make the sync incomplete: it is
        # retried every [conductor] adoption_interval, not at every agent
        # report.
        return not any(write.failed or write.pending and not write.waiting
                       for write in writes)

    def _read_generations(self, root_uuid: str | None,
                          writes: list[_Write]) -> None:
        """Read the unknown generations (left by a reshape) with one
        request for the host's tree, when several providers are written.

        The generation of a provider written alone, or not in the tree,
        is read on its own when it is written (see :meth:`_put`).
        """
        unknown = {write.spec.uuid: write for write in writes
                   if write.exists and (write.generation is None
                                        or write.adopted
                                        and not write.inspected)}
        # A single write reads its own provider for the same one request;
        # without a compute node provider there is no tree to read.
        if not unknown or len(writes) < 2 or root_uuid is None:
            return
        try:
            tree = self.client.provider_tree(root_uuid)
        except placement_client.PlacementUnavailable:
            raise
        except placement_client.PlacementError as e:
            # Not fatal: _put reads each unknown generation on its own.
            LOG.debug('Cannot read the providers under %s (%s); reading '
                      'them one at a time', root_uuid, e)
            return
        for provider in tree:
            write = unknown.get(provider['uuid'])
            if write is not None and write.adopted and not write.inspected:
                write.inspected_as(provider)
            elif write is not None:
                write.generation = provider['generation']

    def _attempt(self, write: _Write, step) -> None:
        try:
            step(write)
        except placement_client.PlacementUnavailable:
            raise
        except placement_client.PlacementError as e:
            # One provider's error fails only that provider (and makes the sync
            # incomplete); PlacementUnavailable above ends the whole sync
            # instead, since every other request would fail too.
            LOG.error('Cannot write resource provider %s (%s) to '
                      'Placement: %s', write.spec.uuid, write.spec.name, e)
            write.failed = True

    def _prepare(self, write: _Write) -> None:
        # Placement refuses inventories of an unknown custom resource class and
        # unknown traits, so they are created before any write.
        self._ensure_names(write.spec)
        # Before the create: _adopt finds an adopted provider gone from
        # Placement and has it created as ours.
        if write.adopted:
            self._adopt(write)
        if not write.exists:
            write.created(self._ensure_provider(write.spec))
        # Traits are set now, inventories later: those may go in one reshape
        # for all providers, while traits have no call for several.
        if write.traits_pending:
            write.traits_written(self._put(write, traits=True))

    def _adopt(self, write: _Write) -> None:
        """Read what Placement has of an adopted provider (once), and
        give it our name and parent once it holds no allocation."""
        spec = write.spec
        if not write.inspected:
            provider = self.client.get_provider(spec.uuid)
            if provider is None:  # gone: created as ours
                write.exists = write.adopted = False
                return
            write.inspected_as(provider)
        if not write.layout_pending:
            write.adopted, write.changed = False, True
            return
        # Renamed and moved only once it holds no allocation (see the module
        # docstring); until then it is waiting, which does not keep the host
        # pending.
        if self.client.provider_allocations(spec.uuid):
            LOG.debug('Resource provider %s (%s) holds allocations; it '
                      'keeps its name and parent until it holds none',
                      spec.uuid, write.name)
            write.waiting = True
            return
        try:
            provider = self.client.update_provider(spec.uuid, spec.name,
                                                   spec.parent_uuid)
        except placement_client.MicroversionUnsupported as e:
            # Placement older than 1.37 cannot re-parent: the provider stays
            # adopted and pending, so the sync is incomplete and the next one
            # tries again.
            LOG.warning('Cannot give resource provider %s our name and '
                        'parent: Placement is older than microversion '
                        '%s (%s)', spec.uuid,
                        placement_client.REPARENT_MICROVERSION, e)
            return
        LOG.info('Resource provider %s renamed from %s to %s', spec.uuid,
                 write.name, spec.name)
        write.laid_out(provider['generation'])

    def _finish(self, write: _Write) -> None:
        """Write what is still pending, one request per part: the
        inventories, and the traits again if setting the inventories
        found the provider gone and created it again."""
        if write.inventory_pending:
            try:
                write.inventory_written(self._put(write, inventory=True))
            except placement_client.InventoryInUse:
                # Only a provider that was upstream's may hold allocations of a
                # class ours lacks; on our own provider this is a failure
                # (_attempt logs it).
                if not write.upstream:
                    raise
                self._keep_allocated_classes(write)
        if write.traits_pending:
            write.traits_written(self._put(write, traits=True))

    def _keep_allocated_classes(self, write: _Write) -> None:
        """Set our inventory on an adopted provider whose allocations
        use a resource class ours lacks, keeping that class with all of
        it reserved: the allocations stay valid and nothing new is
        scheduled on it. The provider is ``waiting``: tried again every
        ``[conductor] adoption_interval`` until Placement takes ours
        alone."""
        spec = write.spec
        generation, current = self.client.get_inventories(spec.uuid)
        merged = dict(spec.inventories)
        for resource_class, record in current.items():
            if resource_class not in merged:
                merged[resource_class] = dict(record,
                                              reserved=record['total'])
        write.changed = write.waiting = True
        write.generation = self.client.set_inventories(spec.uuid,
                                                       generation, merged)
        # The hash of what Placement has, not of the spec: the inventory stays
        # pending, so a later adoption pass tries ours alone again.
        write.inventory_hash = device_tree.tree_digest(merged)
        LOG.warning('Resource provider %s holds allocations of %s, which '
                    'its deployable no longer reports; keeping them '
                    'reserved until they are gone', spec.uuid,
                    ', '.join(sorted(set(merged) - set(spec.inventories))))

    def _reshape(self, batch: list[_Write]) -> None:
        """Set the inventories of ``batch`` with one request.

        When Placement refuses, leaves them pending (to be written one at
        a time); when its policy or version does not allow the reshaper,
        never tries it again.
        """
        try:
            self.client.reshape_inventories({
                write.spec.uuid: (write.generation, write.spec.inventories)
                for write in batch})
        except (placement_client.Forbidden,
                placement_client.MicroversionUnsupported) as e:
            # Taken as lasting until the conductor restarts (policy and version
            # seldom change): no refused request spent on every sync.
            self.reshaper_allowed = False
            LOG.info('Placement does not let cyborg set the inventories of '
                     'many providers at once (%s); setting them one '
                     'provider at a time from now on. Grant cyborg\'s user '
                     'the role that policy placement:reshaper:reshape '
                     'requires (service, by default) for faster syncs.', e)
            return
        except placement_client.PlacementUnavailable as e:
            # Placement is down: the one-at-a-time writes would fail too, so
            # end the sync. A 5xx may be the reshaper's own failure: fall back.
            if e.status_code is None:  # no answer at all
                raise
            LOG.warning('Placement failed to set %d inventories at once '
                        '(%s); setting them one at a time', len(batch), e)
            return
        except placement_client.PlacementError as e:
            LOG.debug('Placement refused to set %d inventories at once '
                      '(%s); setting them one at a time', len(batch), e)
            return
        for write in batch:
            # The reshaper answers no generations: unknown until read again.
            write.inventory_written(None)

    def _ensure_names(self, spec: ProviderSpec) -> None:
        for resource_class in spec.inventories:
            # Remembered per conductor: cyborg never deletes resource classes
            # or traits, so one ensure_* request each is enough.
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
            # A 409 with no provider of our uuid means another provider has the
            # name (Placement names are unique): re-raised, not resolved here.
            provider = self.client.get_provider(spec.uuid)
            if provider is None:
                raise
        return provider['generation']

    def _put(self, write: _Write, inventory: bool = False,
             traits: bool = False) -> int:
        """Set the provider's inventories or traits; its new generation.

        An unknown or stale generation is read again from Placement; a
        provider gone from Placement is created again (its other part is
        then pending again).
        """
        spec = write.spec
        generation = write.generation
        attempt = 1
        while True:
            try:
                if generation is None:
                    provider = self.client.get_provider(spec.uuid)
                    if provider is None:
                        write.created(self._ensure_provider(spec))
                        provider = {'generation': write.generation}
                    generation = provider['generation']
                if inventory:
                    return self.client.set_inventories(
                        spec.uuid, generation, spec.inventories)
                return self.client.set_traits(spec.uuid, generation,
                                              spec.traits)
            except (placement_client.GenerationConflict,
                    placement_client.ProviderNotFound):
                # Another writer (a second conductor, an operator) moved the
                # generation, or the provider is gone: read it again (or create
                # it).
                if attempt == GENERATION_RETRIES:
                    raise
                attempt += 1
                generation = None

    def _reserve_all(self, uuid: str) -> None:
        """Reserve all of the inventory of provider ``uuid``: its
        allocations stay valid and no new one fits. Best effort: a
        failure leaves it as it was until the next try."""
        try:
            placement_client.reserve_all(self.client, uuid)
        except placement_client.PlacementUnavailable:
            raise
        except placement_client.PlacementError as e:
            # A concurrent change (generation) or a provider gone meanwhile:
            # the next sync tries the delete, and this, again.
            LOG.debug('Cannot reserve the inventory of resource provider %s: '
                      '%s', uuid, e)

    def _remove(self, uuid: str) -> bool:
        """Delete a provider whose deployable is gone; False if it is
        still there (the reason is logged)."""
        try:
            self.client.delete_provider(uuid)
        except placement_client.PlacementUnavailable:
            raise
        except placement_client.ProviderInUse:
            # Not forgotten: its row stays, the sync is incomplete and a later
            # one tries the delete again. Meanwhile Placement must grant
            # nothing more on it: the device cannot realize it (a MIG GPU that
            # switched profile, a device that went away).
            self._reserve_all(uuid)
            LOG.warning('Resource provider %s of a removed deployable still '
                        'has allocations; all of its inventory is reserved '
                        'and it is removed later', uuid)
            return False
        except placement_client.PlacementError as e:
            LOG.error('Cannot remove resource provider %s from Placement: '
                      '%s', uuid, e)
            return False
        return True
