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

"""Programming FPGA regions at bind and through the program API
(:mod:`cyborg.conductor.programming`, :mod:`cyborg.db.programming`)."""

import types
from unittest import mock

import oslo_messaging as messaging
import pytest
import sqlalchemy as sa

from cyborg.common import exception
from cyborg.conductor import binding
from cyborg.conductor import manager as conductor_manager
from cyborg.conductor import programming
from cyborg.conductor import service as conductor_service
from cyborg.db import arqs as arq_db
from cyborg.db import binding as binding_db
from cyborg.db import device_profiles as profiles_db
from cyborg.db import hardware
from cyborg.db import inventory
from cyborg.db import models
from cyborg.db import programming as programming_db
from cyborg.domain import arq_states as states
from cyborg.domain import bitstream as bitstream_rules
from cyborg.domain import device_tree

REGION = 'f3c9941350814aadbced07eb84a6d0bb'
OTHER_REGION = '0123456789abcdef0123456789abcdef'
FUNCTION = 'd8424dc4a4a3c413f89e433683f9040b'
OLD_FUNCTION = '9aeffe5f84570612c6d23bb2fb5c8a63'
IMAGE = '0b1e6f2a-3c4d-4e5f-8a9b-0c1d2e3f4a5b'
OTHER_IMAGE = '1c2f7a3b-4d5e-4f60-9bac-1d2e3f4a5b6c'
INSTANCE = '6d2b3c5e-1f0a-4b8e-9c7d-0e1f2a3b4c5d'
OLD_TRAIT = 'CUSTOM_FPGA_FUNCTION_ID_INTEL_' + OLD_FUNCTION.upper()
NEW_TRAIT = 'CUSTOM_FPGA_FUNCTION_ID_INTEL_' + FUNCTION.upper()
REGION_TRAIT = 'CUSTOM_FPGA_REGION_INTEL_' + REGION.upper()


def _properties(function=FUNCTION, region=REGION, **changes):
    values = {'bs-name': 'gzip', 'bs-uuid': '5' * 32, 'vendor': 'Intel',
              'board': 'N6000', 'version': '1.0', 'driver_ver': '1.0',
              'driver_path': '/opt/gzip', 'function_uuid': function,
              'region_uuid': region}
    values.update(changes)
    return {k: v for k, v in values.items() if v is not None}


def _image(uuid=IMAGE, **properties):
    return types.SimpleNamespace(
        id=uuid, properties=_properties(**properties), hash_algo='sha256',
        hash_value='ab' * 32, checksum=None, size=4)


class FakeGlance:
    """Images by id; a search by property filters."""

    def __init__(self, *images):
        self.images = {image.id: image for image in images}
        self.searches = []

    def get(self, image_id):
        if image_id not in self.images:
            raise exception.BitstreamNotFound(image=image_id)
        return self.images[image_id]

    def find_bitstreams(self, **metadata):
        self.searches.append(metadata)
        return [i for i in self.images.values()
                if all(i.properties.get(k.replace('bs_', 'bs-')) == v
                       for k, v in metadata.items())]


class Agent:
    """The conductor's agents: programs (or refuses to), prepares,
    releases."""

    def __init__(self, refuse=None, function=FUNCTION):
        self.refuse = refuse
        self.function = function
        self.programmed = []
        self.prepared = []
        self.released = []
        self.delivered = []

    def program_image(self, context, host, driver, controlpath, image):
        if self.refuse:
            raise self.refuse
        self.programmed.append((host, driver, controlpath, image))
        return self.function

    def prepare(self, context, claim):
        self.prepared.append(claim)

    def release(self, context, handle):
        self.released.append(handle)

    def deliver(self, rows):
        self.delivered.extend(rows)


