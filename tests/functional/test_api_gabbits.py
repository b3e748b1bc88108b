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

"""Declarative API tests: gabbi YAML files run against every deployment.

Each YAML file under ``gabbits/`` is a gabbi test file (the usual shape:
``defaults`` and ``tests``, each test with ``name``, ``verb``, ``url``,
``request_headers``, ``data``, ``status``, ``response_headers``,
``response_forbidden_headers``, ``response_json_paths`` ...). Every YAML test
becomes one pytest item per deployment (``multiprocess`` and
``allinone``, see conftest.py; the collection is
:mod:`tests.gabbi_cases`'s), and gabbi builds the test cases against the
deployment's URL once it is running.

Tests of one file run in order and may refer to earlier ones
(``$RESPONSE``, ``$HISTORY``); running a single item runs the tests
before it in its file first, as gabbi does. Each file uses its own
device profile names, so files do not depend on each other.
"""

from __future__ import annotations

import os
import unittest

from gabbi import utils as gabbi_utils
import pytest

from tests import gabbi_cases
from tests.functional import conftest

GABBITS = os.path.join(os.path.dirname(__file__), 'gabbits')


def _params():
    params = []
    for deployment in conftest.DEPLOYMENTS:
        for filename in gabbi_cases.yaml_files(GABBITS):
            for name in gabbi_cases.yaml_test_names(GABBITS, filename):
                params.append(pytest.param(
                    deployment, filename, name,
                    id='%s:%s:%s' % (deployment, filename[:-5], name)))
    return params


def build_cases(url: str, filename: str) -> dict[str, unittest.TestCase]:
    """gabbi's test cases of one YAML file aimed at ``url``, by name."""
    host, port, prefix, _ssl = gabbi_utils.host_info_from_target(url)
    return gabbi_cases.cases_by_name(gabbi_cases.build_suite(
        GABBITS, filename, host, port, prefix=prefix))


@pytest.fixture(scope='session')
def gabbi_cases_built():
    """Cases built so far, by (deployment, file): built once, run once."""
    return {}


@pytest.mark.parametrize('deployment_name, filename, test_name', _params())
def test_gabbi(request, gabbi_cases_built, deployment_name, filename,
               test_name):
    deployment = request.getfixturevalue(deployment_name)
    key = (deployment_name, filename)
    if key not in gabbi_cases_built:
        gabbi_cases_built[key] = build_cases(deployment.url, filename)
    gabbi_cases.run_case(
        gabbi_cases_built[key][test_name],
        '\n-- service logs (%s) --\n%s' % (deployment.name,
                                           deployment.logs()))
    deployment.check_alive()
