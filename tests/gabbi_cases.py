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

"""Gabbi YAML files as pytest items, without gabbi's pytest plugin.

Gabbi's plugin wants the target host at collection time; the API test
runners (``tests/functional/test_api_gabbits.py`` against deployments,
``tests/api`` in process) collect the YAML tests themselves: one
pytest item per YAML test, named by file and test, and the file's gabbi
test cases are built only when its first item runs.

Tests of one file run in order and may refer to earlier ones
(``$RESPONSE``, ``$HISTORY``); running a single item runs the tests
before it in its file first, as gabbi does.
"""

from __future__ import annotations

import os
import unittest

from gabbi import handlers
from gabbi import suitemaker
from gabbi import utils as gabbi_utils
import pytest
import yaml


def yaml_files(directory: str) -> list[str]:
    """The YAML files of ``directory``, sorted."""
    return sorted(f for f in os.listdir(directory) if f.endswith('.yaml'))


def yaml_test_names(directory: str, filename: str) -> list[str]:
    """The names of the tests of one YAML file, in order; a name used
    twice is an error (items are named after tests)."""
    with open(os.path.join(directory, filename)) as f:
        # libyaml's loader where PyYAML has it: every xdist worker reads
        # every file at collection, about 3 s of CPU each in pure Python.
        document = yaml.load(f, Loader=getattr(yaml, 'CSafeLoader',
                                               yaml.SafeLoader))
    names = [test['name'] for test in document['tests']]
    duplicates = {n for n in names if names.count(n) > 1}
    if duplicates:
        raise ValueError('%s: duplicate test names %s'
                         % (filename, sorted(duplicates)))
    return names


def build_suite(directory: str, filename: str, host: str, port,
                prefix: str = '', fixture_module=None, intercept=None,
                default_fixtures: list[str] | None = None):
    """gabbi's suite of one YAML file, aimed at ``host``:``port`` or at
    the WSGI application ``intercept()`` returns; a file that names no
    ``fixtures`` runs with ``default_fixtures``."""
    suite_dict = gabbi_utils.load_yaml(
        yaml_file=os.path.join(directory, filename))
    if default_fixtures and 'fixtures' not in suite_dict:
        suite_dict['fixtures'] = list(default_fixtures)
    # The deployments serve plain HTTP on the loopback; validating
    # certificates would only make gabbi's HTTP client of each test load
    # the system's CA store (about 45 ms of CPU a test).
    suite_dict.setdefault('defaults', {}).setdefault('cert_validate', False)
    return suitemaker.test_suite_from_dict(
        unittest.TestLoader(), filename[:-5], suite_dict, directory, host,
        port, fixture_module, intercept, prefix=prefix,
        handlers=[handler() for handler in handlers.RESPONSE_HANDLERS])


def cases_by_name(suite) -> dict[str, unittest.TestCase]:
    """The test cases of a suite :func:`build_suite` made, by name."""
    return {case.test_data['name']: case for case in suite}


def run_case(case: unittest.TestCase, context: str = '') -> None:
    """Run one gabbi test case; fail the pytest item (with ``context``,
    e.g. service logs, appended) when it failed, skipped or xfailed."""
    result = unittest.TestResult()
    case.run(result)
    if result.failures or result.errors:
        report = '\n'.join(text for _case, text
                           in result.failures + result.errors)
        pytest.fail(report + context, pytrace=False)
    if result.unexpectedSuccesses:
        pytest.fail('marked xfail in the YAML but passed', pytrace=False)
    if result.skipped or result.expectedFailures:
        pytest.fail('YAML tests may not skip or xfail: a test that does not '
                    'run proves nothing (%s)' % (result.skipped
                                                 or result.expectedFailures),
                    pytrace=False)
