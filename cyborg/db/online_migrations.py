# Copyright 2026 The Cyborg Authors.
#
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
"""Online data migrations: data brought to a new form while services run.

A schema migration (alembic, ``cyborg-dbsync upgrade``) changes tables;
an online data migration rewrites rows the new code can still read in
their old form, in small batches, while the services run. Before the
next upgrade removes the old form, every online migration must be done:
``cyborg-dbsync online_data_migrations`` runs them, as nova-manage and
placement-manage do.

A migration is a function ``(context, max_count) -> (found, done)``: it
migrates at most ``max_count`` rows and answers how many rows it found
still needing it (before this call) and how many it migrated. It must be
safe to run again, and to run while services write.

There is no migration yet: :data:`MIGRATIONS` is empty.
"""

from collections.abc import Callable
from collections.abc import Sequence
import dataclasses

from oslo_log import log as logging

LOG = logging.getLogger(__name__)

Migration = Callable[..., tuple[int, int]]

#: Every online data migration, in the order they run.
MIGRATIONS: tuple[Migration, ...] = ()

#: Rows per batch when no ``max_count`` is given.
DEFAULT_BATCH = 50


@dataclasses.dataclass
class Totals:
    """What one migration found and did over a whole run."""

    found: int = 0
    done: int = 0


@dataclasses.dataclass
class Outcome:
    """The result of :func:`run`."""

    #: Per migration name, in order.
    totals: dict[str, Totals]
    #: Rows found on the last pass and not migrated.
    remaining: int = 0
    #: Whether the last pass stopped before asking every migration
    #: (``max_count`` was used up).
    cut_short: bool = False
    #: Names of the migrations that raised.
    failed: list[str] = dataclasses.field(default_factory=list)

    @property
    def complete(self) -> bool:
        """Whether nothing is left to migrate."""
        return not (self.remaining or self.cut_short or self.failed)


def _pass(context, budget: int, migrations: Sequence[Migration],
          outcome: Outcome) -> int:
    """One pass over ``migrations`` migrating at most ``budget`` rows in
    all; the rows migrated. Sets ``outcome.remaining`` and
    ``outcome.cut_short`` for this pass."""
    ran = left = 0
    outcome.cut_short = False
    for migration in migrations:
        if ran >= budget:
            outcome.cut_short = True
            break
        name = migration.__name__
        totals = outcome.totals.setdefault(name, Totals())
        try:
            found, done = migration(context, budget - ran)
        except Exception:
            LOG.exception('Online data migration %s failed', name)
            if name not in outcome.failed:
                outcome.failed.append(name)
            continue
        # ``found`` counts what is left before this call: the rows that
        # needed the migration at the start are those plus the ones
        # migrated by earlier passes.
        totals.found = max(totals.found, totals.done + found)
        totals.done += done
        ran += done
        left += found - done
    outcome.remaining = left
    return ran


def run(context, max_count: int | None = None,
        migrations: Sequence[Migration] | None = None) -> Outcome:
    """Run ``migrations`` (default :data:`MIGRATIONS`).

    With ``max_count``, one pass migrating at most that many rows; without,
    passes of :data:`DEFAULT_BATCH` rows until one migrates nothing.
    The outcome is not ``complete`` while rows are left, because
    ``max_count`` stopped the pass or a migration cannot migrate them yet,
    or when a migration raised (logged, and the others still run).
    """
    if migrations is None:
        migrations = MIGRATIONS
    outcome = Outcome(totals={})
    budget = DEFAULT_BATCH if max_count is None else max_count
    while True:
        ran = _pass(context, budget, migrations, outcome)
        if max_count is not None or ran == 0:
            return outcome
