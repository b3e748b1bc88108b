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

"""FPGA programming at bind, end to end, with real processes.

``cyborg-all-in-one --host-root`` at the Intel DFL fixture host (an OFS
N6000 whose port runs ``DFL_AFU_ID``), the Intel FPGA driver enabled, the
process's PATH holding only the tree's fake commands: a fake ``fpgaconf``
that reads the GBS image it is given and writes its accelerator id to
the port's ``afu_id``, as partial reconfiguration does. A
:class:`FakeGlance` on loopback serves GBS images with the bitstream
metadata properties and real hashes; a :class:`FakeNova` takes the
events. One deployment serves every case, in order: bind by bitstream
id, already programmed (after a delete, which leaves the region and its
record), bind by function id, a wrong checksum, a bitstream for another
region, Glance down then up, the all-in-one killed while fpgaconf
runs (started again, it programs and binds), then the program API
(``PATCH /v2/deployables/{uuid}/program``) through openstacksdk.
"""

import os
import re
import signal
import uuid
import warnings

from openstack import connection
import pytest
import requests
import sqlalchemy as sa

from cyborg.allinone import fake_tools
from cyborg.clients import placement as placement_client
from tests.fixtures.hosts import fpga_hosts
from tests.fixtures.hosts import hosts
from tests.functional import conftest
from tests.functional import nova_flow
from tests.functional import servers
from tests.functional import test_api_samples as api_samples
from tests.functional.fake_glance import FakeGlance
from tests.functional.fake_nova import FakeNova

HOST = 'fpga-host'
SERVICE = {'X-Service-Roles': 'service'}
TIMEOUT = 30
REGION = hosts.DFL_PR_INTERFACE_ID
OTHER_REGION = '0123456789abcdef0123456789abcdef'
GZIP = 'd8424dc4a4a3c413f89e433683f9040b'
RUNNING = conftest.ALL_IN_ONE_RUNNING
AES = '3afb0c1d2e3f40516273849506a7b8c9'


def _trait(function: str) -> str:
    return 'CUSTOM_FPGA_FUNCTION_ID_INTEL_' + function.upper()


def _properties(function: str, region: str = REGION) -> dict[str, str]:
    return {'bs-name': 'bitstream', 'bs-uuid': uuid.uuid4().hex,
            'vendor': 'Intel', 'board': 'N6000', 'version': '1.0',
            'driver_ver': '1.0', 'driver_path': '/opt/opae',
            'function_uuid': function, 'region_uuid': region}


