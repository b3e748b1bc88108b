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

"""The rules of importing an upstream OpenStack Cyborg database."""

import datetime
import json
import os

import pytest

from cyborg.domain import arq_states
from cyborg.domain import device_tree
from cyborg.domain import upstream

UPSTREAM_VERSIONS = os.path.join(
    os.path.dirname(__file__), '..', '..', '..', '.venv-upstream', 'lib',
    'python3.11', 'site-packages', 'cyborg', 'db', 'sqlalchemy', 'alembic',
    'versions')


@pytest.mark.parametrize('info,address', [
    ({'domain': '0000', 'bus': '5e', 'device': '00', 'function': '0'},
     '0000:5e:00.0'),
    ({'domain': '0000', 'bus': 'AF', 'device': '0', 'function': '7'},
     '0000:af:00.7'),
    ({'domain': '1', 'bus': '0x3b', 'device': '1f', 'function': '1'},
     '0001:3b:1f.1'),
])
def test_pci_address_is_ours(info, address):
    assert upstream.pci_address(info) == address
    # The form the drivers report and the attach info is read from.
    assert device_tree.pci_address_info(address) == {
        'domain': address[:4], 'bus': address[5:7], 'device': address[8:10],
        'function': address[11]}


@pytest.mark.parametrize('info,reason', [
    ('0000:5e:00.0', 'is not an object'),
    ({'domain': '0000', 'bus': '5e', 'device': '00'}, 'no hex function'),
    ({'domain': '0000', 'bus': 'xx', 'device': '00', 'function': '0'},
     "no hex bus ('xx')"),
    ({'domain': '0000', 'bus': '100', 'device': '00', 'function': '0'},
     "bus '100' is out of range"),
    ({'domain': '0000', 'bus': '5e', 'device': '20', 'function': '0'},
     "device '20' is out of range"),
    ({'domain': '0000', 'bus': '5e', 'device': '00', 'function': '8'},
     "function '8' is out of range"),
])
def test_pci_address_refuses_what_is_not_one(info, reason):
    with pytest.raises(upstream.Unmappable, match=reason.replace(
            '(', '\\(').replace(')', '\\)')):
        upstream.pci_address(info)


def test_device_address_is_the_lowest_function():
    infos = [{'domain': '0000', 'bus': 'd8', 'device': '00',
              'function': f} for f in ('1', '0')]
    assert upstream.device_address(infos) == '0000:d8:00.0'
    with pytest.raises(upstream.Unmappable, match='no PCI control path id'):
        upstream.device_address([])


def test_every_upstream_state_maps_onto_one_of_ours():
    assert set(upstream.STATE_MAP.values()) <= set(arq_states.ALL)
    # A bind that never finished ends as our bind timeout ends it.
    assert upstream.mapped_state('BindStarted') == arq_states.BIND_FAILED
    assert arq_states.allowed(arq_states.BIND_STARTED,
                              arq_states.BIND_FAILED)
    for same in ('Initial', 'Bound', 'BindFailed', 'Unbound', 'Deleting'):
        assert upstream.mapped_state(same) == same
    with pytest.raises(upstream.Unmappable, match="'UnbindFailed' is not"):
        upstream.mapped_state('UnbindFailed')
    assert upstream.HOLDS_HANDLE == {arq_states.BOUND, arq_states.DELETING}


def test_known_revisions_include_upstream_17_head():
    assert upstream.revision_known('b47c8f2d1e3a')
    assert not upstream.revision_known('deadbeefcafe')
    assert not upstream.revision_known(None)
    assert 'deadbeefcafe' in upstream.unknown_revision_message(
        'deadbeefcafe')
    assert 'not an upstream' in upstream.unknown_revision_message(None)