def _wire(handles=2, region=REGION, traits=(OLD_TRAIT,)):
    return [{
        'type': 'FPGA', 'vendor': '0x8086', 'model': 'Intel FPGA N6000',
        'address': '0000:5e:00.0',
        'controlpath_ids': [{'cpid_type': 'PCI', 'cpid_info':
                             device_tree.pci_address_info('0000:5e:00.0')}],
        'deployables': [{
            'name': 'region0', 'num_accelerators': handles,
            'resource_class': 'FPGA',
            'traits': sorted(['CUSTOM_FPGA_INTEL', REGION_TRAIT,
                              *traits]),
            'attach_handles': [
                {'attach_type': 'PCI', 'attach_info':
                 device_tree.pci_address_info('0000:5e:00.%d' % i)}
                for i in range(handles)],
            'attributes': {'region_id': region} if region else {},
            'driver_name': 'intel', 'preparation': 'program'}],
        'std_board_info': {}, 'vendor_board_info': {},
        'health': 'healthy', 'driver': 'intel'}]


def _report(context, wire, host='host1'):
    inventory.apply_report(context, host, host, wire,
                           device_tree.tree_digest(wire), [])
    [deployable] = hardware.deployable_list(context)
    return deployable


@pytest.fixture
def region(database, admin_context):
    """A region of two handles with function OLD_FUNCTION: its
    deployable."""
    for name, group in (('by-id', {'accel:bitstream_id': IMAGE}),
                        ('by-function', {'accel:function_id': FUNCTION}),
                        ('other', {'accel:bitstream_id': OTHER_IMAGE}),
                        ('plain', {})):
        profiles_db.device_profile_create(admin_context, {
            'name': name,
            'groups': [dict(group, **{'resources:FPGA': '1'})]})
    return _report(admin_context, _wire())


def _programmer(agent, glance=None):
    resolver = (programming.GlanceBitstreams(lambda: glance)
                if glance is not None else programming.NoBitstreamSource())
    return programming.RegionProgrammer(resolver, agent)


def _bind(context, deployable, profile, agent, glance=None, run=True):
    """Bind an ARQ of ``profile`` to the region and run its job; the ARQ
    as read after."""
    [arq] = arq_db.arq_create(context, profile, 'p1')
    outcome = binding_db.bind(context, {arq['uuid']: {
        'hostname': 'host1', 'device_rp_uuid': deployable['rp_uuid'],
        'instance_uuid': INSTANCE}}, None, 'cond1')
    assert outcome.jobs == [arq['uuid']]
    if run:
        job = binding.Binder('cond1', 1, 60, agent, agent.deliver,
                             programmer=_programmer(agent, glance))
        job.run(context, arq['uuid'])
        job.stop()
    return arq_db.arq_get(context, arq['uuid'], None)


def _deployable(context):
    [deployable] = hardware.deployable_list(context)
    return deployable


def _traits(context):
    return programming_db.target(
        context, uuid=_deployable(context)['uuid']).traits


# Bind-time programming -----------------------------------------------------

def test_a_bind_by_bitstream_id_programs_records_and_binds(
        region, admin_context):
    agent = Agent()
    arq = _bind(admin_context, region, 'by-id', agent, FakeGlance(_image()))
    assert arq['state'] == states.BOUND
    [(host, driver, controlpath, image)] = agent.programmed
    assert (host, driver) == ('host1', 'intel')
    assert controlpath['cpid_info']['bus'] == '5e'
    assert image == {'id': IMAGE, 'os_hash_algo': 'sha256',
                     'os_hash_value': 'ab' * 32, 'size': 4,
                     'deployable': region['uuid']}
    assert _deployable(admin_context)['bitstream_id'] == IMAGE
    assert _traits(admin_context) == sorted(
        ['CUSTOM_FPGA_INTEL', REGION_TRAIT, NEW_TRAIT])
    assert [c.preparation for c in agent.prepared] == ['program']
    assert [e['status'] for e in agent.delivered] == ['completed']


