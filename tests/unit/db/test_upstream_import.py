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

"""Importing an upstream OpenStack Cyborg database
(``cyborg-manage upstream-import``).

The sources are made by upstream 17.0.0's own migrations
(``.venv-upstream``'s ``cyborg-dbsync``; the tests fail, saying how to
make it, when it is missing), once per server and session, then filled
with :mod:`tests.unit.db.upstream_data`; every import runs from a
PostgreSQL and a MariaDB source into a SQLite, PostgreSQL and MariaDB
target.
"""

import json
import os
import subprocess
import sys

import pytest
import sqlalchemy as sa

from cyborg.db import migration
from cyborg.db import models
from cyborg.db import upstream_import
from cyborg.domain import arq_states
from cyborg.domain import devices as device_rules
from cyborg.domain import upstream
from tests.functional import servers
from tests.functional import upstream_db
from tests.unit import conftest
from tests.unit.db import upstream_data
from tests.unit.db.upstream_data import u

SOURCE_KINDS = tuple(kind for kind in conftest.DATABASES
                     if kind != 'sqlite') or ('postgresql',)
DATASETS = {'good': upstream_data.good, 'bad': upstream_data.bad}
HEAD = 'b47c8f2d1e3a'


@pytest.fixture(scope='session')
def _upstream_databases():
    return {}


def _source_url(request, kind: str, dataset: str) -> str:
    """The URL of an upstream database of ``kind`` holding ``dataset``
    (made once per session)."""
    made = request.getfixturevalue('_upstream_databases')
    if (kind, dataset) not in made:
        server = request.getfixturevalue(kind + '_server')
        if (kind, None) not in made:
            try:
                upstream_db.dbsync()
            except upstream_db.UpstreamMissing as e:
                pytest.fail(str(e))
            made[(kind, None)] = server.create_database('upstream_schema')
            upstream_db.migrate(made[(kind, None)])
        url = upstream_db.clone(server, 'upstream_schema',
                                'upstream_' + dataset)
        upstream_db.insert(url, DATASETS[dataset]())
        made[(kind, dataset)] = url
    return made[(kind, dataset)]


@pytest.fixture(params=SOURCE_KINDS)
def source(request):
    """An upstream database of good rows (on PostgreSQL and MariaDB)."""
    return _source_url(request, request.param, 'good')


@pytest.fixture(params=SOURCE_KINDS)
def bad_source(request):
    return _source_url(request, request.param, 'bad')


def _rows(engine, table, key='uuid') -> dict:
    with engine.connect() as connection:
        return {row._mapping[key]: row._mapping for row in
                connection.execute(sa.select(table))}


def _counts(engine) -> dict[str, int]:
    with engine.connect() as connection:
        return {table.name: connection.execute(
            sa.select(sa.func.count()).select_from(table)).scalar_one()
            for table in models.Base.metadata.sorted_tables}


def _ids_to_uuids(engine, table) -> dict[int, str]:
    with engine.connect() as connection:
        return dict(connection.execute(
            sa.select(table.c.id, table.c.uuid)).all())


# The import ------------------------------------------------------------------

def test_imported_devices_are_assumed_healthy_since_the_import(
        source, database):
    upstream_import.import_database(source, database)
    with database.connect() as connection:
        started_at = connection.execute(sa.select(
            models.UPSTREAM_IMPORTS.c.started_at)).scalar_one()
    stamps = {(d.health, d.health_reason, d.health_since)
              for d in _rows(database, models.DEVICES).values()}
    assert stamps == {('healthy', device_rules.REASON_IMPORTED, started_at)}


