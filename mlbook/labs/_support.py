"""Transitional: the kit's names under their old module (removed once every lab imports the kit)."""
from mlbook.labs.kit import *  # noqa: F401,F403
from mlbook.labs.kit import __all__  # noqa: F401
