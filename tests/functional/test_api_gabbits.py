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
``response_forbidden_headers``, ``response_json_paths`` ...). Gabbi's own
pytest plugin wants the target host at collection time, so this module
does the collection itself: every YAML test becomes one pytest item per
deployment (``multiprocess`` and ``allinone``, see conftest.py), and gabbi
builds the test cases against the deployment's URL once it is running.

Tests of one file run in order and may refer to earlier ones
(``$RESPONSE``, ``$HISTORY``); running a single item runs the tests
before it in its file first, as gabbi does. Each file uses its own
device profile names, so files do not depend on each other.
"""

from __future__ import annotations

import os
import unittest

import pytest
import yaml
from gabbi import handlers
from gabbi import suitemaker
from gabbi import utils as gabbi_utils

from tests.functional import conftest

GABBITS = os.path.join(os.path.dirname(__file__), 'gabbits')



def _yaml_files() -> list[str]:
    return sorted(f for f in os.listdir(GABBITS) if f.endswith('.yaml'))


def _test_names(filename: str) -> list[str]:
    with open(os.path.join(GABBITS, filename)) as f:
        document = yaml.safe_load(f)
    names = [test['name'] for test in document['tests']]
    duplicates = {n for n in names if names.count(n) > 1}
    if duplicates:
        raise ValueError('%s: duplicate test names %s'
                         % (filename, sorted(duplicates)))
    return names


def _params():
    params = []
    for deployment in conftest.DEPLOYMENTS:
        for filename in _yaml_files():
            for name in _test_names(filename):
                params.append(pytest.param(
                    deployment, filename, name,
                    id='%s:%s:%s' % (deployment, filename[:-5], name)))
    return params


def build_cases(url: str, filename: str) -> dict[str, unittest.TestCase]:
    """gabbi's test cases of one YAML file aimed at ``url``, by name."""
    host, port, prefix, _ssl = gabbi_utils.host_info_from_target(url)
    suite_dict = gabbi_utils.load_yaml(
        yaml_file=os.path.join(GABBITS, filename))
    suite = suitemaker.test_suite_from_dict(
        unittest.TestLoader(), filename[:-5], suite_dict, GABBITS, host,
        port, None, None, prefix=prefix,
        handlers=[handler() for handler in handlers.RESPONSE_HANDLERS])
    return {case.test_data['name']: case for case in suite}


@pytest.fixture(scope='session')
def gabbi_cases():
    """Cases built so far, by (deployment, file): built once, run once."""
    return {}


def _report(result: unittest.TestResult) -> str:
    return '\n'.join(text for _case, text in result.failures + result.errors)


@pytest.mark.parametrize('deployment_name, filename, test_name', _params())
def test_gabbi(request, gabbi_cases, deployment_name, filename, test_name):
    deployment = request.getfixturevalue(deployment_name)
    key = (deployment_name, filename)
    if key not in gabbi_cases:
        gabbi_cases[key] = build_cases(deployment.url, filename)
    case = gabbi_cases[key][test_name]
    result = unittest.TestResult()
    case.run(result)
    if result.failures or result.errors:
        pytest.fail('%s\n-- service logs (%s) --\n%s'
                    % (_report(result), deployment.name, deployment.logs()),
                    pytrace=False)
    if result.unexpectedSuccesses:
        pytest.fail('marked xfail in the YAML but passed', pytrace=False)
    if result.skipped or result.expectedFailures:
        pytest.fail('YAML tests may not skip or xfail: a test that does not '
                    'run proves nothing (%s)' % (result.skipped
                                                 or result.expectedFailures),
                    pytrace=False)
    deployment.check_alive()