def test_import_keeps_every_identity(source, database):
    before = upstream_db.dump(source)
    report = upstream_import.import_database(source, database)
    assert report.revision == HEAD and report.problems == []
    expected = upstream_data.good()

    profiles = _rows(database, models.PROFILES)
    assert {uuid: (p.name, json.loads(p.profile_json), p.description)
            for uuid, p in profiles.items()} == {
        p['uuid']: (p['name'], json.loads(p['profile_json']),
                    p['description'])
        for p in expected['device_profiles']}

    devices = _rows(database, models.DEVICES)
    assert {uuid: (d.type, d.vendor, d.model, d.hostname, d.address,
                   d.status, d.std_board_info, d.vendor_board_info,
                   d.driver, d.health, d.missing)
            for uuid, d in devices.items()} == {
        u(11): ('FPGA', '8086', 'PAC', 'host-a', '0000:5e:00.0', 'enabled',
                '{"class": "Fake"}', 'fake_vendor_info', None, 'healthy',
                False),
        u(12): ('GPU', '10de', 'T4', 'host-b', '0000:af:00.0',
                'maintaining', None, None, None, 'healthy', False),
        u(13): ('FPGA', '8086', 'N3000', 'host-a', '0000:d8:00.0',
                'enabled', None, None, None, 'healthy', False)}
    device_uuids = _ids_to_uuids(database, models.DEVICES)

    cpids = _rows(database, models.CPIDS)
    assert {uuid: (device_uuids[c.device_id], c.cpid_type,
                   json.loads(c.cpid_info))
            for uuid, c in cpids.items()} == {
        c['uuid']: (u(10 + c['device_id']), 'PCI', json.loads(c['cpid_info']))
        for c in expected['controlpath_ids']}
    # Our canonical text: sorted keys, no spaces.
    assert cpids[u(21)].cpid_info == (
        '{"bus":"5e","device":"00","domain":"0000","function":"0"}')

    deployables = _rows(database, models.DEPLOYABLES)
    assert {uuid: (device_uuids[d.device_id], d.name, d.num_accelerators,
                   d.rp_uuid, d.driver_name, d.bitstream_id, d.parent_id,
                   d.root_id, d.preparation, d.retained)
            for uuid, d in deployables.items()} == {
        d['uuid']: (u(10 + d['device_id']), d['name'],
                    d['num_accelerators'], d['rp_uuid'], d['driver_name'],
                    d['bitstream_id'], None, None, 'none', False)
        for d in expected['deployables']}
    deployable_uuids = _ids_to_uuids(database, models.DEPLOYABLES)

    # trait0 twice: the newer row kept.
    assert {uuid: (deployable_uuids[a.deployable_id], a.key, a.value)
            for uuid, a in _rows(database, models.ATTRIBUTES).items()} == {
        u(41): (u(31), 'rc', 'FPGA'),
        u(43): (u(31), 'trait0', 'CUSTOM_FPGA_INTEL_PAC'),
        u(44): (u(32), 'rc', 'PGPU'), u(45): (u(33), 'rc', 'FPGA')}

    cpid_uuids = _ids_to_uuids(database, models.CPIDS)
    handles = _rows(database, models.HANDLES)
    source_handles = {h['uuid']: h for h in expected['attach_handles']}
    assert {uuid: (deployable_uuids[h.deployable_id], cpid_uuids[h.cpid_id],
                   h.attach_type, json.loads(h.attach_info))
            for uuid, h in handles.items()} == {
        uuid: (u(30 + h['deployable_id']),
               u({1: 21, 2: 22, 4: 24}[h['cpid_id']]), h['attach_type'],
               json.loads(h['attach_info']))
        for uuid, h in source_handles.items()}
    # In use exactly when a Bound ARQ holds the handle: 51 (ARQ 3), 55
    # (ARQ 4), 57 (ARQ 7, was not marked); the mid-bind's 52, the
    # Unbound ARQ's 53 and the leaked 54 are free.
    assert {uuid for uuid, h in handles.items() if h.in_use} == {
        u(51), u(55), u(57)}

    handle_uuids = _ids_to_uuids(database, models.HANDLES)
    profile_uuids = _ids_to_uuids(database, models.PROFILES)
    arqs = _rows(database, models.ARQS)
    got = {uuid: dict(state=a.state, project=a.project_id,
                      profile=profile_uuids[a.device_profile_id],
                      group=a.device_profile_group_id, host=a.hostname,
                      rp=a.device_rp_uuid, instance=a.instance_uuid,
                      handle=handle_uuids.get(a.attach_handle_id),
                      deployable=deployable_uuids.get(a.deployable_id),
                      error=a.bind_error, owner=a.bind_owner)
           for uuid, a in arqs.items()}
    want = {}
    for a in expected['extended_accelerator_requests']:
        want[a['uuid']] = dict(
            state=upstream.STATE_MAP[a['state']], project=a['project_id'],
            profile=u(a['device_profile_id']),
            group=a['device_profile_group_id'], host=a['hostname'],
            rp=a['device_rp_uuid'], instance=a['instance_uuid'],
            handle=(u(50 + a['attach_handle_id'])
                    if a['attach_handle_id'] else None),
            deployable=(u(30 + a['deployable_id'])
                        if a['deployable_id'] else None),
            error=None, owner=None)
    # Mid-bind: failed as a bind timeout fails it.
    for number in (62, 69):
        want[u(number)].update(handle=None, deployable=None,
                               error=upstream.INTERRUPTED_BIND_ERROR)
    want[u(66)].update(handle=None)  # Unbound holds no handle
    assert got == want
    assert got[u(62)]['state'] == arq_states.BIND_FAILED
    # Each keeps the group of its profile it was made from.
    profile_groups = {p['id']: json.loads(p['profile_json'])['groups']
                      for p in expected['device_profiles']}
    assert {uuid: json.loads(a.group_json) for uuid, a in arqs.items()} == {
        a['uuid']: profile_groups[a['device_profile_id']][
            a['device_profile_group_id']]
        for a in expected['extended_accelerator_requests']}

    with database.connect() as connection:
        events = connection.execute(sa.select(
            models.EVENTS.c.arq_uuid, models.EVENTS.c.instance_uuid,
            models.EVENTS.c.status, models.EVENTS.c.sent_at)).all()
        services = connection.execute(sa.select(
            models.SERVICES.c.host, models.SERVICES.c.binary,
            models.SERVICES.c.report_hash, models.SERVICES.c.rp_name,
            models.SERVICES.c.compute_rp_uuid)).all()
        providers = connection.execute(sa.select(
            models.PROVIDERS.c.uuid, models.PROVIDERS.c.host,
            models.PROVIDERS.c.name, models.PROVIDERS.c.parent_uuid,
            models.PROVIDERS.c.generation, models.PROVIDERS.c.adopted)).all()
        imports = connection.execute(sa.select(
            models.UPSTREAM_IMPORTS)).all()
    assert events == [(u(62), u(71), 'failed', None)]
    assert sorted(services) == [
        ('host-a', 'cyborg-agent', None, 'host-a', None),
        ('host-b', 'cyborg-agent', None, 'host-b', None)]
    assert sorted(providers) == sorted([
        (upstream_data.rp('host-a_5e'), 'host-a', 'host-a_5e', '', None,
         True),
        (upstream_data.rp('host-b_af'), 'host-b', 'host-b_af', '', None,
         True),
        (upstream_data.rp('host-a_d8'), 'host-a', 'host-a_d8', '', None,
         True)])
    assert len(imports) == 1
    assert imports[0].source_revision == HEAD
    assert imports[0].finished_at >= imports[0].started_at
    counts = json.loads(imports[0].counts)
    assert counts['source_rows']['quota_usages'] == 2
    assert counts['imported_rows']['extended_accelerator_requests'] == 9
    assert counts['arq_states']['BindStarted'] == {'BindFailed': 2}

    # The source was only read.
    assert upstream_db.dump(source) == before

    # A second import is refused, saying when and from what.
    with pytest.raises(upstream_import.Refused,
                       match='imported into already, from upstream '
                             'revision %s \\(started 20' % HEAD):
        upstream_import.import_database(source, database)


