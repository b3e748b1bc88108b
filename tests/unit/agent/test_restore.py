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

"""The agent's restore of its host's prepared handles at start
(:mod:`cyborg.agent.restore`), with a recording driver and conductor."""

import contextlib
import threading

import oslo_messaging as messaging
import pytest

from cyborg.accelerator.drivers import base
from cyborg.accelerator.drivers import errors
from cyborg.agent import discovery
from cyborg.agent import driver_calls
from cyborg.agent import manager
from cyborg.agent import restore as restore_mod
from cyborg.domain import device_tree
from cyborg.domain import remediation
from cyborg.domain import restore

INFO = {'bus': '0b', 'device': '00', 'domain': '0000', 'function': '1'}
REGION = {'bus': '5e', 'device': '00', 'domain': '0000', 'function': '0'}
TRAIT = 'CUSTOM_FPGA_FUNCTION_ID_INTEL_GZIP'
CPID = {'cpid_type': 'PCI', 'cpid_info': REGION}
IMAGE = {'id': 'img-1', 'os_hash_algo': 'sha512', 'os_hash_value': 'ab',
         'size': 4}


class _Driver(base.AcceleratorDriver):
    name = 'recording'

    def __init__(self, prepared=None, fail=None, traits=()):
        #: handle uuid -> what is_prepared answers.
        self.prepared = dict(prepared or {})
        self.fail = dict(fail or {})
        self.traits = list(traits)
        self.calls = []

    def discover(self):
        self.calls.append(('discover',))
        return [device_tree.Device(
            'FPGA', 'intel', 'n6000', '0000:5e:00.0', [], [
                device_tree.Deployable(
                    'region', 1, 'FPGA', traits=list(self.traits),
                    attach_handles=[device_tree.AttachHandle('PCI',
                                                             REGION)])])]

    def is_prepared(self, handle, handle_uuid, preparation):
        self.calls.append(('is_prepared', handle_uuid, preparation))
        return self.prepared.get(handle_uuid)

    def restore_attach_handle(self, handle, handle_uuid, preparation):
        self.calls.append(('restore', handle_uuid, preparation))
        if handle_uuid in self.fail:
            raise self.fail[handle_uuid]

    def release_attach_handle(self, handle, handle_uuid, preparation):
        self.calls.append(('release', handle_uuid, preparation))

    def program(self, controlpath, image_path):
        self.calls.append(('program', controlpath.cpid_info, image_path))
        self.traits = [TRAIT]


class _Conductor:
    def __init__(self, handles=(), timeouts=0):
        self.handles = handles
        self.timeouts = timeouts
        self.outcomes = []

    def prepared_handles(self, context, host):
        if self.timeouts:
            self.timeouts -= 1
            raise messaging.MessagingTimeout('no answer')
        return None if self.handles is None else [
            h.to_wire() for h in self.handles]

    def handles_restored(self, context, host, outcome):
        self.outcomes.append(outcome)


class _Cache:
    @contextlib.contextmanager
    def use(self, image_id, algo, value, fetch):
        yield '/cache/' + image_id


class _Images:
    cache = _Cache()
    glance = None


def _handle(uuid, action='restore', preparation='mdev', **fields):
    info = REGION if preparation == 'program' else INFO
    return restore.PreparedHandle(
        uuid=uuid, action=action, driver='recording',
        device_address='0000:0b:00.0', attach_type='PCI',
        attach_info=info, preparation=preparation,
        arq_uuid=None if action == 'remove' else 'arq-' + uuid, **fields)


def _restorer(driver, conductor, images=_Images):
    return restore_mod.Restorer('host1', conductor, [driver],
                                driver_calls.DriverLocks(),
                                images=images)


def test_a_bound_handle_not_prepared_is_restored():
    driver = _Driver(prepared={'h1': False, 'h2': True})
    conductor = _Conductor([_handle('h1'), _handle('h2'),
                            _handle('h3', preparation='vf')])
    restorer = _restorer(driver, conductor)
    assert restorer.run(None) is True
    # h2 is still prepared; h3's driver cannot tell: prepared again.
    assert [c for c in driver.calls if c[0] == 'restore'] == [
        ('restore', 'h1', device_tree.Preparation.MDEV),
        ('restore', 'h3', device_tree.Preparation.VF)]
    assert conductor.outcomes == [{'restored': ['h1', 'h2', 'h3'],
                                   'failed': {}, 'released': []}]
    assert restorer.done and restorer.signals('recording') == {}


