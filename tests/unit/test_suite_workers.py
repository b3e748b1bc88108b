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

"""The suite in parallel workers (tools/run-tests.sh): the order in
which modules are handed out (tests/conftest.py) and the loopback ports
each worker picks (tests/functional/servers.py)."""

import os

import pytest

from tests import conftest
from tests.functional import servers

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))


def test_longest_modules_first_then_by_directory():
    nodeids = ['tests/unit/test_license.py::test_a',
               'tests/api/test_gabbits.py::test_b',
               'tests/functional/test_status.py::test_c',
               'tests/functional/test_maintenance.py::test_d[mariadb]',
               'tests/compat/test_sdk.py::test_e',
               'tests/functional/test_arq_faults.py::test_f',
               'tests/docs/test_build.py::test_g',
               'tests/devstack/test_plugin.py::test_h',
               'tests/elsewhere.py::test_i']
    assert sorted(nodeids, key=conftest.module_rank) == [
        'tests/functional/test_arq_faults.py::test_f',
        'tests/functional/test_maintenance.py::test_d[mariadb]',
        'tests/functional/test_status.py::test_c',
        'tests/compat/test_sdk.py::test_e',
        'tests/devstack/test_plugin.py::test_h',
        'tests/docs/test_build.py::test_g',
        'tests/api/test_gabbits.py::test_b',
        'tests/unit/test_license.py::test_a',
        'tests/elsewhere.py::test_i']


@pytest.mark.parametrize('module', conftest.LONGEST_MODULES)
def test_longest_modules_exist(module):
    assert os.path.isfile(os.path.join(ROOT, module)), module


def test_collection_keeps_modules_whole_and_in_order(request):
    # This session's own collection, sorted by the hook.
    seen = []
    for item in request.session.items:
        module = item.nodeid.split('::', 1)[0]
        if not seen or seen[-1] != module:
            assert module not in seen, module
            seen.append(module)
    ranks = [conftest.module_rank(module) for module in seen]
    assert ranks == sorted(ranks)


@pytest.mark.parametrize('worker', range(3))
def test_each_worker_picks_ports_of_its_own_share(monkeypatch, worker):
    monkeypatch.setenv('PYTEST_XDIST_WORKER', 'gw%d' % worker)
    monkeypatch.setenv('PYTEST_XDIST_WORKER_COUNT', '3')
    ports = [servers.free_port() for _ in range(20)]
    assert {(port >> 1) % 3 for port in ports} == {worker}


def test_without_workers_any_free_port(monkeypatch):
    monkeypatch.delenv('PYTEST_XDIST_WORKER', raising=False)
    monkeypatch.delenv('PYTEST_XDIST_WORKER_COUNT', raising=False)
    assert servers._xdist_slot() == (0, 1)
    assert 1024 <= servers.free_port() < 65536