def test_dry_run_reports_and_writes_nothing(source, database):
    empty = _counts(database)
    report = upstream_import.import_database(source, database,
                                             dry_run=True)
    assert _counts(database) == empty
    lines = report.lines()
    text = '\n'.join(lines)
    assert lines[0].startswith('Source: ')
    assert ('alembic revision %s (openstack-cyborg 17.0.0, adds '
            'devices.device_state)' % HEAD) in lines[0]
    for table, read, imported in [
            ('device_profiles', 2, '2'), ('devices', 3, '3'),
            ('controlpath_ids', 4, '4'), ('deployables', 4, '4'),
            ('attributes', 5, '4'), ('attach_handles', 8, '8'),
            ('extended_accelerator_requests', 9, '9'),
            ('quota_usages', 2,
             'skipped (upstream never uses its quota tables)'),
            ('reservations', 1,
             'skipped (upstream never uses its quota tables)')]:
        assert '  %-30s %7d -> %s' % (table, read, imported) in lines
    for table, number in [('services', 2), ('placement_providers', 3),
                          ('nova_events', 1)]:
        assert '  %-30s %7d' % (table, number) in lines
    for source_state, ours, number in [
            ('Initial', 'Initial', 1), ('BindStarted', 'BindFailed', 2),
            ('Bound', 'Bound', 3), ('BindFailed', 'BindFailed', 1),
            ('Unbound', 'Unbound', 1), ('Deleting', 'Deleting', 1)]:
        assert '  %-12s -> %-12s %7d' % (source_state, ours,
                                         number) in lines
    assert 'Hosts: 2' in lines
    assert '  host-a: 2 device(s)' in lines
    assert '  host-b: 1 device(s)' in lines
    assert ("  deployable %s: attribute 'trait0' is set 2 times; the newest "
            "(%s, 'CUSTOM_FPGA_INTEL_PAC') is kept" % (u(31), u(43))
            in lines)
    assert ('  accelerator request %s (Unbound) held attach handle %s; '
            'imported without it' % (u(66), u(53))) in lines
    assert ('  attach handle %s: in_use True upstream, False here (held by '
            'no bound accelerator request)' % u(54)) in lines
    assert ('  attach handle %s: in_use False upstream, True here (held by '
            'accelerator request %s)' % (u(57), u(67))) in lines
    assert 'Cannot import: 0' in lines
    assert 'password' not in text