class Deployment:
    """The all-in-one, its tree, Glance, Nova and Placement."""

    def __init__(self, process, url, tree, glance, nova, directory):
        self.process = process
        self.api = url + '/v2'
        self.tree = tree
        self.glance = glance
        self.nova = nova
        self.directory = directory
        self.hold_file = os.path.join(directory, 'fpgaconf-hold')
        self._connect_placement()

    def _connect_placement(self) -> None:
        with open(self.process.log) as f:
            urls = re.findall(r'Placement:\s+(http://\S+)', f.read())
        assert urls, self.process.log_text()
        self.placement = placement_client.PlacementClient.for_endpoint(
            urls[-1])

    def restart_killed(self) -> None:
        """SIGKILL the all-in-one (its fpgaconf too) and start it again
        on the same state."""
        servers.kill_group(self.process.process, signal.SIGKILL)
        with open(self.process.log) as f:
            started = f.read().count(RUNNING)
        self.process.start()

        def running():
            with open(self.process.log) as f:
                return f.read().count(RUNNING) > started
        servers.wait_for(running, conftest.START_TIMEOUT,
                         'the all-in-one to start again',
                         self.process.process, self.process.log)
        self._connect_placement()

    def image(self, function: str, region: str = REGION, **kwargs) -> str:
        path = os.path.join(self.directory, uuid.uuid4().hex + '.gbs')
        with open(fpga_hosts.write_gbs(path, region, function), 'rb') as f:
            return self.glance.add_image(f.read(),
                                         _properties(function, region),
                                         **kwargs)

    def deployable(self) -> dict:
        (deployable,) = requests.get(self.api + '/deployables',
                                     timeout=TIMEOUT).json()['deployables']
        return deployable

    def traits(self) -> set[str]:
        response = self.placement.request(
            'GET', '/resource_providers/%s/traits'
            % self.deployable()['rp_uuid'])
        return set(response.json()['traits'])

    def fpgaconf_calls(self) -> int:
        return sum(1 for call in fake_tools.calls(self.tree.tools_dir)
                   if call[0] == 'fpgaconf')

    def bind(self, group: dict[str, str]) -> dict:
        """Nova's flow for a one-group profile on the region: the ARQ
        once Nova got its event, with that event's status as ``event``
        (a failed bind reads as BindStarted in the API, its reason in
        ``bind_error``)."""
        return self.finish_bind(*self.start_bind(group))

    def start_bind(self, group: dict[str, str]) -> tuple[str, str]:
        """Create a profile and its ARQ and bind it on the region (202):
        the ARQ and instance uuids."""
        self.wait_free()
        return nova_flow.start_bind(
            self.api, dict(group, **{'resources:FPGA': '1'}), HOST,
            self.deployable()['rp_uuid'], TIMEOUT)

    def finish_bind(self, arq_uuid: str, instance: str) -> dict:
        """The ARQ once Nova got its event, with that event's status as
        ``event``; the instance's ARQs are deleted after."""
        self.nova.wait_tags([arq_uuid], TIMEOUT)
        response = requests.get(
            self.api + '/accelerator_requests/' + arq_uuid,
            timeout=TIMEOUT,
            headers={'openstack-api-version': 'accelerator 2.5'})
        arq = dict(response.json(), event=[
            e['status'] for e in self.nova.accepted()
            if e['tag'] == arq_uuid][0])
        response = requests.delete(self.api + '/accelerator_requests',
                                   params={'instance': instance},
                                   headers=SERVICE, timeout=TIMEOUT)
        assert response.status_code == 204, response.text
        return arq

    def wait_free(self) -> None:
        """Until the region's handle, released after a delete, is free."""
        engine = sa.create_engine('sqlite:///' + os.path.join(
            self.directory, 'state', 'cyborg.sqlite'),
            poolclass=sa.pool.NullPool)

        def free():
            with engine.connect() as connection:
                return connection.execute(sa.text(
                    'SELECT count(*) FROM attach_handles WHERE in_use = 1'
                )).scalar() == 0
        try:
            servers.wait_for(free, TIMEOUT, 'a free attach handle',
                             self.process.process, self.process.log)
        finally:
            engine.dispose()


def _config(nova_url: str, glance_url: str) -> dict:
    return {
        'DEFAULT': {'host': HOST},
        'agent': {'enabled_drivers': 'intel_fpga_driver',
                  'discovery_interval': '2'},
        'nova': {'auth_type': 'admin_token', 'endpoint': nova_url,
                 'token': 'admin', 'endpoint_override': nova_url,
                 'timeout': 5},
        'glance': {'auth_type': 'admin_token', 'endpoint': glance_url,
                   'token': 'admin', 'endpoint_override': glance_url},
    }


@pytest.fixture(scope='module')
def fpga(work_dir):
    directory = os.path.join(work_dir, 'fpga-programming')
    tree = hosts.intel_fpga_dfl_host(os.path.join(directory, 'host'))
    fake_tools.write_gbs_fpgaconf(
        tree.tools_dir,
        tree.abs(fpga_hosts.afu_id_path(tree, hosts.DFL_PF, 0)),
        hold_file=os.path.join(directory, 'fpgaconf-hold'))
    port = servers.free_port()
    with FakeNova() as nova, FakeGlance() as glance, \
            conftest.all_in_one_on_host(_config(nova.url, glance.url),
                                        directory, tree, port) as process:
        yield Deployment(process, 'http://%s:%d' % (servers.LOOPBACK, port),
                         tree, glance, nova, directory)


def test_the_region_is_reported_with_its_function(fpga):
    deployable = fpga.deployable()
    assert deployable['bitstream_id'] is None
    assert _trait(hosts.DFL_AFU_ID) in fpga.traits()