def test_a_handle_that_cannot_be_restored_is_reported_and_signalled(
        caplog):
    driver = _Driver(fail={'h1': errors.PrepareFailed(reason='VF gone')})
    conductor = _Conductor([_handle('h1', preparation='vf')])
    restorer = _restorer(driver, conductor)
    restorer.run(None)
    assert conductor.outcomes == [{'restored': [],
                                   'failed': {'h1': 'VF gone'},
                                   'released': []}]
    assert restorer.signals('recording') == {'0000:0b:00.0': [
        remediation.Signal(restore.RESTORE_FAILED, 'VF gone')]}
    # Given once.
    assert restorer.signals('recording') == {}
    assert ('Could not restore attach handle h1 of ARQ arq-h1 (preparation '
            'vf, driver recording): VF gone') in caplog.text


def test_a_driver_bug_is_a_failure_too():
    driver = _Driver(fail={'h1': KeyError('boom')})
    conductor = _Conductor([_handle('h1')])
    _restorer(driver, conductor).run(None)
    assert conductor.outcomes[0]['failed'] == {
        'h1': "unexpected error: 'boom'"}


def test_a_driver_not_enabled_fails_its_handles():
    conductor = _Conductor([restore.PreparedHandle(
        uuid='h1', action='restore', driver='gone', device_address='x',
        attach_type='PCI', attach_info=INFO, preparation='vf')])
    _restorer(_Driver(), conductor).run(None)
    assert "driver 'gone' is not enabled" in conductor.outcomes[0][
        'failed']['h1']


def test_a_prepared_handle_no_arq_holds_is_released():
    driver = _Driver(prepared={'orphan': True, 'free': False})
    conductor = _Conductor([_handle('orphan', 'remove'),
                            _handle('free', 'remove'),
                            _handle('unknown', 'remove', 'vf'),
                            _handle('binding', 'keep')])
    _restorer(driver, conductor).run(None)
    # Only what the driver says is prepared; a handle a bind job works
    # on is left alone.
    assert [c for c in driver.calls if c[0] in ('release', 'restore')] == [
        ('release', 'orphan', device_tree.Preparation.MDEV)]
    assert conductor.outcomes == [{'restored': [], 'failed': {},
                                   'released': ['orphan']}]


def test_nothing_to_do_sends_nothing():
    conductor = _Conductor([_handle('free', 'remove')])
    restorer = _restorer(_Driver(prepared={'free': False}), conductor)
    assert restorer.run(None) is True
    assert conductor.outcomes == [] and restorer.done


def test_a_region_that_lost_its_bitstream_is_programmed_again():
    driver = _Driver(traits=['CUSTOM_FPGA_FUNCTION_ID_INTEL_FACTORY'])
    conductor = _Conductor([_handle(
        'r1', preparation='program', controlpath=CPID, image=IMAGE,
        function_trait=TRAIT)])
    _restorer(driver, conductor).run(None)
    assert ('program', REGION, '/cache/img-1') in driver.calls
    assert conductor.outcomes[0]['restored'] == ['r1']


def test_a_region_still_running_its_function_is_not_programmed():
    driver = _Driver(traits=[TRAIT])
    conductor = _Conductor([_handle(
        'r1', preparation='program', controlpath=CPID, image=IMAGE,
        function_trait=TRAIT)])
    _restorer(driver, conductor).run(None)
    assert [c for c in driver.calls if c[0] == 'program'] == []


def test_a_region_whose_image_is_unknown_fails_with_the_reason():
    driver = _Driver(traits=[])
    conductor = _Conductor([_handle(
        'r1', preparation='program', function_trait=TRAIT,
        image_error='bitstream b1: image not found')])
    _restorer(driver, conductor).run(None)
    assert conductor.outcomes[0]['failed'] == {'r1': (
        'the region lost its bitstream and cannot be programmed again: '
        'bitstream b1: image not found')}


