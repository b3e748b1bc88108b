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

"""What ships for Prometheus and Grafana: the alert rules
(etc/prometheus/cyborg-alerts.yml) pass ``promtool check rules`` and
their unit tests (``promtool test rules``, tests/prometheus/), and every
query of the rules and of the dashboard (etc/grafana/) parses and names
only metrics the golden files pin."""

import json
import os
import re
import shutil
import subprocess

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
RULES = os.path.join(ROOT, 'etc', 'prometheus', 'cyborg-alerts.yml')
RULE_TESTS = os.path.join(ROOT, 'tests', 'prometheus',
                          'cyborg-alerts-test.yml')
DASHBOARD = os.path.join(ROOT, 'etc', 'grafana', 'cyborg-dashboard.json')
# The golden files: the fleet metrics' (conductor) and the process
# metrics' (every service).
FLEET_GOLDEN = os.path.join(ROOT, 'tests', 'unit', 'conductor',
                            'fleet_metrics_golden.json')
PROCESS_GOLDEN = os.path.join(ROOT, 'tests', 'unit', 'metrics_golden.json')

# The series a histogram family exposes besides its name.
_HISTOGRAM_SERIES = ('_bucket', '_sum', '_count')
_METRIC = re.compile(r'\bcyborg_[a-zA-Z0-9_]*')
# Grafana's variables ($name, ${name}, [[name]]): any value will do.
_VARIABLE = re.compile(r'\$\{?\w+\}?|\[\[\w+\]\]')


def promtool() -> str:
    path = shutil.which('promtool')
    if path is None:
        pytest.fail('promtool is not installed: tools/install-test-deps.sh '
                    'installs it (Debian package prometheus)')
    return path


def run_promtool(*args: str) -> str:
    result = subprocess.run([promtool(), *args], capture_output=True,
                            text=True, timeout=120, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def _yaml(path: str):
    with open(path, encoding='utf-8') as f:
        return yaml.safe_load(f)


def _rules() -> list[dict]:
    return [rule for group in _yaml(RULES)['groups']
            for rule in group['rules']]


def _dashboard() -> dict:
    with open(DASHBOARD, encoding='utf-8') as f:
        return json.load(f)


def _panels(dashboard: dict) -> list[dict]:
    """Every panel, those inside collapsed rows too, rows excluded."""
    found = []
    for panel in dashboard['panels']:
        found.extend(panel.get('panels', []))
        if panel['type'] != 'row':
            found.append(panel)
    return found


def _dashboard_queries(dashboard: dict) -> list[str]:
    queries = [target['expr'] for panel in _panels(dashboard)
               for target in panel['targets']]
    for variable in dashboard['templating']['list']:
        query = variable.get('query')
        if isinstance(query, dict):
            queries.append(query['query'])
    return queries


def _families(path: str) -> dict[str, str]:
    """{name: type} of a golden file (a list of families)."""
    with open(path, encoding='utf-8') as f:
        return {family['name']: family['type'] for family in json.load(f)}


def known_series() -> set[str]:
    """Every series name the golden files allow (a histogram's
    ``_bucket``, ``_sum`` and ``_count`` too)."""
    families = _families(FLEET_GOLDEN)
    families.update(_families(PROCESS_GOLDEN))
    names = set(families)
    for name, kind in families.items():
        if kind == 'histogram':
            names.update(name + suffix for suffix in _HISTOGRAM_SERIES)
    return names


def test_the_alert_rules_pass_promtool_check():
    assert 'SUCCESS' in run_promtool('check', 'rules', RULES)


def test_the_alert_rules_pass_their_unit_tests():
    assert 'SUCCESS' in run_promtool('test', 'rules', RULE_TESTS)


def test_every_alert_has_a_unit_test_that_fires_it():
    fired = {case['alertname'] for test in _yaml(RULE_TESTS)['tests']
             for case in test.get('alert_rule_test', [])
             if case.get('exp_alerts')}
    alerts = {rule['alert'] for rule in _rules()}
    assert alerts == fired
    assert len(alerts) == len(_rules()), 'two alerts of the same name'


def test_the_dashboard_queries_parse(tmp_path):
    """Each query (Grafana's variables replaced) as a recording rule
    that promtool checks."""
    queries = _dashboard_queries(_dashboard())
    rules = {'groups': [{'name': 'dashboard', 'rules': [
        {'record': 'cyborg:dashboard_query_%d' % number,
         'expr': _VARIABLE.sub('.*', query)}
        for number, query in enumerate(queries)
        # label_values() is Grafana's, not PromQL: only its metric.
        if not query.startswith('label_values(')]}]}
    path = tmp_path / 'dashboard-rules.yml'
    path.write_text(yaml.safe_dump(rules))
    assert 'SUCCESS' in run_promtool('check', 'rules', str(path))


def test_the_dashboard_panels():
    dashboard = _dashboard()
    panels = _panels(dashboard)
    assert len({panel['id'] for panel in dashboard['panels']}) == len(
        dashboard['panels'])
    for panel in panels:
        assert panel['targets'], panel['title']
        assert panel['datasource']['uid'] == '${datasource}', panel['title']


@pytest.mark.parametrize('source', ['alert rules', 'dashboard'])
def test_every_metric_named_is_a_golden_one(source):
    if source == 'alert rules':
        queries = [rule['expr'] for rule in _rules()]
    else:
        queries = _dashboard_queries(_dashboard())
    named = {name for query in queries for name in _METRIC.findall(query)}
    assert named
    assert named - known_series() == set()


def test_the_golden_files_do_not_overlap():
    assert not set(_families(FLEET_GOLDEN)) & set(_families(PROCESS_GOLDEN))
