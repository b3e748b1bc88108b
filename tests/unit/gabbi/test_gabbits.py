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

"""The in-process API tests: gabbi YAML files under ``gabbits/``.

Each YAML test is a pytest item (:mod:`tests.gabbi_cases`), sent to the
API application in this process through gabbi's ``intercept`` (an httpx
WSGI transport: no socket). The named fixtures of a file's ``fixtures:``
list (:mod:`tests.unit.gabbi.fixtures`) start before its first test and
stop after its last, so each file has a service of its own. Placement
is the embedded one, started once for the session.
"""

from __future__ import annotations

import os

from gabbi import fixture as gabbi_fixture
import pytest

from cyborg.common import embedded_placement
from tests import gabbi_cases
from tests.unit.gabbi import fixtures

GABBITS = os.path.join(os.path.dirname(__file__), 'gabbits')
# The address gabbi puts in its URLs; the intercept answers them, so
# nothing is sent to it (and it is the loopback if anything ever were).
HOST = '127.0.0.1'


def _params():
    return [pytest.param(filename, name, id='%s:%s' % (filename[:-5], name))
            for filename in gabbi_cases.yaml_files(GABBITS)
            for name in gabbi_cases.yaml_test_names(GABBITS, filename)]


@pytest.fixture(scope='session')
def placement(tmp_path_factory):
    """The embedded Placement every file's service uses."""
    with embedded_placement.start(
            str(tmp_path_factory.mktemp('placement'))) as placement:
        fixtures.set_placement(placement)
        yield placement
        fixtures.set_placement(None)


@pytest.fixture(scope='module')
def gabbi_file(request, placement):
    """The cases of one YAML file, by name, while its fixtures run."""
    suite = gabbi_cases.build_suite(
        GABBITS, request.param, HOST, None, fixture_module=fixtures,
        intercept=fixtures.intercept)
    cases = gabbi_cases.cases_by_name(suite)
    fixture_classes = next(iter(cases.values())).fixtures
    with gabbi_fixture.nest([fix() for fix in fixture_classes]):
        yield cases


@pytest.mark.parametrize('gabbi_file, test_name', _params(),
                         indirect=['gabbi_file'], scope='module')
def test_gabbi(gabbi_file, test_name):
    gabbi_cases.run_case(gabbi_file[test_name])
