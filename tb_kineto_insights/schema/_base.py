"""The base of every output Struct: frozen, keyword-only; a key absent from a document is
a field that defaults to ``msgspec.UNSET`` (left out when encoded, optional in the JSON
Schema); a key always present is a required field."""

from __future__ import annotations

import msgspec


class Out(msgspec.Struct, frozen=True, kw_only=True):
    """Base of the output Structs (no fields)."""