def test_without_an_image_source_the_region_fails():
    driver = _Driver(traits=[])
    conductor = _Conductor([_handle(
        'r1', preparation='program', controlpath=CPID, image=IMAGE,
        function_trait=TRAIT)])
    _restorer(driver, conductor, images=None).run(None)
    assert 'r1' in conductor.outcomes[0]['failed']


def test_a_silent_conductor_is_asked_again_before_the_report():
    driver = _Driver(prepared={'h1': False})
    conductor = _Conductor([_handle('h1')], timeouts=1)
    restorer = _restorer(driver, conductor)
    assert restorer.run(None) is False and not restorer.done
    assert restorer.run(None) is True and restorer.done
    # Done: not again.
    assert restorer.run(None) is True
    assert len(conductor.outcomes) == 1


def test_a_conductor_that_cannot_serve_the_call_never_blocks_reports(
        caplog):
    conductor = _Conductor([])
    conductor.prepared_handles = _raise(messaging.RemoteError(
        'UnsupportedVersion', 'Endpoint does not support RPC version 1.9'))
    restorer = _restorer(_Driver(), conductor)
    assert restorer.run(None) is True and restorer.done
    assert 'could not say which attach handles of host1' in caplog.text


def test_a_conductor_that_cannot_record_the_outcome_is_logged(caplog):
    conductor = _Conductor([_handle('h1')])
    conductor.handles_restored = _raise(messaging.RemoteError(
        'DBConnectionError', 'down'))
    restorer = _restorer(_Driver(), conductor)
    assert restorer.run(None) is True and restorer.done
    assert 'could not record what the agent of host1' in caplog.text


def _raise(exc):
    def call(*args, **kwargs):
        raise exc
    return call


def test_a_conductor_capped_below_1_9_restores_nothing():
    conductor = _Conductor(None)
    restorer = _restorer(_Driver(), conductor)
    assert restorer.run(None) is True and restorer.done
    assert conductor.outcomes == []


def test_a_malformed_entry_is_ignored(caplog):
    conductor = _Conductor()
    conductor.prepared_handles = lambda context, host: [{'uuid': 'h1'}]
    restorer = _restorer(_Driver(), conductor)
    assert restorer.run(None) is True
    assert 'Ignoring a prepared attach handle' in caplog.text


def test_calls_on_handles_wait_for_the_restore():
    driver = _Driver()
    restorer = _restorer(driver, _Conductor([]))
    agent = manager.AgentManager('host1', None, [driver],
                                 restored=lambda: restorer.wait(5))
    thread = threading.Thread(target=agent.prepare_attach_handle, args=(
        None, 'recording', 'PCI', INFO, 'h9', 'vf'))
    thread.start()
    thread.join(0.2)
    assert thread.is_alive()  # waiting for the restore
    restorer.run(None)
    thread.join(5)
    assert not thread.is_alive()


def test_a_failed_handle_taints_its_device_in_the_next_report():
    """The discovery adds the restore's signal to the driver's: the
    default catalog makes it a sticky NoSchedule taint."""
    driver = _Driver(fail={'h1': errors.PrepareFailed(reason='gone')})
    conductor = _Conductor([restore.PreparedHandle(
        uuid='h1', action='restore', driver='recording',
        device_address='0000:5e:00.0', attach_type='PCI',
        attach_info=REGION, preparation='vf', arq_uuid='a1')])
    restorer = _restorer(driver, conductor)
    restorer.run(None)
    finder = discovery.Discovery('host1', 'host1', [driver], conductor,
                                 extra_signals=restorer.signals)
    for _ in range(5):  # sticky: later reports keep it
        wire, _failed = finder.collect()
        (device,) = wire
        assert [(t['key'], t['effect']) for t in device['taints']] == [
            ('cyborg.restore.failed', 'NoSchedule')]


@pytest.mark.parametrize('state,action', [
    ('Bound', 'restore'), ('BindStarted', 'keep'), ('BindFailing', 'keep'),
    (None, 'remove')])
def test_what_is_done_with_a_handle_follows_its_arq(state, action):
    assert restore.action_for(state) == action
