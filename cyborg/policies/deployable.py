from cyborg.policies import base

PATH = '/v2/deployables'

rules = [
    base.rule('cyborg:deployable:get_all', base.PROJECT_MANAGER_OR_ADMIN,
              'List deployables.', [('GET', PATH)]),
    base.rule('cyborg:deployable:get_one', base.PROJECT_MANAGER_OR_ADMIN,
              'Show a deployable.', [('GET', PATH + '/{uuid}')]),
]
