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

"""Schema migrations with alembic."""

import os

from alembic import command as alembic_command
from alembic import config as alembic_config
from alembic import migration as alembic_migration

from cyborg.db import api as db_api

_SCRIPT_LOCATION = os.path.join(os.path.dirname(__file__), 'alembic')


def _config(engine=None) -> alembic_config.Config:
    config = alembic_config.Config()
    config.set_main_option('script_location', _SCRIPT_LOCATION)
    config.attributes['engine'] = engine or db_api.get_engine()
    return config


def upgrade(revision: str | None = None, engine=None) -> None:
    """Upgrade the database to ``revision`` (default: head)."""
    alembic_command.upgrade(_config(engine), revision or 'head')


def stamp(revision: str, engine=None) -> None:
    alembic_command.stamp(_config(engine), revision)


def version(engine=None) -> str | None:
    """The revision the database is at, or None for an empty one."""
    engine = engine or db_api.get_engine()
    with engine.connect() as connection:
        context = alembic_migration.MigrationContext.configure(connection)
        return context.get_current_revision()


def head() -> str:
    from alembic import script as alembic_script
    return alembic_script.ScriptDirectory.from_config(_config(object())
                                                      ).get_current_head()
