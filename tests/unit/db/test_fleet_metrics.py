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

"""The fleet metrics of a small fleet, read from each database, and what
a scrape costs (cyborg.db.fleet_metrics through the conductor's
collector)."""

import datetime

from prometheus_client import parser
import pytest

from cyborg.conductor import fleet_metrics
from cyborg.db import fleet_metrics as fleet_db
from cyborg.domain import arq_states as states
from cyborg.domain import bind_errors
from cyborg.domain import partitions
from cyborg.domain import providers
from cyborg.domain import utilization
from tests import factories
from tests.unit.db import statements as sql_statements

NOW = datetime.datetime(2026, 11, 27, 12, 0, 0)


def _ago(seconds: float) -> datetime.datetime:
    return NOW - datetime.timedelta(seconds=seconds)


def _series(collector) -> dict[tuple, float]:
    """{(name, sorted labels): value} of one scrape of ``collector``,
    parsed back from the text exposition format, without the scrape's
    duration (its value is the machine's)."""
    text = collector.exposition()[0].decode()
    found = {}
    for family in parser.text_string_to_metric_families(text):
        for sample in family.samples:
            found[sample.name, tuple(sorted(sample.labels.items()))] = (
                sample.value)
    duration = found.pop(('cyborg_fleet_scrape_duration_seconds', ()))
    assert duration > 0
    return found


def _collector(conf, admin_context, project_label=False):
    conf.set_override('fleet_cache_seconds', 0, group='metrics')
    conf.set_override('project_label', project_label, group='metrics')
    return fleet_metrics.FleetCollector(conf, lambda: admin_context,
                                        utcnow=lambda: NOW)


def _deployable(connection, device, name, total, rc=None, **kw):
    deployable = factories.create_test_deployable(
        connection, device_id=device['id'], name=name,
        num_accelerators=total, **kw)
    if rc is not None:
        factories.create_test_attribute(
            connection, deployable_id=deployable['id'],
            key=providers.RESOURCE_CLASS_KEY, value=rc)
    # The control path of the handles ARQs hold.
    deployable['cpid_id'] = factories.create_test_controlpath_id(
        connection, device_id=device['id'], cpid_info='"%s"' % name)['id']
    return deployable


def _arq(connection, profile, state, project='p1', deployable=None,
         bind_error=None):
    """An ARQ in ``state``, holding a handle of ``deployable`` if
    given."""
    handle = (factories.create_test_attach_handle(
        connection, deployable_id=deployable['id'],
        cpid_id=deployable['cpid_id'], in_use=True)
        if deployable is not None else None)
    return factories.create_test_arq(
        connection, device_profile_id=profile['id'], state=state,
        project_id=project, bind_error=bind_error,
        deployable_id=deployable and deployable['id'],
        attach_handle_id=handle and handle['id'])


def _small_fleet(engine, profile):
    """Two hosts; see the expected series of the test below."""
    gpu_reading = utilization.stored_form(
        {'gpu_percent': 37.5, 'memory_used_mib': 1024,
         'memory_total_mib': 16384}, _ago(20))
    vf_reading = utilization.stored_form(
        {'vfs_total': 8, 'vfs_in_use': 2, 'vfs_host': 1}, _ago(40))
    with engine.begin() as c:
        factories.create_test_service(
            c, host='h1', last_seen_up=_ago(30), sync_requested=3,
            sync_done=3)
        factories.create_test_service(
            c, host='h2', last_seen_up=_ago(300), sync_requested=2,
            sync_done=1)
        factories.create_test_service(c, host='h3')  # never seen up
        factories.create_test_service(
            c, host='c1', binary='cyborg-conductor', last_seen_up=_ago(999),
            sync_requested=5)
        gpu = factories.create_test_device(
            c, hostname='h1', address='0000:3b:00.0', type='GPU',
            vendor='0x10de', model='T4', driver='nvidia_gpu',
            utilization=gpu_reading, partitions=partitions.stored_form(
                partitions.state('homogeneous', '1g.18gb', False, 2, 5)))
        fpga1 = factories.create_test_device(
            c, hostname='h1', address='0000:5e:00.0', vendor='0x8086',
            model='N3000', driver='intel_fpga', health='unhealthy',
            utilization=vf_reading)
        fpga2 = factories.create_test_device(
            c, hostname='h2', address='0000:5e:00.0', vendor='0x8086',
            model='N3000', driver='intel_fpga')
        fpga3 = factories.create_test_device(
            c, hostname='h2', address='0000:af:00.0', vendor='0x8086',
            model='N3000', driver='intel_fpga', status='maintaining',
            utilization='not json')
        factories.create_test_device(
            c, hostname='h2', address='0000:d8:00.0', vendor='0x8086',
            model='N3000', driver='intel_fpga', status='maintaining')
        dep_gpu = _deployable(c, gpu, 'gpu0', 1, 'PGPU')
        dep1 = _deployable(c, fpga1, 'region0', 4, 'CUSTOM_FPGA')
        dep2 = _deployable(c, fpga2, 'region0', 4, 'CUSTOM_FPGA')
        _deployable(c, fpga3, 'region0', 2)  # no resource class
        _deployable(c, fpga2, 'region1', 2, 'CUSTOM_FPGA', retained=True)
        _arq(c, profile, states.BOUND, 'p1', dep_gpu)
        _arq(c, profile, states.BOUND, 'p2', dep1)
        _arq(c, profile, states.BIND_STARTED, 'p1', dep1)
        _arq(c, profile, states.BOUND, 'p1', dep2)
        _arq(c, profile, states.BIND_FAILING, 'p1', bind_error=(
            bind_errors.programming_failed('h', 'the image is gone')))
        _arq(c, profile, states.BIND_FAILED, 'p2',
             bind_error=bind_errors.timed_out(300))
        _arq(c, profile, states.BIND_FAILED, 'p2',
             bind_error='ProgramFailed: the region is busy')
        _arq(c, profile, states.INITIAL)
        _arq(c, profile, states.UNBOUND, bind_error='an old failure')
        factories.create_test_nova_event(c, created_at=_ago(50))
        # A failed bind's event repeated until Nova acts: not late.
        factories.create_test_nova_event(
            c, created_at=_ago(500), attempts=2, status='failed',
            repeat_until=NOW)
        factories.create_test_nova_event(c, created_at=_ago(1000),
                                         sent_at=_ago(900))


