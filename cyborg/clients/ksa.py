"""Building keystoneauth1 adapters from a service's option group."""

from keystoneauth1 import adapter as ks_adapter
from keystoneauth1 import loading as ks_loading


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
        conf, group, session=session, auth=auth)