def test_bind_by_bitstream_id_programs_then_binds(fpga):
    image = fpga.image(GZIP)
    arq = fpga.bind({'accel:bitstream_id': image})
    assert (arq['state'], arq['event']) == ('Bound', 'completed'), arq
    assert fpga.fpgaconf_calls() == 1
    assert fpga.glance.downloads(image) == 1
    assert fpga.tree.read(fpga_hosts.afu_id_path(
        fpga.tree, hosts.DFL_PF, 0)).strip() == GZIP
    assert fpga.deployable()['bitstream_id'] == image
    traits = fpga.traits()
    assert _trait(GZIP) in traits
    assert _trait(hosts.DFL_AFU_ID) not in traits


def test_a_region_holding_the_bitstream_binds_without_programming(fpga):
    """The delete of the previous case left the region programmed, its
    bitstream_id and trait as they were."""
    image = fpga.deployable()['bitstream_id']
    assert image is not None and _trait(GZIP) in fpga.traits()
    arq = fpga.bind({'accel:bitstream_id': image})
    assert (arq['state'], arq['event']) == ('Bound', 'completed'), arq
    assert fpga.fpgaconf_calls() == 1
    assert fpga.deployable()['bitstream_id'] == image


def test_bind_by_function_id_finds_the_image_fitting_the_region(fpga):
    fpga.image(AES, region=OTHER_REGION)  # built for another region
    image = fpga.image(AES)
    arq = fpga.bind({'accel:function_id': AES})
    assert (arq['state'], arq['event']) == ('Bound', 'completed'), arq
    assert fpga.fpgaconf_calls() == 2
    assert fpga.deployable()['bitstream_id'] == image
    traits = fpga.traits()
    assert _trait(AES) in traits and _trait(GZIP) not in traits


def test_a_wrong_checksum_fails_the_bind_and_programs_nothing(fpga):
    image = fpga.image(GZIP, served=b'not what Glance hashed')
    arq = fpga.bind({'accel:bitstream_id': image})
    assert arq['event'] == 'failed', arq
    assert 'failed verification' in arq['bind_error']
    assert fpga.fpgaconf_calls() == 2
    # Nothing was programmed: the region's record stays.
    assert fpga.deployable()['bitstream_id'] is not None
    assert fpga.tree.read(fpga_hosts.afu_id_path(
        fpga.tree, hosts.DFL_PF, 0)).strip() == AES


def test_a_bitstream_for_another_region_is_refused(fpga):
    image = fpga.image(GZIP, region=OTHER_REGION)
    arq = fpga.bind({'accel:bitstream_id': image})
    assert arq['event'] == 'failed', arq
    assert 'does not fit the region of deployable' in arq['bind_error']
    assert fpga.fpgaconf_calls() == 2


def test_glance_down_fails_the_bind_and_up_again_it_binds(fpga):
    image = fpga.image(GZIP)
    fpga.glance.down()
    try:
        arq = fpga.bind({'accel:bitstream_id': image})
    finally:
        fpga.glance.up()
    assert arq['event'] == 'failed', arq
    assert 'Glance is unavailable' in arq['bind_error']
    arq = fpga.bind({'accel:bitstream_id': image})
    assert (arq['state'], arq['event']) == ('Bound', 'completed'), arq
    assert fpga.deployable()['bitstream_id'] == image
    assert _trait(GZIP) in fpga.traits()


def test_a_conductor_killed_while_programming_programs_when_back(fpga):
    """The all-in-one dies (SIGKILL) while fpgaconf runs; started again,
    its conductor resumes the bind job, which programs and binds."""
    image = fpga.image(AES)
    calls = fpga.fpgaconf_calls()
    with open(fpga.hold_file, 'w') as f:
        f.write('60')
    arq_uuid, instance = fpga.start_bind({'accel:bitstream_id': image})
    servers.wait_for(lambda: fpga.fpgaconf_calls() > calls, TIMEOUT,
                     'fpgaconf to start', fpga.process.process,
                     fpga.process.log)
    os.remove(fpga.hold_file)
    fpga.restart_killed()
    arq = fpga.finish_bind(arq_uuid, instance)
    assert (arq['state'], arq['event']) == ('Bound', 'completed'), arq
    assert fpga.fpgaconf_calls() == calls + 2
    assert fpga.tree.read(fpga_hosts.afu_id_path(
        fpga.tree, hosts.DFL_PF, 0)).strip() == AES
    assert fpga.deployable()['bitstream_id'] == image
    assert _trait(AES) in fpga.traits()