def test_a_bind_by_function_finds_the_one_image_fitting_the_region(
        region, admin_context):
    glance = FakeGlance(_image(), _image(OTHER_IMAGE, region=OTHER_REGION))
    agent = Agent()
    arq = _bind(admin_context, region, 'by-function', agent, glance)
    assert arq['state'] == states.BOUND
    assert [p[3]['id'] for p in agent.programmed] == [IMAGE]
    assert glance.searches == [{'function_uuid': FUNCTION}]


def test_a_region_holding_the_bitstream_is_not_programmed_again(
        region, admin_context):
    agent = Agent()
    glance = FakeGlance(_image())
    _bind(admin_context, region, 'by-id', agent, glance)
    second = _bind(admin_context, region, 'by-id', agent, glance)
    assert second['state'] == states.BOUND
    assert len(agent.programmed) == 1


def test_the_trait_uses_the_function_the_driver_reports(
        region, admin_context):
    agent = Agent(function=OTHER_REGION)
    _bind(admin_context, region, 'by-id', agent, FakeGlance(_image()))
    assert ('CUSTOM_FPGA_FUNCTION_ID_INTEL_' + OTHER_REGION.upper()
            in _traits(admin_context))
    assert OLD_TRAIT not in _traits(admin_context)


def test_without_a_reported_function_the_trait_is_the_bitstreams(
        region, admin_context):
    _bind(admin_context, region, 'by-id', Agent(function=None),
          FakeGlance(_image()))
    assert NEW_TRAIT in _traits(admin_context)


@pytest.mark.parametrize('profile,glance,expected', [
    ('by-id', None, 'no bitstream source configured: the conductor needs '
     '[glance]'),
    ('by-id', FakeGlance(), 'Bitstream image %s not found' % IMAGE),
    ('by-id', FakeGlance(_image(region=OTHER_REGION)),
     'does not fit the region of deployable'),
    ('by-id', FakeGlance(_image(**{'bs-uuid': None})),
     'Invalid bitstream metadata bs-uuid: is required'),
    ('by-function', FakeGlance(_image(region=OTHER_REGION)),
     'with function_id %s fitting region type %s' % (FUNCTION, REGION)),
    ('by-function', FakeGlance(_image(), _image(OTHER_IMAGE)),
     '2 bitstream images match function_id'),
])
def test_a_bind_that_finds_no_single_fitting_bitstream_fails(
        region, admin_context, database, profile, glance, expected):
    agent = Agent()
    arq = _bind(admin_context, region, profile, agent, glance)
    assert arq['state'] == states.BIND_FAILING
    assert arq['bind_error'].startswith(
        'Programming the device of attach handle')
    assert expected in arq['bind_error']
    assert agent.programmed == []
    assert _deployable(admin_context)['bitstream_id'] is None
    assert [e['status'] for e in agent.delivered] == ['failed']


@pytest.mark.parametrize('error,expected,kept', [
    (exception.BitstreamChecksumMismatch(image=IMAGE, reason='its sha256 '
                                         'is 00'), 'failed verification',
     True),
    (exception.GlanceUnavailable(reason='refused'), 'Glance is '
     'unavailable', True),
    (messaging.MessagingTimeout('late'), 'the agent did not answer in '
     'time', False),
    (messaging.RemoteError('FPGAProgramError', 'fpgaconf exited with '
                           'status 1'), 'FPGAProgramError: fpgaconf', False),
])
def test_a_failed_programming_fails_the_bind(region, admin_context, error,
                                             expected, kept):
    """A failure before the driver ran keeps what the region holds; one
    after makes it unknown."""
    agent = Agent()
    first = _bind(admin_context, region, 'by-id', agent,
                  FakeGlance(_image()))
    assert _deployable(admin_context)['bitstream_id'] == IMAGE
    released = arq_db.arq_unbind(admin_context, [first['uuid']], None)
    arq_db.free_prepared(admin_context, [h.id for h in released])
    agent.refuse = error
    arq = _bind(admin_context, region, 'other', agent,
                FakeGlance(_image(OTHER_IMAGE)))
    assert arq['state'] == states.BIND_FAILING
    assert expected in arq['bind_error']
    assert _deployable(admin_context)['bitstream_id'] == (
        IMAGE if kept else None)


