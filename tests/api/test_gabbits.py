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
list (:mod:`tests.api.fixtures`) start before its first test and
stop before the next file's, so each file has a service of its own; the
functional tests' YAML files, which name none, run with
``DeploymentFixture``. Placement
is the embedded one, started once for the session.
"""

from __future__ import annotations

import contextlib
import os

from gabbi import fixture as gabbi_fixture
import pytest

from cyborg.allinone import embedded_placement
from tests import gabbi_cases
from tests.api import fixtures

GABBITS = os.path.join(os.path.dirname(__file__), 'gabbits')
# The functional tests' YAML files, run here too with DeploymentFixture.
FUNCTIONAL_GABBITS = os.path.join(
    os.path.dirname(__file__), os.pardir, 'functional', 'gabbits')
DIRECTORIES = {'': GABBITS, 'functional/': FUNCTIONAL_GABBITS}
# The address gabbi puts in its URLs; the intercept answers them, so
# nothing is sent to it (and it is the loopback if anything ever were).
HOST = '127.0.0.1'


def _params():
    return [pytest.param((prefix, filename), name,
                         id='%s%s:%s' % (prefix, filename[:-5], name))
            for prefix, directory in DIRECTORIES.items()
            for filename in gabbi_cases.yaml_files(directory)
            for name in gabbi_cases.yaml_test_names(directory, filename)]


@pytest.fixture(scope='session')
def placement(tmp_path_factory):
    """The embedded Placement every file's service uses."""
    with embedded_placement.start(
            str(tmp_path_factory.mktemp('placement'))) as placement:
        fixtures.set_placement(placement)
        yield placement
        fixtures.set_placement(None)


class _Files:
    """The YAML file whose fixtures run: a file's fixtures start before
    its first test runs and stop when another file's test runs or the
    module ends (the items of a file are collected, and so run, one
    after the other)."""

    def __init__(self):
        self._key = None
        self._cases: dict = {}
        self._stack = contextlib.ExitStack()

    def cases(self, key: tuple[str, str]) -> dict:
        """The cases of YAML file ``key``, by name, its fixtures
        running."""
        if key != self._key:
            self.close()
            prefix, filename = key
            suite = gabbi_cases.build_suite(
                DIRECTORIES[prefix], filename, HOST, None,
                fixture_module=fixtures, intercept=fixtures.intercept,
                default_fixtures=['DeploymentFixture'])
            cases = gabbi_cases.cases_by_name(suite)
            fixture_classes = next(iter(cases.values())).fixtures
            self._stack.enter_context(gabbi_fixture.nest(
                [fix() for fix in fixture_classes]))
            self._key, self._cases = key, cases
        return self._cases

    def close(self) -> None:
        self._key, self._cases = None, {}
        self._stack.close()


@pytest.fixture(scope='module')
def gabbi_files(placement):
    files = _Files()
    yield files
    files.close()


@pytest.mark.parametrize('gabbi_file, test_name', _params())
def test_gabbi(gabbi_files, gabbi_file, test_name):
    gabbi_cases.run_case(gabbi_files.cases(gabbi_file)[test_name])
