"""The base of every output Struct: frozen, keyword-only; a key absent from a document is
a field that defaults to ``msgspec.UNSET`` (left out when encoded, optional in the JSON
Schema); a key always present is a required field; a key the Struct does not name is an error
(``forbid_unknown_fields``: a new key must be added here, and to the JSON Schema, before a
summary that has it validates)."""

from __future__ import annotations

import msgspec


class Out(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Base of the output Structs (no fields)."""
