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

"""The DB API on MariaDB through mysqlclient (``mysql+mysqldb://``), the
C driver the durable databases guide recommends over PyMySQL: the same
isolation level, the same translated errors (a duplicate, a lock wait
retried)."""

from oslo_db import exception as db_exc
import pytest
import sqlalchemy as sa

from cyborg.common import exception
from cyborg.db import api as db_api
from cyborg.db import device_profiles as profiles_db
from cyborg.db import models
from tests.unit import conftest

GROUPS = [{'resources:FPGA': '1'}]


@pytest.fixture
def mysqlclient(request, conf, tmp_path):
    """The DB API configured for the session's MariaDB database (emptied)
    through mysqlclient; the engine."""
    url = conftest.database_url('mariadb', request, tmp_path)
    conf.set_override('connection',
                      url.replace('mysql+pymysql://', 'mysql+mysqldb://'),
                      group='database')
    db_api.configure(conf)
    yield db_api.get_engine()
    db_api.get_engine().dispose()


def test_connections_are_mysqlclient_at_read_committed(mysqlclient):
    assert mysqlclient.dialect.driver == 'mysqldb'
    with mysqlclient.connect() as connection:
        assert connection.get_isolation_level() == db_api.MYSQL_ISOLATION


def test_duplicates_conflict(mysqlclient, admin_context):
    first = profiles_db.device_profile_create(
        admin_context, {'name': 'dp1', 'groups': GROUPS})
    with pytest.raises(exception.DuplicateDeviceProfileName):
        profiles_db.device_profile_create(
            admin_context, {'name': 'dp1', 'groups': GROUPS})
    assert profiles_db.device_profile_get(admin_context,
                                          name='dp1') == first


def test_a_lock_wait_timeout_is_transient(mysqlclient, admin_context):
    """What the writers retry (:func:`db_api.is_transient`) is recognised
    in mysqlclient's errors as in PyMySQL's."""
    profile = profiles_db.device_profile_create(
        admin_context, {'name': 'dp1', 'groups': GROUPS})
    update = (sa.update(models.DeviceProfile)
              .where(models.DeviceProfile.id == profile['id'])
              .values(description='x'))
    with mysqlclient.connect() as holding, holding.begin():
        holding.execute(update)
        with mysqlclient.connect() as waiting, waiting.begin():
            waiting.execute(sa.text(
                'SET SESSION innodb_lock_wait_timeout = 1'))
            with pytest.raises(db_exc.DBDeadlock) as error:
                waiting.execute(update)
    assert db_api.is_transient(error.value)
