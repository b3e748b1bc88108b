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

"""The rules of importing an upstream OpenStack Cyborg database
(``cyborg-manage upstream-import``, :mod:`cyborg.db.upstream_import`).

**Revisions.** The source's alembic revision must be one of
:data:`KNOWN_REVISIONS`: upstream 17.0.0's head and the revisions before
it whose tables, as far as the import reads them, are the same.

**ARQ states** (:data:`STATE_MAP`), upstream's on the left:

============  ============  ==============================================
upstream      ours          what else the import does
============  ============  ==============================================
Initial       Initial
BindStarted   BindFailed    what our bind timeout makes of a bind that
                            never finished: ``bind_error`` says so, the
                            attach handle and deployable are released,
                            and one ``failed`` event is queued for Nova
                            (when the ARQ has an instance)
Bound         Bound         keeps its attach handle (``in_use``)
BindFailed    BindFailed
Unbound       Unbound
Deleting      Deleting      (upstream never stores it)
============  ============  ==============================================

Any other state (upstream's ``UnbindFailed`` cannot be stored in its
schema) cannot be imported. Only a Bound (or Deleting) ARQ holds an
attach handle in our model: an ARQ in another state that holds one in
upstream's database is imported without it, and an attach handle is in
use exactly when an imported ARQ holds it.

**Devices** get their ``address`` from their PCI control path id
(:func:`pci_address`; the lowest one where a device has several).
**Attributes**: upstream allows a key twice on a deployable; the newest
row is kept (:func:`newest`).
"""

from collections.abc import Iterable
import dataclasses
import datetime
import json
from typing import Any

from cyborg.domain import arq_states
from cyborg.domain import device_tree

#: Alembic revisions of upstream's schema that the import reads, with
#: what they are. The tables the import reads have the same columns in
#: all of them (``devices.device_state``, new in 17.0.0, is not read).
KNOWN_REVISIONS: dict[str, str] = {
    'b47c8f2d1e3a': 'openstack-cyborg 17.0.0, adds devices.device_state',
    'a35b4295a0e5': 'adds device type NVME',
    '9625668549b5': 'adds device types MDEV and PCI',
    '6c77bd6afea5': 'adds devices.status',
}

#: Upstream's tables the import copies, parents before children.
COPIED_TABLES = ('device_profiles', 'devices', 'controlpath_ids',
                 'deployables', 'attributes', 'attach_handles',
                 'extended_accelerator_requests')
#: Upstream's quota tables: never used by upstream, counted and skipped.
SKIPPED_TABLES = ('quota_usages', 'reservations')

#: Upstream ARQ state -> ours (see the module docstring).
STATE_MAP: dict[str, str] = {
    'Initial': arq_states.INITIAL,
    'BindStarted': arq_states.BIND_FAILED,
    'Bound': arq_states.BOUND,
    'BindFailed': arq_states.BIND_FAILED,
    'Unbound': arq_states.UNBOUND,
    'Deleting': arq_states.DELETING,
}

#: Our states in which an ARQ holds an attach handle.
HOLDS_HANDLE = frozenset([arq_states.BOUND, arq_states.DELETING])

#: Upstream states whose bind never finished: ended as our bind timeout
#: ends one (see the module docstring).
INTERRUPTED = frozenset(['BindStarted'])

#: ``bind_error`` of an ARQ whose bind never finished.
INTERRUPTED_BIND_ERROR = ('The bind had not finished when the database '
                          'was imported from upstream OpenStack Cyborg')

# The largest value of each part of a PCI address.
_PCI_PARTS = (('domain', 0xffff, 4), ('bus', 0xff, 2), ('device', 0x1f, 2),
              ('function', 0x7, 1))


class Unmappable(ValueError):
    """A source value the import cannot turn into ours; the message
    says why."""


def revision_known(revision: str | None) -> bool:
    return revision in KNOWN_REVISIONS


def unknown_revision_message(revision: str | None) -> str:
    if revision is None:
        return ('the source database has no alembic revision: it is not '
                'an upstream OpenStack Cyborg database migrated with '
                'cyborg-dbsync')
    return ('the source database is at alembic revision %s, which this '
            'import does not know (it knows %s)'
            % (revision, ', '.join('%s: %s' % item
                                   for item in KNOWN_REVISIONS.items())))


def mapped_state(state: str) -> str:
    """Our state of an ARQ in upstream ``state``; :class:`Unmappable` if
    there is none."""
    try:
        return STATE_MAP[state]
    except KeyError:
        raise Unmappable('state %r is not one of upstream\'s stored states '
                         '(%s)' % (state, ', '.join(STATE_MAP)))


def parse_json(text: str | None, what: str) -> Any:
    """``text`` parsed; :class:`Unmappable` naming ``what`` if it is not
    JSON."""
    try:
        # None raises TypeError, reported as for any other non-JSON.
        return json.loads(text)  # type: ignore[arg-type]
    except (TypeError, ValueError) as e:
        raise Unmappable('%s is not JSON (%s): %r' % (what, e, text))