def _expected(project_label: bool) -> dict[tuple, float]:
    def key(name, **labels):
        return name, tuple(sorted(labels.items()))

    def accelerators(host, rc, total, allocated, free):
        return {key('cyborg_accelerators', host=host, resource_class=rc,
                    state=state): value
                for state, value in (('total', total),
                                     ('allocated', allocated),
                                     ('free', free))}

    fpga = dict(driver='intel_fpga', vendor='0x8086', model='N3000',
                type='FPGA')
    expected = {
        key('cyborg_devices', host='h1', driver='nvidia_gpu',
            vendor='0x10de', model='T4', type='GPU', health='healthy',
            status='enabled'): 1,
        key('cyborg_devices', host='h1', health='unhealthy',
            status='enabled', **fpga): 1,
        key('cyborg_devices', host='h2', health='healthy',
            status='enabled', **fpga): 1,
        key('cyborg_devices', host='h2', health='healthy',
            status='maintaining', **fpga): 2,
        **accelerators('h1', 'PGPU', 1, 1, 0),
        # Unhealthy: none free.
        **accelerators('h1', 'CUSTOM_FPGA', 4, 2, 0),
        # region0 (4, 1 allocated, 3 free) and region1, retained (gone
        # from the reports: 2, none free).
        **accelerators('h2', 'CUSTOM_FPGA', 6, 1, 3),
        # Maintaining: none free.
        **accelerators('h2', '', 2, 0, 0),
        **{key('cyborg_arqs', state=state): count for state, count in (
            ('Initial', 1), ('BindStarted', 1), ('Bound', 3),
            ('BindFailing', 1), ('BindFailed', 2), ('Unbound', 1),
            ('Deleting', 0))},
        key('cyborg_arq_bind_failures', state='BindFailing',
            reason='ProgramFailed'): 1,
        key('cyborg_arq_bind_failures', state='BindFailed',
            reason='BindTimeout'): 1,
        key('cyborg_arq_bind_failures', state='BindFailed',
            reason='ProgramFailed'): 1,
        key('cyborg_bound_arqs', resource_class='PGPU'): 1,
        key('cyborg_bound_arqs', resource_class='CUSTOM_FPGA'): 2,
        key('cyborg_bound_arqs', resource_class=''): 0,
        key('cyborg_device_utilization_ratio', host='h1',
            device='0000:3b:00.0', metric='gpu'): 0.375,
        key('cyborg_device_memory_bytes', host='h1', device='0000:3b:00.0',
            kind='used'): 1024 * 2 ** 20,
        key('cyborg_device_memory_bytes', host='h1', device='0000:3b:00.0',
            kind='total'): 16384 * 2 ** 20,
        key('cyborg_device_vfs', host='h1', device='0000:5e:00.0',
            kind='total'): 8,
        key('cyborg_device_vfs', host='h1', device='0000:5e:00.0',
            kind='in_use'): 2,
        key('cyborg_device_vfs', host='h1', device='0000:5e:00.0',
            kind='host'): 1,
        key('cyborg_device_utilization_age_seconds', host='h1',
            device='0000:3b:00.0'): 20,
        key('cyborg_device_partitions', host='h1', device='0000:3b:00.0',
            profile='1g.18gb', kind='in_use'): 2,
        key('cyborg_device_partitions', host='h1', device='0000:3b:00.0',
            profile='1g.18gb', kind='creatable'): 5,
        key('cyborg_device_utilization_age_seconds', host='h1',
            device='0000:5e:00.0'): 40,
        key('cyborg_agent_last_report_age_seconds', host='h1'): 30,
        key('cyborg_agent_last_report_age_seconds', host='h2'): 300,
        key('cyborg_nova_event_outbox_depth'): 2,
        key('cyborg_nova_event_outbox_oldest_age_seconds'): 50,
        key('cyborg_placement_sync_pending_hosts'): 1,
    }
    if project_label:
        expected.update({
            key('cyborg_bound_arqs_by_project', project='p1',
                resource_class='PGPU'): 1,
            key('cyborg_bound_arqs_by_project', project='p1',
                resource_class='CUSTOM_FPGA'): 1,
            key('cyborg_bound_arqs_by_project', project='p2',
                resource_class='CUSTOM_FPGA'): 1,
        })
    return expected