def test_a_region_another_arq_uses_is_not_reprogrammed_under_it(
        region, admin_context):
    agent = Agent()
    _bind(admin_context, region, 'by-id', agent, FakeGlance(_image()))
    other = _bind(admin_context, region, 'other', agent,
                  FakeGlance(_image(OTHER_IMAGE)))
    assert other['state'] == states.BIND_FAILING
    assert 'is in use (ARQ' in other['bind_error']
    assert 'is Bound on it, with bitstream %s' % IMAGE in other['bind_error']
    assert len(agent.programmed) == 1
    assert _deployable(admin_context)['bitstream_id'] == IMAGE


def test_two_binds_needing_a_program_never_program_together(
        region, admin_context):
    """The second job finds the first one binding on the region."""
    agent = Agent()
    first = _bind(admin_context, region, 'by-id', agent, run=False)
    second = _bind(admin_context, region, 'other', agent,
                   FakeGlance(_image(OTHER_IMAGE)))
    assert second['state'] == states.BIND_FAILING
    assert 'ARQ %s is BindStarted on it' % first['uuid'] in (
        second['bind_error'])
    assert agent.programmed == []


def test_a_bind_without_a_program_request_programs_nothing(
        region, admin_context):
    agent = Agent()
    arq = _bind(admin_context, region, 'plain', agent, FakeGlance())
    assert arq['state'] == states.BOUND
    assert agent.programmed == []


def test_unbind_and_delete_keep_the_region_and_its_record(
        region, admin_context, database):
    agent = Agent()
    arq = _bind(admin_context, region, 'by-id', agent, FakeGlance(_image()))
    arq_db.arq_unbind(admin_context, [arq['uuid']], None)
    assert _deployable(admin_context)['bitstream_id'] == IMAGE
    assert NEW_TRAIT in _traits(admin_context)
    arq_db.arq_delete(admin_context, [arq['uuid']], None, None)
    assert _deployable(admin_context)['bitstream_id'] == IMAGE
    assert NEW_TRAIT in _traits(admin_context)


def test_recording_changes_only_that_deployables_traits(
        region, admin_context, database):
    programming_db.record(admin_context, region['id'], IMAGE, NEW_TRAIT)
    with database.connect() as connection:
        values = [r.value for r in connection.execute(
            sa.select(models.Attribute.__table__).where(
                models.Attribute.__table__.c.key.like('trait%')))]
        requested = connection.execute(sa.select(
            models.Service.__table__.c.sync_requested)).scalars().all()
    assert sorted(values) == sorted(['CUSTOM_FPGA_INTEL', REGION_TRAIT,
                                     NEW_TRAIT])
    assert requested and all(r >= 1 for r in requested)


# The program API -------------------------------------------------------------

_ONE_IMAGE = object()


def _api(agent, glance=_ONE_IMAGE):
    if glance is _ONE_IMAGE:
        glance = FakeGlance(_image())
    return conductor_manager.ConductorManager(
        'cond1', programmer=_programmer(agent, glance))


def _refused(call) -> Exception:
    with pytest.raises(messaging.ExpectedException) as caught:
        call()
    return caught.value.exc_info[1]


def test_the_program_api_programs_and_records(region, admin_context,
                                              database):
    agent = Agent()
    _api(agent).deployable_program(admin_context, region['uuid'], IMAGE)
    assert [p[3]['id'] for p in agent.programmed] == [IMAGE]
    assert _deployable(admin_context)['bitstream_id'] == IMAGE
    assert NEW_TRAIT in _traits(admin_context)
    # The handles held while programming are free again.
    with database.connect() as connection:
        assert connection.execute(sa.select(sa.func.count()).where(
            models.AttachHandle.in_use == sa.true())).scalar() == 0