def profile_groups(text: str | None) -> list[dict[str, Any]]:
    """The groups of a device profile's ``profile_json``
    (``{"groups": [{...}, ...]}``, upstream's form and ours)."""
    value = parse_json(text, 'profile_json')
    groups = value.get('groups') if isinstance(value, dict) else None
    if not isinstance(groups, list) or not all(
            isinstance(group, dict) for group in groups):
        raise Unmappable('profile_json has no list of groups: %r' % (text,))
    return groups


def canonical(text: str | None, what: str) -> str:
    """``text`` (JSON) in our canonical form
    (:func:`cyborg.domain.device_tree.canonical_json`)."""
    return device_tree.canonical_json(parse_json(text, what))


def pci_address(info: Any) -> str:
    """Our ``dddd:bb:ss.f`` form (lower-case hex, zero padded) of
    upstream's PCI control path info ``{"domain", "bus", "device",
    "function"}``, whose parts are hex strings, padded or not."""
    if not isinstance(info, dict):
        raise Unmappable('PCI address %r is not an object' % (info,))
    parts = []
    for name, largest, width in _PCI_PARTS:
        value = info.get(name)
        try:
            number = int(str(value), 16)
        except ValueError:
            raise Unmappable('PCI address %s has no hex %s (%r)'
                             % (device_tree.canonical_json(info), name,
                                value))
        if not 0 <= number <= largest:
            raise Unmappable('PCI address %s: %s %r is out of range'
                             % (device_tree.canonical_json(info), name,
                                value))
        parts.append('%0*x' % (width, number))
    return '%s:%s:%s.%s' % tuple(parts)


def device_address(cpid_infos: Iterable[Any]) -> str:
    """The address of a device with PCI control path ids ``cpid_infos``
    (parsed): the lowest of their addresses."""
    addresses = sorted(pci_address(info) for info in cpid_infos)
    if not addresses:
        raise Unmappable('the device has no PCI control path id to take '
                         'its address from')
    return addresses[0]


def _age(row: dict[str, Any]) -> tuple:
    oldest = datetime.datetime.min
    return (row.get('updated_at') or row.get('created_at') or oldest,
            row.get('created_at') or oldest, row['id'])


def newest(rows: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """The row to keep of several with the same key: the last updated
    (or created), the highest id among equals."""
    return max(rows, key=_age)


@dataclasses.dataclass
class ImportReport:
    """What an import found, did (or, dry, would do) and could not do."""

    source: str
    revision: str | None
    #: Rows per upstream table read.
    source_rows: dict[str, int] = dataclasses.field(default_factory=dict)
    #: Rows per table of ours written (or to write).
    imported_rows: dict[str, int] = dataclasses.field(default_factory=dict)
    #: Upstream state -> our state -> ARQs.
    states: dict[str, dict[str, int]] = dataclasses.field(
        default_factory=dict)
    #: Host -> its devices.
    hosts: dict[str, int] = dataclasses.field(default_factory=dict)
    #: What was changed on the way in, one line each.
    adjustments: list[str] = dataclasses.field(default_factory=list)
    #: What cannot be imported, one line each: the import refuses.
    problems: list[str] = dataclasses.field(default_factory=list)

    def count_state(self, source: str, target: str) -> None:
        per_target = self.states.setdefault(source, {})
        per_target[target] = per_target.get(target, 0) + 1

    def as_json(self) -> str:
        """What ``upstream_imports.counts`` keeps."""
        return json.dumps({'source_rows': self.source_rows,
                           'imported_rows': self.imported_rows,
                           'arq_states': self.states,
                           'hosts': len(self.hosts),
                           'adjustments': len(self.adjustments)},
                          sort_keys=True)

    def lines(self) -> list[str]:
        """The report as printed by ``cyborg-manage upstream-import``."""
        lines = ['Source: %s, alembic revision %s (%s)' % (
            self.source, self.revision,
            KNOWN_REVISIONS.get(self.revision or '', 'unknown'))]
        lines.append('Upstream tables (rows read -> rows imported):')
        for table, number in self.source_rows.items():
            if table in SKIPPED_TABLES:
                outcome = 'skipped (upstream never uses its quota tables)'
            else:
                outcome = str(self.imported_rows.get(table, 0))
            lines.append('  %-30s %7d -> %s' % (table, number, outcome))
        derived = [table for table in self.imported_rows
                   if table not in self.source_rows]
        if derived:
            lines.append('Derived rows:')
            lines.extend('  %-30s %7d' % (table, self.imported_rows[table])
                         for table in derived)
        lines.append('Accelerator requests per state (upstream -> ours):')
        for source, targets in sorted(self.states.items()):
            for target, number in sorted(targets.items()):
                lines.append('  %-12s -> %-12s %7d' % (source, target,
                                                       number))
        lines.append('Hosts: %d' % len(self.hosts))
        lines.extend('  %s: %d device(s)' % item
                     for item in sorted(self.hosts.items()))
        lines.append('Adjusted: %d' % len(self.adjustments))
        lines.extend('  ' + line for line in self.adjustments)
        lines.append('Cannot import: %d' % len(self.problems))
        lines.extend('  ' + line for line in self.problems)
        return lines