def test_rows_that_cannot_be_imported_are_listed_and_nothing_written(
        bad_source, database):
    empty = _counts(database)
    with pytest.raises(upstream_import.ImportRefused) as caught:
        upstream_import.import_database(bad_source, database)
    assert _counts(database) == empty
    problems = caught.value.report.problems
    assert problems == upstream_import.import_database(
        bad_source, database, dry_run=True).problems
    assert _counts(database) == empty
    assert sorted(problems) == sorted([
        "device profile %s: profile_json has no list of groups: "
        "'{\"group\": []}'" % u(3),
        "control path id %s: cpid_info is not JSON (Extra data: line 1 "
        "column 2 (char 1)): '0000:3b:00.0'" % u(25),
        'device %s: the device has no PCI control path id to take its '
        'address from' % u(14),
        'devices %s, %s: have the same host and PCI address: host-a '
        '0000:5e:00.0' % (u(11), u(15)),
        'accelerator requests %s, %s: hold the same attach handle: %s'
        % (u(63), u(70), u(51)),
        "attach handle %s: attach_info is not JSON (Expecting ':' delimiter: "
        "line 1 column 25 (char 24)): '{\"domain\": \"0000\", \"bus\"'"
        % u(59)])
    assert 'Cannot import: 6' in caught.value.report.lines()


@pytest.mark.parametrize('database', ['sqlite'], indirect=True)
@pytest.mark.parametrize('table', ['attach_handles', 'derived'])
def test_failure_part_way_leaves_the_target_as_it_was(
        source, database, table):
    empty = _counts(database)

    def fail(written):
        if written == table:
            raise RuntimeError('injected failure after %s' % written)
    with pytest.raises(RuntimeError, match='injected failure'):
        upstream_import.import_database(source, database, step=fail)
    assert _counts(database) == empty
    # Nothing recorded: the import can run again.
    report = upstream_import.import_database(source, database)
    assert _counts(database)['extended_accelerator_requests'] == 9
    assert report.problems == []


@pytest.mark.parametrize('database', ['sqlite'], indirect=True)
def test_an_older_known_revision_is_imported(request, database):
    """6c77bd6afea5, the oldest revision known (no devices.device_state),
    made by upstream's migrations on the first source server."""
    kind = SOURCE_KINDS[0]
    server = request.getfixturevalue(kind + '_server')
    url = server.create_database('upstream_6c77bd6afea5')
    try:
        upstream_db.dbsync()
    except upstream_db.UpstreamMissing as e:
        pytest.fail(str(e))
    upstream_db.migrate(url, '6c77bd6afea5')
    upstream_db.insert(url, upstream_data.good())
    report = upstream_import.import_database(url, database)
    assert report.revision == '6c77bd6afea5'
    assert report.problems == []
    assert _counts(database)['devices'] == 3


@pytest.mark.parametrize('database', ['sqlite'], indirect=True)
def test_unknown_revisions_are_refused_by_name(database, tmp_path):
    url = 'sqlite:///%s' % (tmp_path / 'upstream.sqlite')
    engine = sa.create_engine(url)
    with engine.begin() as connection:
        connection.execute(sa.text('CREATE TABLE devices (id INTEGER)'))
    with pytest.raises(upstream_import.Refused,
                       match='no alembic revision: it is not an upstream'):
        upstream_import.import_database(url, database)
    with engine.begin() as connection:
        connection.execute(sa.text(
            'CREATE TABLE alembic_version (version_num VARCHAR(32))'))
        connection.execute(sa.text(
            "INSERT INTO alembic_version VALUES ('0123456789ab')"))
    engine.dispose()
    with pytest.raises(upstream_import.Refused,
                       match='at alembic revision 0123456789ab, which this '
                             'import does not know \\(it knows '
                             'b47c8f2d1e3a: openstack-cyborg 17.0.0'):
        upstream_import.import_database(url, database)