def test_known_revisions_are_a_chain_of_upstream_migrations():
    """Each known revision's parent is the next one (the newest first),
    as upstream's migration files say."""
    if not os.path.isdir(UPSTREAM_VERSIONS):
        pytest.fail('upstream OpenStack Cyborg is missing from '
                    '.venv-upstream: run tools/bench/upstream-venv.sh')
    parents = {}
    for name in os.listdir(UPSTREAM_VERSIONS):
        if name.endswith('.py'):
            text = open(os.path.join(UPSTREAM_VERSIONS, name)).read()
            scope = {}
            exec(compile('\n'.join(
                line for line in text.splitlines()
                if line.startswith(('revision =', 'down_revision ='))),
                name, 'exec'), scope)
            parents[scope['revision']] = scope['down_revision']
    known = list(upstream.KNOWN_REVISIONS)
    assert known[0] not in parents.values()  # the head
    for child, parent in zip(known, known[1:], strict=False):
        assert parents[child] == parent


def test_canonical_json_and_its_errors():
    assert upstream.canonical('{"b": "1", "a": "0"}', 'x') == (
        '{"a":"0","b":"1"}')
    with pytest.raises(upstream.Unmappable,
                       match="attach_info is not JSON .*'nope'"):
        upstream.canonical('nope', 'attach_info')
    with pytest.raises(upstream.Unmappable, match='is not JSON'):
        upstream.parse_json(None, 'cpid_info')


def test_profile_groups():
    assert upstream.profile_groups('{"groups": [{"resources:FPGA": "1"}]}'
                                   ) == [{'resources:FPGA': '1'}]
    for text in ('[]', '{"groups": {}}', '{"groups": ["x"]}', '{}'):
        with pytest.raises(upstream.Unmappable,
                           match='profile_json has no list of groups'):
            upstream.profile_groups(text)
    with pytest.raises(upstream.Unmappable, match='is not JSON'):
        upstream.profile_groups('{')


def test_newest_row_wins():
    old = datetime.datetime(2024, 1, 1)
    new = datetime.datetime(2024, 6, 1)
    rows = [dict(id=1, created_at=new, updated_at=None),
            dict(id=2, created_at=old, updated_at=None),
            dict(id=3, created_at=old, updated_at=None)]
    assert upstream.newest(rows)['id'] == 1
    rows[2]['updated_at'] = datetime.datetime(2025, 1, 1)
    assert upstream.newest(rows)['id'] == 3
    # Equal times: the later row.
    assert upstream.newest([dict(id=4, created_at=None, updated_at=None),
                            dict(id=5, created_at=None,
                                 updated_at=None)])['id'] == 5


def test_report_lines_and_counts():
    report = upstream.ImportReport('mysql+pymysql://u:***@h/cyborg',
                                   'b47c8f2d1e3a')
    report.source_rows = {'devices': 2, 'quota_usages': 1}
    report.imported_rows = {'devices': 2, 'services': 1}
    report.count_state('BindStarted', 'BindFailed')
    report.count_state('BindStarted', 'BindFailed')
    report.hosts = {'h1': 2}
    report.adjustments = ['something adjusted']
    assert report.lines() == [
        'Source: mysql+pymysql://u:***@h/cyborg, alembic revision '
        'b47c8f2d1e3a (openstack-cyborg 17.0.0, adds '
        'devices.device_state)',
        'Upstream tables (rows read -> rows imported):',
        '  devices                              2 -> 2',
        '  quota_usages                         1 -> skipped (upstream '
        'never uses its quota tables)',
        'Derived rows:',
        '  services                             1',
        'Accelerator requests per state (upstream -> ours):',
        '  BindStarted  -> BindFailed         2',
        'Hosts: 1',
        '  h1: 2 device(s)',
        'Adjusted: 1',
        '  something adjusted',
        'Cannot import: 0']
    assert json.loads(report.as_json()) == {
        'source_rows': {'devices': 2, 'quota_usages': 1},
        'imported_rows': {'devices': 2, 'services': 1},
        'arq_states': {'BindStarted': {'BindFailed': 2}},
        'hosts': 1, 'adjustments': 1}
