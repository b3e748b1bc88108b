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

"""The configuration checks every command runs before it starts."""

import pytest

from cyborg.common import config
from cyborg.common import config_checks
from cyborg.db import urls


def _parse(conf, tmp_path, text):
    path = tmp_path / 'cyborg.conf'
    path.write_text(text)
    conf(['--config-file', str(path)], project='cyborg',
         default_config_files=[])
    return str(path)


def test_a_bad_value_is_one_line_naming_option_value_and_file(conf,
                                                              tmp_path):
    path = _parse(conf, tmp_path, '[api]\nmax_arqs_per_project = notanint\n'
                                  'port = 99999\n')
    problems = config_checks.option_problems(conf)
    assert problems == [
        "[api] max_arqs_per_project is not valid: invalid literal for "
        "int() with base 10: 'notanint' (in %s)" % path,
        '[api] port is not valid: Should be less than or equal to 65535 '
        '(in %s)' % path,
    ]


def test_valid_options_are_no_problem(conf):
    assert config_checks.option_problems(conf) == []


def test_a_missing_config_file_is_one_line_naming_it(conf, tmp_path):
    conf.clear()
    missing = tmp_path / 'nope.conf'
    with pytest.raises(config_checks.ConfigProblems) as error:
        config.parse_args(['cyborg-api', '--config-file', str(missing)])
    assert error.value.problems == [
        'cannot read the config file %s: no such file, or not readable '
        '(--config-file)' % missing]


def test_an_unparsable_config_file_is_one_line(conf, tmp_path):
    conf.clear()
    path = tmp_path / 'bad.conf'
    path.write_text('no section header\n')
    with pytest.raises(config_checks.ConfigProblems) as error:
        config.parse_args(['cyborg-api', '--config-file', str(path)])
    [problem] = error.value.problems
    assert str(path) in problem


def test_a_database_in_a_missing_directory_names_its_path(conf, tmp_path):
    path = tmp_path / 'gone' / 'cyborg.sqlite'
    conf.set_override('connection', 'sqlite:///%s' % path, group='database')
    [problem] = config_checks.database_problems(conf, must_exist=False)
    assert problem.startswith('cannot open the database %s: directory %s '
                              'does not exist' % (path, path.parent))
    assert '[database] connection' in problem


def test_a_missing_database_file_is_a_problem_only_for_readers(conf,
                                                               tmp_path):
    path = tmp_path / 'cyborg.sqlite'
    conf.set_override('connection', 'sqlite:///%s' % path, group='database')
    assert config_checks.database_problems(conf, must_exist=False) == []
    [problem] = config_checks.database_problems(
        conf, must_exist=True, hint=config_checks.STATE_DIR_HINT)
    assert 'cannot open the database %s: no such file' % path in problem
    assert 'cyborg-dbsync upgrade' in problem and '--state-dir' in problem
    path.write_bytes(b'')
    assert config_checks.database_problems(conf, must_exist=True) == []


@pytest.mark.parametrize('url', ['postgresql+psycopg2://u:p@db/cyborg',
                                 'mysql+pymysql://u:p@db/cyborg',
                                 'sqlite://'])
def test_servers_and_memory_databases_are_not_opened(conf, url):
    # A database server that is down is retried by the services.
    conf.set_override('connection', url, group='database')
    assert config_checks.database_problems(conf, must_exist=True) == []


def test_a_connection_that_is_no_url_is_a_problem(conf):
    conf.set_override('connection', 'not a url', group='database')
    [problem] = config_checks.database_problems(conf, must_exist=True)
    assert problem.startswith('[database] connection is not a database URL')


def test_the_state_dir_is_the_all_in_ones_database(conf, tmp_path):
    config.use_state_dir(conf, str(tmp_path))
    assert urls.sqlite_path(conf.database.connection) == str(
        tmp_path / 'cyborg.sqlite')
    assert conf.state_path == str(tmp_path)


def test_check_reports_options_and_database_together(conf, tmp_path):
    _parse(conf, tmp_path, '[DEFAULT]\nperiodic_interval = 0\n'
                           '[database]\nconnection = sqlite:////nonexistent'
                           '/dir/c.sqlite\n')
    with pytest.raises(config_checks.ConfigProblems) as error:
        config.check(config.DATABASE_EXISTING)
    assert [p.split(' ')[0:2] for p in error.value.problems] == [
        ['[DEFAULT]', 'periodic_interval'], ['cannot', 'open']]


def test_refuse_prints_one_line_per_problem_and_exits_2(capsys):
    with pytest.raises(SystemExit) as error:
        config.refuse('cyborg-api', ['one', 'two'])
    assert error.value.code == 2
    assert capsys.readouterr().err == 'cyborg-api: one\ncyborg-api: two\n'


@pytest.mark.parametrize('host, loopback', [
    ('127.0.0.1', True), ('127.0.0.2', True), ('::1', True),
    ('[::1]', True), ('localhost', True), ('0.0.0.0', False),
    ('::', False), ('10.0.0.5', False), ('example.org', False)])
def test_is_loopback(host, loopback):
    assert config_checks.is_loopback(host) is loopback