def test_target_with_devices_or_arqs_or_colliding_rows_is_refused(
        source, database):
    now = upstream_data.OLD
    with database.begin() as connection:
        connection.execute(models.PROFILES.insert().values(
            uuid=u(500), name='gpu-profile', profile_json='{"groups": []}',
            created_at=now))
    with pytest.raises(upstream_import.ImportRefused) as caught:
        upstream_import.import_database(source, database)
    assert caught.value.report.problems == [
        'device_profiles name gpu-profile exists in the target already']
    with database.begin() as connection:
        connection.execute(models.DEVICES.insert().values(
            uuid=u(501), type='GPU', vendor='10de', model='T4',
            hostname='h', address='0000:01:00.0', created_at=now))
    with pytest.raises(upstream_import.Refused,
                       match='the target database has 1 devices: import '
                             'into a database that has none'):
        upstream_import.import_database(source, database)
    assert _counts(database)['devices'] == 1


@pytest.mark.parametrize('database', ['sqlite'], indirect=True)
def test_target_not_at_our_head_is_refused(source, database):
    migration.stamp('0005_device_utilization', engine=database)
    with pytest.raises(upstream_import.Refused,
                       match='the target database is at revision '
                             '0005_device_utilization, not %s: run '
                             'cyborg-dbsync upgrade first'
                       % migration.head()):
        upstream_import.import_database(source, database)


def test_the_source_is_opened_read_only(source):
    engine = upstream_import.source_engine(source)
    try:
        with engine.connect() as connection:
            with pytest.raises(sa.exc.DBAPIError,
                               match='(?i)read.only'):
                connection.execute(sa.text(
                    "UPDATE devices SET model = 'x'"))
    finally:
        engine.dispose()


# The command -------------------------------------------------------------

def _manage(database_url: str, tmp_path, *args: str
            ) -> subprocess.CompletedProcess:
    config = tmp_path / 'cyborg.conf'
    config.write_text('[database]\nconnection = %s\n' % database_url)
    return servers.run(
        [sys.executable, '-m', 'cyborg.cmd.manage', '--config-file',
         str(config), 'upstream-import'] + list(args),
        env=dict(os.environ, PYTHONWARNINGS='ignore'))


@pytest.mark.parametrize('database', ['sqlite'], indirect=True)
def test_command_never_prints_the_password(source, database, tmp_path):
    url = sa.engine.make_url(source)
    if url.get_backend_name() == 'postgresql':
        # Trust authentication: the password is sent and ignored.
        with_password = url.set(password='s3cr3t-pw')
        result = _manage(str(database.url), tmp_path, '--dry-run',
                         '--source', with_password.render_as_string(
                             hide_password=False))
        assert result.returncode == 0, result.stderr
        assert 'Dry run: nothing was written.' in result.stdout
        assert ':***@' in result.stdout
    else:
        # A password root does not have: refused, in one line.
        result = _manage(str(database.url), tmp_path, '--source',
                         url.set(password='s3cr3t-pw').render_as_string(
                             hide_password=False))
        assert result.returncode == 1
        assert result.stderr.startswith('cyborg-manage: ')
        assert 'cannot read the source' in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
    assert 's3cr3t-pw' not in result.stdout + result.stderr
    bad = _manage(str(database.url), tmp_path, '--source',
                  'not a url with s3cr3t-pw')
    assert bad.returncode == 1
    assert bad.stderr.strip() == (
        'cyborg-manage: the source is not a SQLAlchemy database URL '
        '(e.g. mysql+pymysql://USER:PASSWORD@HOST/cyborg)')


@pytest.mark.parametrize('database', ['sqlite'], indirect=True)
def test_command_imports_then_refuses_a_second_run(source, database,
                                                   tmp_path):
    first = _manage(str(database.url), tmp_path, '--source', source)
    assert first.returncode == 0, first.stderr
    assert ('Imported revision %s from ' % HEAD) in first.stdout
    assert 'extended_accelerator_requests 9' in first.stdout
    second = _manage(str(database.url), tmp_path, '--source', source)
    assert second.returncode == 1
    assert 'imported into already' in second.stderr
    assert len(second.stderr.strip().splitlines()) == 1