def _sdk(fpga) -> connection.Connection:
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        return connection.Connection(
            auth_type='none', auth={'endpoint': fpga.api[:-len('/v2')]})


def _program_ops(image: str) -> list[dict]:
    return [{'op': 'replace', 'path': '/program',
             'value': [{'image_uuid': image}]}]


def test_the_program_api_sample_programs_and_records(fpga):
    """The API reference's request sample, its answer shaped as the
    response sample (tests/functional/test_api_samples.py leaves this
    section to this module)."""
    image = fpga.image(AES)
    calls = fpga.fpgaconf_calls()
    deployable = fpga.deployable()
    fpga.wait_free()
    body = api_samples.substitute(
        api_samples.load('deployable-program-req.json'),
        {'8e3c2b1a-0f9e-4d8c-b7a6-5f4e3d2c1b0a': image})
    response = requests.patch(
        '%s/deployables/%s/program' % (fpga.api, deployable['uuid']),
        json=body, timeout=TIMEOUT)
    assert response.status_code == 200, response.text
    assert not api_samples.shape_mismatches(
        api_samples.load('deployable-program-resp.json'), response.json())
    assert response.json()['bitstream_id'] == image
    assert fpga.fpgaconf_calls() == calls + 1
    assert fpga.tree.read(fpga_hosts.afu_id_path(
        fpga.tree, hosts.DFL_PF, 0)).strip() == AES
    assert _trait(AES) in fpga.traits()


def test_the_program_api_programs_and_records_through_openstacksdk(fpga):
    """openstacksdk's patch_deployable (its path repeats the uuid after
    /program). Its deprecated update_deployable, which ``openstack
    accelerator deployable program`` calls, recurses forever in
    openstacksdk 4.x: the client is broken, not this API."""
    image = fpga.image(GZIP)
    calls = fpga.fpgaconf_calls()
    deployable = fpga.deployable()
    conn = _sdk(fpga)
    try:
        programmed = conn.accelerator.patch_deployable(
            deployable['uuid'], _program_ops(image))
    finally:
        conn.close()
    assert programmed.id == deployable['uuid']
    assert fpga.fpgaconf_calls() == calls + 1
    assert fpga.tree.read(fpga_hosts.afu_id_path(
        fpga.tree, hosts.DFL_PF, 0)).strip() == GZIP
    assert fpga.deployable()['bitstream_id'] == image
    traits = fpga.traits()
    assert _trait(GZIP) in traits and _trait(AES) not in traits


def test_the_program_api_refuses_what_cannot_be_programmed(fpga):
    deployable = fpga.deployable()
    before = (deployable['bitstream_id'], fpga.fpgaconf_calls())
    url = '%s/deployables/%s/program' % (fpga.api, deployable['uuid'])
    for image, status, message in [
            (fpga.image(AES, region=OTHER_REGION), 400,
             'does not fit the region'),
            (str(uuid.uuid4()), 400, 'not found in Glance')]:
        response = requests.patch(url, json=_program_ops(image),
                                  timeout=TIMEOUT)
        assert response.status_code == status, response.text
        assert message in response.text
    assert (fpga.deployable()['bitstream_id'],
            fpga.fpgaconf_calls()) == before


def test_the_program_api_does_not_reprogram_under_a_bound_arq(fpga):
    bound = fpga.deployable()['bitstream_id']
    arq_uuid, instance = fpga.start_bind({'accel:bitstream_id': bound})
    fpga.nova.wait_tags([arq_uuid], TIMEOUT)
    calls = fpga.fpgaconf_calls()
    try:
        response = requests.patch(
            '%s/deployables/%s/program' % (fpga.api,
                                           fpga.deployable()['uuid']),
            json=_program_ops(fpga.image(AES)), timeout=TIMEOUT)
        assert response.status_code == 409, response.text
        assert 'is in use' in response.text
    finally:
        requests.delete(fpga.api + '/accelerator_requests',
                        params={'instance': instance}, headers=SERVICE,
                        timeout=TIMEOUT)
    assert fpga.fpgaconf_calls() == calls
    assert fpga.deployable()['bitstream_id'] == bound
