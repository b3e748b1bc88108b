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

"""cyborg.clients.ksa: sessions that read the environment once."""

from keystoneauth1 import session as ks_session
import requests

from cyborg.clients import ksa


def _settings(session, url):
    return session.merge_environment_settings(url, {}, None, True, None)


def test_environment_is_read_once_per_host(monkeypatch):
    monkeypatch.setenv('HTTPS_PROXY', 'http://proxy.example:3128')
    monkeypatch.setenv('NO_PROXY', 'nova.internal')
    monkeypatch.setenv('REQUESTS_CA_BUNDLE', '/etc/ssl/bundle.pem')
    plain = requests.Session()
    expected = {url: _settings(plain, url) for url in (
        'https://nova.internal/v2.1/os-server-external-events',
        'https://placement.example/resource_providers')}
    assert expected['https://placement.example/resource_providers'][
        'proxies']['https'] == 'http://proxy.example:3128'
    assert 'https' not in expected[
        'https://nova.internal/v2.1/os-server-external-events']['proxies']

    reads = []
    real = requests.sessions.get_environ_proxies
    monkeypatch.setattr(requests.sessions, 'get_environ_proxies',
                        lambda *a, **k: reads.append(a) or real(*a, **k))
    session = ksa.read_environment_once(ks_session.Session()).session
    for _ in range(3):
        for url, settings in expected.items():
            assert _settings(session, url) == settings
    assert len(reads) == 2  # once per host

    # Request-level proxies still win, and the result is a copy.
    url = 'https://placement.example/traits'
    given = session.merge_environment_settings(
        url, {'https': 'http://other:1'}, None, True, None)
    assert given['proxies']['https'] == 'http://other:1'
    _settings(session, url)['proxies']['https'] = 'changed'
    assert _settings(session, url)['proxies']['https'] == (
        'http://proxy.example:3128')
    assert _settings(session, url)['verify'] == '/etc/ssl/bundle.pem'
