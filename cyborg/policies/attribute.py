from cyborg.policies import base

PATH = '/v2/attributes'

rules = [
    base.rule('cyborg:attribute:get_all', base.PROJECT_MANAGER_OR_ADMIN,
              'List attributes.', [('GET', PATH)]),
    base.rule('cyborg:attribute:get_one', base.PROJECT_MANAGER_OR_ADMIN,
              'Show an attribute.', [('GET', PATH + '/{uuid}')]),
    base.rule('cyborg:attribute:create', base.ADMIN,
              'Create an attribute.', [('POST', PATH)]),
    base.rule('cyborg:attribute:delete', base.ADMIN,
              'Delete an attribute.', [('DELETE', PATH + '/{uuid}')]),
]
