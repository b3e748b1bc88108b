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

"""cyborg-status: upgrade readiness checks."""

import sys

from oslo_upgradecheck import common_checks
from oslo_upgradecheck import upgradecheck
from oslo_utils import timeutils

from cyborg import context as cyborg_context
from cyborg.clients import placement as placement_client
from cyborg.common import config
from cyborg.common import exception
from cyborg.conductor import quotas
from cyborg.conf import CONF
from cyborg.conf import quota as quota_conf
from cyborg.db import api as db_api
from cyborg.db import migration
from cyborg.db import services as services_db


class Checks(upgradecheck.UpgradeCommands):
    """Checks an operator runs before and after an upgrade."""

    def _check_database(self):
        try:
            current = migration.version()
        except Exception as e:
            return upgradecheck.Result(upgradecheck.Code.FAILURE,
                                       'Cannot read the database: %s' % e)
        head = migration.head()
        if current != head:
            return upgradecheck.Result(
                upgradecheck.Code.FAILURE,
                'Database is at revision %s, code expects %s: run '
                '"cyborg-dbsync upgrade".' % (current, head))
        return upgradecheck.Result(upgradecheck.Code.SUCCESS)

    def _check_services(self):
        try:
            services = services_db.service_list(
                cyborg_context.get_admin_context())
        except Exception as e:
            return upgradecheck.Result(
                upgradecheck.Code.FAILURE,
                'Cannot list services (%s); is the database migrated?'
                % type(e).__name__)
        if not services:
            return upgradecheck.Result(
                upgradecheck.Code.WARNING,
                'No cyborg service has reported yet.')
        now = timeutils.utcnow()
        down = [
            '%s on %s' % (s['binary'], s['host']) for s in services
            if s['last_seen_up'] is None
            or (now - s['last_seen_up']).total_seconds()
            > CONF.service_down_time]
        if down:
            return upgradecheck.Result(
                upgradecheck.Code.WARNING,
                'Services not reporting within %ds: %s'
                % (CONF.service_down_time, ', '.join(down)))
        return upgradecheck.Result(upgradecheck.Code.SUCCESS)

    def _check_placement(self):
        if not CONF.placement.auth_type:
            return upgradecheck.Result(
                upgradecheck.Code.FAILURE,
                '[placement] is not configured (no auth_type): the '
                'conductor cannot report devices to Placement.')
        try:
            client = placement_client.PlacementClient.from_conf(CONF)
            version = client.check_version()
        except Exception as e:
            return upgradecheck.Result(upgradecheck.Code.FAILURE,
                                       'Placement check failed: %s' % e)
        return upgradecheck.Result(
            upgradecheck.Code.SUCCESS,
            'Placement supports up to microversion %s (cyborg needs %s).'
            % (version, placement_client.PLACEMENT_MICROVERSION))

    def _check_limits(self):
        if CONF.quota.driver != quota_conf.UNIFIED_LIMITS:
            return upgradecheck.Result(
                upgradecheck.Code.SUCCESS,
                'Per-project limits are off ([quota] driver = %s).'
                % CONF.quota.driver)
        try:
            missing = quotas.unregistered_limits(
                cyborg_context.get_admin_context(), CONF)
        except exception.QuotaUnavailable as e:
            return upgradecheck.Result(upgradecheck.Code.FAILURE, str(e))
        except Exception as e:
            return upgradecheck.Result(
                upgradecheck.Code.FAILURE,
                'Cannot list the device profiles (%s); is the database '
                'migrated?' % type(e).__name__)
        if missing:
            return upgradecheck.Result(
                upgradecheck.Code.WARNING,
                'Resources without a registered limit in Keystone '
                '([quota] unified_limits_resource_strategy = %s): %s'
                % (CONF.quota.unified_limits_resource_strategy,
                   '; '.join(quotas.describe_unregistered(missing))))
        return upgradecheck.Result(upgradecheck.Code.SUCCESS)

    _upgrade_checks = (
        ('Database schema', _check_database),
        ('Services reporting', _check_services),
        ('Placement API', _check_placement),
        ('Unified limits', _check_limits),
        ('Policy File JSON to YAML Migration',
         (common_checks.check_policy_json, {'conf': CONF})),
    )


def main(argv: list[str] | None = None) -> int:
    argv = argv or sys.argv
    config.register_logging_opts()
    config.register_state_dir_opt()
    upgradecheck.register_cli_options(CONF, Checks())
    # The configuration is checked before any check runs: a database
    # that cannot be opened is one line naming its path, not a failed
    # check with SQLite's "unable to open database file".
    config.prepare_service(['cyborg-status'] + argv[1:],
                           database=config.DATABASE_EXISTING,
                           state_dir=True)
    db_api.configure(CONF)
    return upgradecheck.run(CONF)
