"""The store's errors: each message is a sentence a user can act on."""

from __future__ import annotations


class StoreError(Exception):
    """A problem the user or the caller can act on; the message says what it is."""


class DatabaseError(StoreError):
    """The database URL is not usable: unsupported, malformed, or nothing answers there."""


class InvalidValue(StoreError):
    """A value breaks a rule of the store (a user name with spaces, `first` above 100, ...)."""


class UserExists(StoreError):
    """A user with that name exists already."""


class UnknownUser(StoreError):
    """No user has that id or name."""


class UnknownJob(StoreError):
    """No job has that id."""


class JobExists(StoreError):
    """A job with that id exists already."""


class NameInUse(StoreError):
    """The owner already has a job of that name that has not ended (OpenPAI's rule)."""
