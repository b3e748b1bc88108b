"""The conductor's RPC endpoint: every write to the database goes here."""

from typing import Any

from oslo_log import log as logging
import oslo_messaging as messaging
from oslo_utils import timeutils

from cyborg.common import constants
from cyborg.db import api as db_api

LOG = logging.getLogger(__name__)


class ConductorManager:
    """Handles conductor RPC requests."""

    target = messaging.Target(version=constants.RPC_API_VERSION)

    def __init__(self, host: str):
        self.host = host

    def device_profile_create(self, context, values: dict[str, Any]
                              ) -> dict[str, Any]:
        profile = db_api.device_profile_create(context, values)
        LOG.info('Created device profile %(name)s (%(uuid)s)', profile)
        return _jsonable(profile)

    def device_profile_delete(self, context, idents: list[list[str]]
                              ) -> None:
        db_api.device_profile_delete(context, [tuple(i) for i in idents])
        LOG.info('Deleted device profiles %s',
                 ', '.join(value for _key, value in idents))

    def service_heartbeat(self, context, host: str, binary: str) -> None:
        db_api.service_heartbeat(context, host, binary, timeutils.utcnow())


def _jsonable(values: dict[str, Any]) -> dict[str, Any]:
    """Datetimes as ISO strings, so the result crosses any transport."""
    return {key: value.isoformat() if hasattr(value, 'isoformat') else value
            for key, value in values.items()}
