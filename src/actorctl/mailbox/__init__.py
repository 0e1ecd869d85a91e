"""The inbox: envelope and codec, bounded mailbox tied to link credit.

This layer imports nothing else from actorctl except the error root.
"""

from ._amqp import Sections as Sections
from ._amqp import read_message as read_message
from ._auth import ORIGIN_KEY as ORIGIN_KEY
from ._auth import SIG_NODE as SIG_NODE
from ._conditions import AUTH_VERSION as AUTH_VERSION
from ._conditions import BAD_ARGUMENTS as BAD_ARGUMENTS
from ._conditions import BAD_KIND as BAD_KIND
from ._conditions import BAD_SESSION as BAD_SESSION
from ._conditions import BAD_SIGNATURE as BAD_SIGNATURE
from ._conditions import DECODE_ERROR as DECODE_ERROR
from ._conditions import EXPIRED as EXPIRED
from ._conditions import NO_INSTANCE as NO_INSTANCE
from ._conditions import NOT_FOUND as NOT_FOUND
from ._conditions import OVER_CREDIT as OVER_CREDIT
from ._conditions import PEER_UNAVAILABLE as PEER_UNAVAILABLE
from ._conditions import REPLAY as REPLAY
from ._conditions import REVOKED_KEY as REVOKED_KEY
from ._conditions import STALE as STALE
from ._conditions import STOPPING as STOPPING
from ._conditions import UNAUTHENTICATED as UNAUTHENTICATED
from ._conditions import UNKNOWN_HANDLER as UNKNOWN_HANDLER
from ._conditions import UNKNOWN_KEY as UNKNOWN_KEY
from ._conditions import UNKNOWN_SESSION as UNKNOWN_SESSION
from ._conditions import WRONG_NODE as WRONG_NODE
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
from ._envelope import Signer as Signer
from ._envelope import canonical as canonical
from ._envelope import decode as decode
from ._envelope import encode as encode
from ._envelope import from_sections as from_sections
from ._envelope import json_dumps as json_dumps
from ._envelope import to_ms as to_ms
from ._mailbox import ACCEPTED as ACCEPTED
from ._mailbox import RELEASED as RELEASED
from ._mailbox import CreditLink as CreditLink
from ._mailbox import Inbound as Inbound
from ._mailbox import Mailbox as Mailbox
from ._mailbox import MailboxStatistics as MailboxStatistics
from ._mailbox import Outcome as Outcome
from ._signing import SESSION_ADDRESS as SESSION_ADDRESS
from ._signing import SESSION_SUBJECT as SESSION_SUBJECT
from ._signing import AuthError as AuthError
from ._signing import IdentityKey as IdentityKey
from ._signing import Keyring as Keyring
from ._signing import PublicKey as PublicKey
from ._signing import ReplayCache as ReplayCache
from ._signing import SessionOffer as SessionOffer
from ._signing import SessionSigner as SessionSigner
from ._signing import SessionTable as SessionTable
from ._signing import Verified as Verified
from ._signing import Verifier as Verifier
from ._signing import canonical_bytes as canonical_bytes
from ._signing import sign_ed25519 as sign_ed25519
from ._signing import sign_hmac as sign_hmac