@pytest.mark.parametrize('case,error_class,text', [
    ('unknown deployable', exception.DeployableNotFound,
     'Deployable 00000000-0000-0000-0000-000000000000 not found'),
    ('no image', exception.BitstreamNotFound, 'not found in Glance'),
    ('broken metadata', exception.InvalidBitstreamMetadata,
     'function_uuid'),
    ('other region', exception.BitstreamIncompatible,
     'built for region type %s' % OTHER_REGION),
    ('no glance', exception.NoBitstreamSource, '[glance]'),
    ('agent fails', exception.ProgramFailed, 'fpgaconf exited'),
    ('glance down', exception.ProgramFailed, 'Glance is unavailable'),
    ('cannot program', exception.DeployableNotProgrammable,
     'cannot program devices'),
])
def test_the_program_api_refuses_clearly(region, admin_context, case,
                                         error_class, text):
    agent = Agent()
    glance = FakeGlance(_image())
    uuid, image = region['uuid'], IMAGE
    if case == 'unknown deployable':
        uuid = '00000000-0000-0000-0000-000000000000'
    elif case == 'no image':
        image = OTHER_IMAGE
    elif case == 'broken metadata':
        glance = FakeGlance(_image(function='nope'))
    elif case == 'other region':
        glance = FakeGlance(_image(region=OTHER_REGION))
    elif case == 'no glance':
        glance = None
    elif case == 'agent fails':
        agent.refuse = messaging.RemoteError('FPGAProgramError',
                                             'fpgaconf exited with 1')
    elif case == 'glance down':
        glance = mock.Mock(get=mock.Mock(side_effect=(
            exception.GlanceUnavailable(reason='connection refused'))))
    elif case == 'cannot program':
        agent.refuse = exception.DeployableNotProgrammable(
            uuid=region['uuid'], reason='plain cannot program devices')
    error = _refused(lambda: _api(agent, glance).deployable_program(
        admin_context, uuid, image))
    assert isinstance(error, error_class)
    assert text in str(error)


def test_the_program_api_refuses_a_deployable_in_use(region, admin_context):
    agent = Agent()
    arq = _bind(admin_context, region, 'plain', agent)
    error = _refused(lambda: _api(agent).deployable_program(
        admin_context, region['uuid'], IMAGE))
    assert isinstance(error, exception.DeployableInUse)
    assert 'ARQ %s is Bound on it' % arq['uuid'] in str(error)
    assert agent.programmed == []


def test_the_program_api_hold_refuses_a_region_arqs_use(region,
                                                        admin_context,
                                                        database):
    """The program API's claim of a region refuses it while an ARQ uses
    it, before it claims any handle: the refusal names each ARQ and its
    state (not only a count of handles taken), and no handle changes."""
    agent = Agent()
    arq = _bind(admin_context, region, 'plain', agent)
    handles = models.AttachHandle.__table__

    def in_use():
        with database.connect() as connection:
            return connection.execute(sa.select(
                handles.c.id, handles.c.in_use, handles.c.updated_at)
                .order_by(handles.c.id)).all()

    before = in_use()
    with pytest.raises(exception.DeployableInUse) as refused:
        programming_db.hold(admin_context, region['id'])
    assert refused.value.kwargs['reason'] == 'ARQ %s is %s on it' % (
        arq['uuid'], states.BOUND)
    assert in_use() == before


def test_a_deployable_without_a_control_path_is_not_programmable(
        database, admin_context):
    wire = _wire()
    wire[0]['deployables'][0]['attach_handles'] = []
    wire[0]['deployables'][0]['num_accelerators'] = 1
    deployable = _report(admin_context, wire)
    error = _refused(lambda: _api(Agent()).deployable_program(
        admin_context, deployable['uuid'], IMAGE))
    assert isinstance(error, exception.DeployableNotProgrammable)
    assert 'no control path' in str(error)


