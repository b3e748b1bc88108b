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

"""Building keystoneauth1 adapters from a service's option group."""

from __future__ import annotations

from typing import Any
import urllib.parse

from keystoneauth1 import adapter as ks_adapter
from keystoneauth1 import loading as ks_loading
from keystoneauth1 import session as ks_session


def load_auth(conf, group: str):
    """The group's auth plugin, or None when ``auth_type`` is unset."""
    return ks_loading.load_auth_from_conf_options(conf, group)


def load_adapter(conf, group: str, auth=None) -> ks_adapter.Adapter:
    """An adapter (session, auth, endpoint) configured by ``group``."""
    if auth is None:
        auth = load_auth(conf, group)
    session = ks_loading.load_session_from_conf_options(conf, group,
                                                        auth=auth)
    return ks_loading.load_adapter_from_conf_options(
        conf, group, session=read_environment_once(session), auth=auth)


def read_environment_once(session: ks_session.Session) -> ks_session.Session:
    """Make ``session`` read the proxy and CA bundle environment variables
    once per scheme and host, instead of for every request.

    requests looks them up again on every request (``HTTPS_PROXY``,
    ``NO_PROXY``, ``REQUESTS_CA_BUNDLE``...: about a third of the client
    CPU of a small request); a service's environment does not change
    while it runs. The settings requests derives are the same, only
    remembered. Returns ``session``.
    """
    requests_session = session.session
    derive = requests_session.merge_environment_settings
    remembered: dict[tuple, dict[str, Any]] = {}

    def merge_environment_settings(url, proxies, stream, verify, cert):
        parts = urllib.parse.urlsplit(url)
        key = (parts.scheme, parts.netloc,
               tuple(sorted((proxies or {}).items())), stream, verify, cert)
        settings = remembered.get(key)
        if settings is None:
            settings = derive(url, dict(proxies or {}), stream, verify, cert)
            remembered[key] = settings
        return dict(settings, proxies=dict(settings['proxies']))

    requests_session.merge_environment_settings = merge_environment_settings
    return session