@pytest.mark.parametrize('project_label', [False, True])
def test_every_series_of_a_small_fleet(database, conf, admin_context,
                                       project_label):
    _small_fleet(database, factories.create_test_device_profile())
    collector = _collector(conf, admin_context, project_label)
    assert _series(collector) == _expected(project_label)


@pytest.mark.parametrize('project_label', [False, True])
def test_the_rows_read_are_plain_tuples(database, admin_context,
                                        project_label):
    """The conductor unpacks and looks up thousands of them a scrape."""
    _small_fleet(database, factories.create_test_device_profile())
    snapshot = fleet_db.fleet_snapshot(admin_context, by_project=project_label)
    read = [snapshot.devices, snapshot.deployables, snapshot.arqs,
            snapshot.utilization, snapshot.agents]
    if project_label:
        read.append(snapshot.bound)
    assert all(read)
    assert {type(row) for rows in read for row in rows} == {tuple}


def test_an_empty_database(database, conf, admin_context):
    series = _series(_collector(conf, admin_context))
    assert series == {
        **{('cyborg_arqs', (('state', state),)): 0 for state in states.ALL},
        ('cyborg_nova_event_outbox_depth', ()): 0,
        ('cyborg_nova_event_outbox_oldest_age_seconds', ()): 0,
        ('cyborg_placement_sync_pending_hosts', ()): 0,
    }




def _fleet_of(engine, profile, first: int, hosts: int) -> None:
    """``hosts`` more hosts, numbered from ``first``: each an agent with
    a pending sync, two devices with a reading, a deployable each, a
    Bound and a failed ARQ in a project of its own, an unsent event."""
    reading = utilization.stored_form({'gpu_percent': 50}, _ago(5))
    with engine.begin() as c:
        for number in range(first, first + hosts):
            host = 'host-%d' % number
            factories.create_test_service(c, host=host, last_seen_up=NOW,
                                          sync_requested=1)
            for address in ('0000:3b:00.0', '0000:5e:00.0'):
                device = factories.create_test_device(
                    c, hostname=host, address=address, utilization=reading)
                deployable = _deployable(c, device, 'd', 2, 'CUSTOM_%d'
                                         % number)
            _arq(c, profile, states.BOUND, 'p%d' % number, deployable)
            _arq(c, profile, states.BIND_FAILED, 'p%d' % number,
                 bind_error='Error%d: failed' % number)
            factories.create_test_nova_event(c, created_at=_ago(number))


def _statements_per_scrape(database, collector) -> int:
    with sql_statements.StatementCounter(database) as statements:
        assert _series(collector)
    return statements.count


@pytest.mark.parametrize('project_label', [False, True])
def test_a_scrape_costs_the_same_statements_for_2_and_20_hosts(
        database, conf, admin_context, project_label):
    profile = factories.create_test_device_profile()
    collector = _collector(conf, admin_context, project_label)
    _fleet_of(database, profile, 0, 2)
    two = _statements_per_scrape(database, collector)
    _fleet_of(database, profile, 2, 18)
    series = _series(collector)
    assert len([key for key in series
                if key[0] == 'cyborg_agent_last_report_age_seconds']) == 20
    assert series['cyborg_placement_sync_pending_hosts', ()] == 20
    twenty = _statements_per_scrape(database, collector)
    assert twenty == two
    assert two == fleet_db.statements(project_label)
