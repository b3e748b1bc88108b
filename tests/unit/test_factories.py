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


"""The row factories of tests.factories: defaults, parents and overrides
as the product's reads see them."""

from cyborg.db import arqs as arq_db
from cyborg.db import device_profiles as profiles_db
from cyborg.db import hardware
from cyborg.domain import arq_states
from tests import factories


def test_attach_handle_creates_its_parents(database, admin_context):
    handle = factories.create_test_attach_handle(database)
    [deployable] = hardware.deployable_list(admin_context)
    assert deployable['id'] == handle['deployable_id']
    [device] = hardware.device_list(admin_context, {})
    assert (device['type'], device['hostname']) == ('FPGA', 'h1')
    assert handle['attach_type'] == 'PCI'
    assert handle['in_use'] is False


def test_keywords_override_defaults(database, admin_context):
    device = factories.create_test_device(database, hostname='h2',
                                          type='GPU')
    factories.create_test_deployable(database, device_id=device['id'],
                                     num_accelerators=3)
    [deployable] = hardware.deployable_list(admin_context)
    assert deployable['num_accelerators'] == 3
    assert hardware.device_get(admin_context, device['uuid'])['type'] == 'GPU'


def test_arq_of_a_new_profile(database, admin_context):
    arq = factories.create_test_arq(database, project_id='p2')
    shown = arq_db.arq_get(admin_context, arq['uuid'], 'p2')
    assert shown['state'] == arq_states.INITIAL
    assert shown['device_profile_name'].startswith('dp-')
    assert shown['instance_uuid'] is None


def test_a_profile_row_on_an_engine_reads_as_the_api_writes_it(
        database, admin_context):
    row = factories.create_test_device_profile(
        engine=database, name='raw', groups=[{'resources:PGPU': '1'}])
    via_api = factories.create_test_device_profile(name='api')
    stored = profiles_db.device_profile_get(admin_context, name='raw')
    assert stored['uuid'] == row['uuid']
    assert stored['groups'] == [{'resources:PGPU': '1'}]
    assert set(stored) == set(profiles_db.device_profile_get(
        admin_context, name=via_api['name']))


def test_attribute_of_a_new_deployable(database, admin_context):
    attribute = factories.create_test_attribute(database, key='x',
                                                value='y')
    [deployable] = hardware.deployable_list(admin_context)
    assert attribute['deployable_id'] == deployable['id']
    assert (attribute['key'], attribute['value']) == ('x', 'y')
