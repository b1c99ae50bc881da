"""(being written)"""


def register(registry):
    pass
