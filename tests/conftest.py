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

"""Hooks of the whole suite: the order in which its modules run.

``tools/run-tests.sh`` runs the suite in parallel workers (pytest-xdist,
``--dist loadfile``: a module runs whole on one worker, which starts its
module-scoped deployments once) and hands the modules out in collection
order. The modules that mostly wait on the services they start (the
functional and client compatibility ones, a few minutes each) come
first, the longest of them first of all, and the fast in-process ones
last, so that no long module starts late and leaves one worker busy
alone at the end. The order of the tests in a module does not change,
nor does it depend on whether workers run it.
"""

from __future__ import annotations

import pytest

# Top-level test directories, the ones whose modules run first first; a
# directory not listed runs after them.
DIRECTORY_ORDER = ('functional', 'compat', 'devstack', 'docs', 'api', 'unit')

# The longest modules (measured: over two minutes each in a run of the
# functional and compatibility tests in four workers), longest first;
# they run before the rest of their directory. Only the order depends
# on this list: a module missing from it just runs in its turn.
LONGEST_MODULES = (
    'tests/functional/test_arq_faults.py',
    'tests/functional/test_outages.py',
    'tests/functional/test_rabbit_cluster.py',
    'tests/functional/test_mig_partitions.py',
    'tests/functional/test_host_reboot.py',
    'tests/functional/test_galera.py',
    'tests/functional/test_maintenance.py',
    'tests/functional/test_inventory.py',
    'tests/functional/test_allinone.py',
    'tests/functional/test_migrations.py',
    'tests/functional/test_upstream_switch.py',
    'tests/functional/test_real_nova.py',
    'tests/functional/test_taint_rules_real_nova.py',
    'tests/functional/test_alternatives_real_nova.py',
    'tests/functional/test_profile_updates_real_nova.py',
    'tests/compat/test_cli.py',
    'tests/functional/test_api_gabbits.py',
    'tests/functional/test_readme.py',
    'tests/functional/test_signals.py',
    'tests/functional/test_tempest_api.py',
    'tests/functional/test_prometheus.py',
    'tests/functional/test_notifications.py',
    'tests/functional/test_usage_audit.py',
    'tests/functional/test_taint_scheduling.py',
    'tests/functional/test_host_replay.py',
    'tests/functional/test_quotas_keystone.py',
)


def module_rank(nodeid: str) -> tuple[int, int]:
    """When the module of ``nodeid`` (``tests/<dir>/...``) runs: the
    smaller, the sooner."""
    module = nodeid.split('::', 1)[0]
    if module in LONGEST_MODULES:
        return -1, LONGEST_MODULES.index(module)
    parts = module.split('/')
    directory = parts[1] if len(parts) > 2 and parts[0] == 'tests' else ''
    if directory in DIRECTORY_ORDER:
        return DIRECTORY_ORDER.index(directory), 0
    return len(DIRECTORY_ORDER), 0


def pytest_collection_modifyitems(session: pytest.Session,
                                  config: pytest.Config,
                                  items: list[pytest.Item]) -> None:
    # A stable sort: a module's tests stay together and in their order.
    items.sort(key=lambda item: module_rank(item.nodeid))
