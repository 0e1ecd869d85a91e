"""The inbox: envelope and codec, bounded mailbox tied to link credit.

This layer imports nothing else from actorctl except the error root.
"""

from ._envelope import (
    CONTENT_TYPE_JSON as CONTENT_TYPE_JSON,
)
from ._envelope import (
    KIND_COMMAND as KIND_COMMAND,
)
from ._envelope import (
    KIND_DOCUMENT as KIND_DOCUMENT,
)
from ._envelope import (
    KIND_EVENT as KIND_EVENT,
)
from ._envelope import (
    STATUS_ERROR as STATUS_ERROR,
)
from ._envelope import (
    STATUS_OK as STATUS_OK,
)
from ._envelope import Envelope as Envelope
from ._envelope import decode as decode
from ._envelope import encode as encode
from ._envelope import json_dumps as json_dumps
from ._mailbox import ACCEPTED as ACCEPTED
from ._mailbox import RELEASED as RELEASED
from ._mailbox import CreditLink as CreditLink
from ._mailbox import Inbound as Inbound
from ._mailbox import Mailbox as Mailbox
from ._mailbox import MailboxStatistics as MailboxStatistics
from ._mailbox import Outcome as Outcome
