"""The one exception type the command line turns into a one-line message."""


class MlbookError(Exception):
    """A problem the user can fix; printed as ``mlbook: <message>`` without a traceback."""