def test_a_bind_waits_for_no_program_api_hold(region, admin_context):
    """A region the API holds (a handle in use by no ARQ) is not
    programmed by a bind meanwhile."""
    programming_db.hold(admin_context, region['id'])
    with pytest.raises(exception.DeployableInUse, match='program API'):
        programming_db.begin_for_arq(admin_context, region['id'], 'a',
                                     IMAGE)
    programming_db.unhold(admin_context, region['id'])
    assert programming_db.begin_for_arq(admin_context, region['id'], 'a',
                                        IMAGE) == programming_db.PROGRAM


# Wiring --------------------------------------------------------------------

def test_the_conductor_uses_glance_only_where_it_is_configured(conf):
    assert isinstance(conductor_service.bitstream_resolver(conf),
                      programming.NoBitstreamSource)
    conf.set_override('endpoint_override', 'http://127.0.0.1:9292',
                      group='glance')
    assert isinstance(conductor_service.bitstream_resolver(conf),
                      programming.GlanceBitstreams)


def test_agent_handles_send_program_image_to_the_agent():
    with mock.patch.object(conductor_service.agent_rpcapi,
                           'AgentAPI') as api:
        handles = conductor_service.AgentHandles(object(), 7)
    image = {'id': IMAGE, 'os_hash_algo': 'sha256', 'os_hash_value': 'ab',
             'size': 1}
    api.return_value.program_image.return_value = FUNCTION
    assert handles.program_image('ctx', 'host1', 'intel', {'c': 1},
                                 image) == FUNCTION
    api.return_value.program_image.assert_called_once_with(
        'ctx', 'host1', 'intel', {'c': 1}, image)


def test_agent_handles_prepare_nothing_more_for_a_region_to_program():
    with mock.patch.object(conductor_service.agent_rpcapi,
                           'AgentAPI') as api:
        handles = conductor_service.AgentHandles(object(), 7)
    handles.prepare('ctx', binding_db.Claim('a', 'h', 'PCI', {}, 'host1',
                                            'intel', preparation='program'))
    api.return_value.prepare_attach_handle.assert_not_called()


def test_function_traits_follow_the_region_vendor():
    assert bitstream_rules.trait_vendor([REGION_TRAIT], 'Acme') == 'INTEL'
    assert bitstream_rules.trait_vendor(['CUSTOM_FPGA_X'], 'Acme') == 'Acme'
    assert bitstream_rules.with_function_trait(
        [OLD_TRAIT, 'A'], NEW_TRAIT) == ['A', NEW_TRAIT]
    assert bitstream_rules.with_function_trait([OLD_TRAIT, 'A'], None) == [
        'A']


def test_a_report_of_another_function_forgets_the_recorded_bitstream(
        region, admin_context):
    """Programmed by other means: bitstream_id no longer tells."""
    agent = Agent()
    _bind(admin_context, region, 'by-id', agent, FakeGlance(_image()))
    # The agent's next report shows the function programmed: kept.
    _report(admin_context, _wire(traits=(NEW_TRAIT,)))
    assert _deployable(admin_context)['bitstream_id'] == IMAGE
    # Another function shows up: unknown.
    _report(admin_context, _wire(traits=(OLD_TRAIT,)))
    assert _deployable(admin_context)['bitstream_id'] is None
    assert _traits(admin_context) == sorted(
        ['CUSTOM_FPGA_INTEL', REGION_TRAIT, OLD_TRAIT])


def test_programming_waits_program_timeout_seconds(conf):
    with mock.patch.object(conductor_service.agent_rpcapi,
                           'AgentAPI') as api:
        conductor_service.AgentHandles(object(), 7, None,
                                       program_timeout=240)
    assert [c.args[1] for c in api.call_args_list] == [7, 240]
    assert conf.conductor.program_timeout == 240
